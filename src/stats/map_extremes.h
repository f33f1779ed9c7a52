// The extremes Min/Max patches rank by: for each map (one sample's channel,
// its h * w values contiguous) the largest and the smallest value and the
// first position of each. The pixel rankings need them for every map of a
// patched layer on every batch, so they are taken where the values already
// pass through the cache: by the statistics' exact fold as it goes
// (fold_exact_cpu's row visitor), else by PatchCollector in a pass of its own.
#pragma once

#include <cstdint>
#include <vector>

namespace nansense::stats {

// One map's extremes. A map holding a NaN has NaN extremes at position 0 (as
// torch's max and min propagate it). Otherwise max (min) is the largest
// (smallest) value, infinities included, and max_at (min_at) the first
// position holding a value equal to it.
struct MapExtreme {
  float max = 0, min = 0;
  int64_t max_at = 0, min_at = 0;
};

// The extremes of `len` (>= 1) contiguous values: one vectorised pass (AVX2
// where the CPU has it), the same figures bit for bit on every path.
MapExtreme map_extremes(const float* v, int64_t len);
// The path map_extremes takes: AVX2 where the CPU has it (the default) or
// the portable loop, so tests can hold the two to the same figures.
enum class ExtremesPath { kWidest, kPortable };
void set_extremes_path(ExtremesPath path);

// The extremes of the first `channels` channels' maps of a [samples,
// channels >= this, len] tensor, [samples * channels] of them (sample-major),
// filled by whoever passes over the values; `samples` stays 0 until then.
struct MapExtremesTable {
  int64_t samples = 0, channels = 0, len = 0;
  std::vector<MapExtreme> maps;
  bool filled() const { return samples > 0 && static_cast<int64_t>(maps.size()) == samples * channels; }
};

}  // namespace nansense::stats
