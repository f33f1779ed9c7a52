// The signed-log histogram every statistic shares, over the bins of
// stats/bins.h (211: 7 per decade over |x| in 1e-9 .. 1e6 on each side, a
// zero band in the middle, open end bins).
//
// NaN is never binned: it is counted on its own (TensorStatsSnapshot::nan).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "stats/bins.h"
#include "stats/map_extremes.h"

namespace nansense::stats {

// The 212 bin edges, ascending: -1e6 .. -1e-9, then 1e-9 .. 1e6; bin i lies
// between edges[i] and edges[i+1] (the zero band between -1e-9 and 1e-9).
// The end bins also hold everything beyond their outer edge.
const std::vector<double>& bin_edges();

// Where bin i is drawn and what a median falling in it reports: the
// geometric midpoint of its edges, signed; 0 for the zero band. The end bins
// report the midpoint of their finite edges (about +-8.5e5) whatever lies
// beyond +-1e6: a saturated median reads as the top of the scale.
double bin_center(int bin);

// The bin of every element (int64, same shape and device as x). NaN elements
// get -1. Records no sync: runs on the tensor's own device. A value exactly
// on an edge (as the tensor's dtype rounds it) lands in the bin on the larger
// magnitude's side: 1e-9 in bin 106, -1e-9 in bin 104, +-1e6 in the end bins.
torch::Tensor bin_index(const torch::Tensor& x);

// What accumulators count: the 211 bins of the non-infinite values, then one
// slot each for NaN, +inf and -inf, so one count over slot_index() gives
// the histogram and the non-finite counts together.
constexpr int kNanSlot = kBins;         // 211
constexpr int kPosInfSlot = kBins + 1;  // 212
constexpr int kNegInfSlot = kBins + 2;  // 213
constexpr int kSlots = kBins + 3;       // 214
torch::Tensor slot_index(const torch::Tensor& x);

// The CPU path, for float32 values laid out as [outer, channels, inner] (a
// contiguous tensor with channels at dim 1; 1, 1 and numel for a tensor
// without channels). Each runs on this thread pool (at::parallel_for).
//
// fold_exact_cpu: one pass over every value, exact in what it counts: the
// finite values' count, sum, sum of squares and extremes, and the NaN, +inf
// and -inf counts, summed in float64 (AVX-512, AVX2 or SSE2 on x86-64: well
// under a nanosecond per value; with AVX-512, channel by channel with one
// reduction per channel). With `ranges`, each channel c < tracked also gets
// its range merged into ranges[c] (which may hold earlier batches): whether
// every value lies in the zero band, for dead channels.
struct ExactFold {
  int64_t n = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  double sum = 0;
  double sum_sq = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
};
struct ChannelRange {
  int64_t seen = 0;                                      // values, non-finite ones included
  double min = std::numeric_limits<double>::infinity();  // finite values
  double max = -std::numeric_limits<double>::infinity();
  bool nonfinite = false;
  // Every value seen lies in the zero band (a NaN or infinity does not).
  bool zero_band() const;
  // Takes in what `r` saw.
  void widen(const ChannelRange& r);
};
// With `bins`, it also bins what bin_cpu would bin with the same arguments,
// each stretch right after folding it (while it is in the cache) instead of
// in a second pass.
struct SampledBins {
  const int64_t* row_offset = nullptr;
  int64_t stride = 1, run = 16;
  uint64_t seed = 0;
  int64_t* slots = nullptr;
  int64_t slot_count = 0;
};
// With `maps` (its channels set, at most `tracked`), the extremes Min/Max
// patches rank by of each map of those channels (one sample's row of one
// channel), taken right after the row is folded, while it is in the cache,
// instead of in a pass of their own; filled (maps->filled()) only when the
// pass goes channel by channel (ranges given, inner >= 64), else left empty.
void fold_exact_cpu(const float* values, int64_t outer, int64_t channels, int64_t inner, int64_t tracked,
                    ChannelRange* ranges, ExactFold& into, const SampledBins* bins = nullptr,
                    MapExtremesTable* maps = nullptr);
// The vector path fold_exact_cpu takes: the widest the CPU has (AVX-512
// where present, else AVX2 with FMA; both square by fused multiply-adds:
// the default) or the portable one (SSE2 on x86-64, plain loops elsewhere),
// so tests can hold the two to the same figures.
enum class FoldPath { kWidest, kPortable };
void set_fold_path(FoldPath path);

// bin_cpu: adds to `slots` the slot of values at row_offset[channel] (kSlots
// apart; all at 0 when row_offset is null), the slots slot_index() gives, at
// a few nanoseconds per value binned. With stride <= run, every value; else
// a stratified sample: in each window of `stride` values one run of `run`
// consecutive values (a cache line's worth, not one value per line) at
// run_start(window, ...), a position drawn from `seed` — random within its
// window, so no image row, channel or batch layout aliases with it.
int64_t run_start(int64_t window, int64_t stride, int64_t run, uint64_t seed);
void bin_cpu(const float* values, int64_t outer, int64_t channels, int64_t inner, const int64_t* row_offset,
             int64_t stride, int64_t run, uint64_t seed, int64_t* slots, int64_t slot_count);

// The 211-bin histogram of kSlots counts: the infinities join the end bins.
std::vector<int64_t> hist_from_slots(const int64_t* slots);

// The centre of the bin that holds the median count; NaN for an empty
// histogram.
std::optional<double> median_from_hist(const std::vector<int64_t>& hist);

}  // namespace nansense::stats
