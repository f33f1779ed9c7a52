// What an accumulator keeps once its epoch is over and its bins are freed:
// the statistics a history holds for every older (layer, phase, epoch).
#pragma once

#include <cstdint>

#include "nansense/stats.h"

namespace nansense::stats {

// The scalars of a TensorStatsSnapshot without its bins, in 96 bytes where
// the snapshot takes 208 (plus the accumulator around it): the optional
// fields' presence in one byte of flags instead of a flag and 7 bytes of
// padding each, the dtype as its one-byte enum. A 200-layer run keeps one per
// layer, phase, kind and epoch (docs/benchmarks.md, "Memory").
class CollapsedStats {
 public:
  CollapsedStats() = default;
  // Keeps every field of `v` but its bins (hist, channel_hists,
  // dead_channels and binned), which a collapsed accumulator no longer has.
  explicit CollapsedStats(const TensorStatsSnapshot& v);
  // The snapshot it was made from, bit for bit, with no bins (binned 0).
  TensorStatsSnapshot expand() const;

 private:
  enum Present : uint8_t { kMin = 1, kMax = 2, kMedian = 4, kDeadCount = 8 };
  int64_t n_ = 0, nan_ = 0, pos_inf_ = 0, neg_inf_ = 0, channels_ = 0, dead_count_ = 0;
  double sum_ = 0, sum_sq_ = 0, min_ = 0, max_ = 0, median_ = 0;
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  uint8_t present_ = 0;
};

}  // namespace nansense::stats
