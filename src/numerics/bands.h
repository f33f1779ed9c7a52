// Dtype-aware bands and the per-tensor band statistics every check is built on.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

namespace nansense::numerics {

// |x| >= finfo.max / kOverflowHeadroom counts as overflow: a few more
// multiplications by 2 and the value is Inf.
inline constexpr double kOverflowHeadroom = 16;

// The band edges of a floating dtype: subnormal when 0 < |x| < tiny, overflow
// when |x| >= overflow.
struct Band {
  double tiny = 0;
  double overflow = 0;
};
// nullopt for non-floating dtypes.
std::optional<Band> band_of(c10::ScalarType dtype);

// Element counts and |x| sums of one tensor (or several, added up).
struct BandStats {
  double numel = 0;
  double nan = 0;
  double inf = 0;
  double under_abs = 0;   // summed |x| of subnormal values
  double over_abs = 0;    // summed |x| of values in the overflow band
  double finite_abs = 0;  // summed |x| of finite values

  BandStats& operator+=(const BandStats& o);
  double nan_fraction() const { return numel > 0 ? nan / numel : 0; }
  double inf_fraction() const { return numel > 0 ? inf / numel : 0; }
  double underflow_fraction() const { return finite_abs > 0 ? under_abs / finite_abs : 0; }
  double overflow_fraction() const { return finite_abs > 0 ? over_abs / finite_abs : 0; }
};

// The statistics of every tensor, computed on their devices and read back
// with one device->host copy. Non-floating tensors give all-zero stats.
std::vector<BandStats> band_stats(const std::vector<torch::Tensor>& tensors);

// The cheap test: per tensor sum |x| (accumulated in float32; a float32 CPU
// tensor in float64, in place, without a copy), read back with one copy. Used to decide whether band_stats() is needed.
std::vector<double> abs_sums(const std::vector<torch::Tensor>& tensors);

// Whether every value of a CPU tensor whose values fill one block of memory
// (strided, non-overlapping and dense: contiguous, or a transpose of such)
// of a float32, float64, float16 or bfloat16 dtype is finite, read in place
// by its exponent bits: no op, no allocation. nullopt for any other tensor
// (the caller tests it with tensor ops).
std::optional<bool> all_finite_in_place(const torch::Tensor& t);

// Which kinds of non-finite value such a tensor holds, read in place the same
// way (its bits: a NaN's exponent is all ones with a mantissa, an Inf's
// without); nullopt for any other tensor.
struct NonFiniteKinds {
  bool nan = false;
  bool inf = false;
};
std::optional<NonFiniteKinds> non_finite_kinds_in_place(const torch::Tensor& t);

// Whether a tensor whose summed |x| is `abs_sum` can trip a check: it holds a
// non-finite value (or its sum overflowed), or enough of it may lie in the
// subnormal or overflow band to reach `threshold`.
bool suspicious(double abs_sum, int64_t numel, c10::ScalarType dtype, bool under_over, double threshold);

}  // namespace nansense::numerics
