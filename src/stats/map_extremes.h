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

// The extremes of `len` (>= 1) contiguous values: a vectorised pass for the
// values (AVX2 where the CPU has it), then one for each first position that
// stops there; the same figures bit for bit on every path.
MapExtreme map_extremes(const float* v, int64_t len);
// A map (or a crop) as Min/Max patches keep it: `n` values into uint8
// levels 0..254 between their finite minimum and maximum, 255 where a value
// is not finite; q[0], q[1] = the offset (the minimum) and the step
// ((max - min) / 254, 1 when that is not positive). A level is
// round-to-nearest-even((x - offset) / step) in float arithmetic, clamped:
// what the tensor ops of a device compute.
void quantise_levels(const float* x, int64_t n, uint8_t* levels, float* q);
// The path map_extremes and quantise_levels take: AVX2 where the CPU has it
// (the default) or the portable loops, so tests can hold the two to the
// same figures.
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
