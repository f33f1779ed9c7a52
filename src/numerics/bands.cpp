#include "numerics/bands.h"

#include <ATen/record_function.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "common/cpu_features.h"
#include "common/host_copy.h"
#include "common/own_ops.h"

namespace nansense::numerics {

std::optional<Band> band_of(c10::ScalarType dtype) {
  auto make = [](auto zero) {
    using T = decltype(zero);
    return Band{static_cast<double>(std::numeric_limits<T>::min()),
                static_cast<double>(std::numeric_limits<T>::max()) / kOverflowHeadroom};
  };
  switch (dtype) {
    case c10::ScalarType::Half:
      return make(c10::Half());
    case c10::ScalarType::BFloat16:
      return make(c10::BFloat16());
    case c10::ScalarType::Float:
      return make(float());
    case c10::ScalarType::Double:
      return make(double());
    default:
      return std::nullopt;
  }
}

BandStats& BandStats::operator+=(const BandStats& o) {
  numel += o.numel;
  nan += o.nan;
  inf += o.inf;
  under_abs += o.under_abs;
  over_abs += o.over_abs;
  finite_abs += o.finite_abs;
  return *this;
}

namespace {

// Sums in float64 where the device has it: counts of a billion elements and
// |x| sums of float32 values near finfo.max stay exact enough to compare.
c10::ScalarType accumulator(const torch::Tensor& t) { return common::accumulator_dtype(t.device()); }

// [numel, nan, inf, under_abs, over_abs, finite_abs] of one floating tensor.
torch::Tensor band_vector(const torch::Tensor& x, const Band& band) {
  const auto acc = accumulator(x);
  auto a = x.abs();
  auto finite_abs = torch::nan_to_num(a, 0, 0, 0);
  auto zero = torch::zeros({}, finite_abs.options());
  return torch::stack({torch::full({}, static_cast<double>(x.numel()), x.options().dtype(acc)),
                       torch::isnan(x).sum().to(acc), torch::isinf(x).sum().to(acc),
                       torch::where(finite_abs < band.tiny, finite_abs, zero).sum(acc),
                       torch::where(finite_abs >= band.overflow, finite_abs, zero).sum(acc), finite_abs.sum(acc)});
}

}  // namespace

std::vector<BandStats> band_stats(const std::vector<torch::Tensor>& tensors) {
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  std::vector<BandStats> out(tensors.size());
  // Stacked per device, so each device costs one copy back.
  std::map<std::string, std::pair<std::vector<torch::Tensor>, std::vector<size_t>>> by_device;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (!t.defined() || t.numel() == 0) continue;
    auto band = band_of(t.scalar_type());
    if (!band) continue;
    auto& group = by_device[t.device().str()];
    group.first.push_back(band_vector(t.detach(), *band).to(torch::kDouble));
    group.second.push_back(i);
  }
  for (auto& [_, group] : by_device) {
    auto all = torch::stack(group.first).to(torch::kCPU).contiguous();
    const double* v = all.data_ptr<double>();
    for (size_t k = 0; k < group.second.size(); ++k) {
      const double* r = v + 6 * k;
      out[group.second[k]] = BandStats{r[0], r[1], r[2], r[3], r[4], r[5]};
    }
  }
  return out;
}

namespace {

// The two readers of raw bits below run on every op of a traced batch,
// forward and backward: read_bits<Reader> runs a reader's AVX2 build where
// the CPU has it (twice the lanes; 64-bit compares vectorize at all), else
// its baseline build.

// Whether `n` values of `Bits` width, as raw bits, all have an exponent short
// of all ones (a finite value). An OR over the comparison vectorizes.
struct ExponentsFinite {
  template <class Bits>
  __attribute__((always_inline)) static bool run(const void* data, int64_t n, Bits exponent) {
    const Bits* v = static_cast<const Bits*>(data);
    constexpr int64_t kBlock = 4096;
    for (int64_t k = 0; k < n; k += kBlock) {
      const int64_t end = std::min(n, k + kBlock);
      Bits bad = 0;
      for (int64_t i = k; i < end; ++i) bad |= static_cast<Bits>((v[i] & exponent) == exponent);
      if (bad) return false;
    }
    return true;
  }
};

// Whether `n` values hold a NaN and whether an Inf: with the sign bit
// cleared, an Inf's bits equal `inf` and a NaN's exceed it (two ORs over
// comparisons, which vectorize); stops once both are seen.
struct KindsOf {
  template <class Bits>
  __attribute__((always_inline)) static NonFiniteKinds run(const void* data, int64_t n, Bits inf) {
    const Bits* v = static_cast<const Bits*>(data);
    const Bits magnitude = static_cast<Bits>(~(Bits(1) << (sizeof(Bits) * 8 - 1)));
    constexpr int64_t kBlock = 4096;
    NonFiniteKinds out;
    for (int64_t k = 0; k < n && !(out.nan && out.inf); k += kBlock) {
      const int64_t end = std::min(n, k + kBlock);
      Bits nan = 0, infinite = 0;
      for (int64_t i = k; i < end; ++i) {
        const Bits m = v[i] & magnitude;
        nan |= static_cast<Bits>(m > inf);
        infinite |= static_cast<Bits>(m == inf);
      }
      out.nan = out.nan || nan;
      out.inf = out.inf || infinite;
    }
    return out;
  }
};

#if defined(NANSENSE_AVX2_BUILDS)
template <class Reader, class Bits>
__attribute__((target("avx2"))) auto read_bits_avx2(const void* data, int64_t n, Bits pattern) {
  return Reader::run(data, n, pattern);
}
#endif

template <class Reader, class Bits>
auto read_bits(const void* data, int64_t n, Bits pattern) {
#if defined(NANSENSE_AVX2_BUILDS)
  if (common::cpu_has_avx2()) return read_bits_avx2<Reader>(data, n, pattern);
#endif
  return Reader::run(data, n, pattern);
}

// A CPU tensor whose values fill one block of memory from its data pointer.
bool readable_in_place(const torch::Tensor& t) {
  return t.defined() && t.is_cpu() && t.layout() == torch::kStrided && t.has_storage() &&
         t.is_non_overlapping_and_dense();
}

// f(data, n, inf) over such a tensor's values as raw bits, `inf` being the
// dtype's +Inf pattern (its exponent's bits all set); nullopt for a tensor
// that cannot be read so, or a dtype other than the four float ones.
template <class F>
auto on_float_bits(const torch::Tensor& t, F&& f) -> std::optional<decltype(f(nullptr, int64_t{}, uint32_t{}))> {
  if (!readable_in_place(t)) return std::nullopt;
  const void* data = t.numel() > 0 ? t.data_ptr() : nullptr;
  const int64_t n = t.numel();
  switch (t.scalar_type()) {
    case torch::kFloat:
      return f(data, n, uint32_t{0x7f800000u});
    case torch::kDouble:
      return f(data, n, uint64_t{0x7ff0000000000000ull});
    case torch::kHalf:
      return f(data, n, uint16_t{0x7c00});
    case torch::kBFloat16:
      return f(data, n, uint16_t{0x7f80});
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<bool> all_finite_in_place(const torch::Tensor& t) {
  return on_float_bits(t,
                       [](const void* data, int64_t n, auto inf) { return read_bits<ExponentsFinite>(data, n, inf); });
}

std::optional<NonFiniteKinds> non_finite_kinds_in_place(const torch::Tensor& t) {
  return on_float_bits(t, [](const void* data, int64_t n, auto inf) { return read_bits<KindsOf>(data, n, inf); });
}

std::vector<double> abs_sums(const std::vector<torch::Tensor>& tensors) {
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  parts.reserve(tensors.size());
  // A float32 CPU tensor is summed in place (no |x| copy, no op per tensor:
  // this runs after every checked backward; common::abs_sum). The sum is at
  // least the largest |x|, so the overflow test holds; a lane that overflows
  // reads as suspicious and the exact check decides.
  std::vector<std::optional<double>> direct(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    // Dense in any order (a transposed copy) holds the same values in one
    // block of memory from its data pointer on (torch strides are never
    // negative), which is all a sum of |x| needs.
    if (readable_in_place(t) && t.scalar_type() == torch::kFloat) {
      direct[i] = common::abs_sum(static_cast<const float*>(t.data_ptr()), t.numel());
      continue;
    }
    // float32 keeps the common case on its fast path; float64 keeps its own
    // subnormals, which float32 would flush to zero.
    const auto acc = t.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    parts.push_back(t.detach().abs().sum(acc).to(accumulator(t)).reshape({1}));
  }
  std::vector<double> out(tensors.size());
  if (parts.empty()) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = *direct[i];
    return out;
  }
  // Gathered on the first tensor's device (a model split over devices is
  // rare), then one copy back.
  for (auto& p : parts) p = p.to(parts.front().device());
  auto all = parts.size() == 1 ? parts[0] : torch::cat(parts);
  all = all.to(torch::kCPU).contiguous();
  all = all.to(torch::kDouble);
  const double* v = all.data_ptr<double>();
  size_t next = 0;
  for (size_t i = 0; i < out.size(); ++i) out[i] = direct[i] ? *direct[i] : v[next++];
  return out;
}

bool suspicious(double abs_sum, int64_t numel, c10::ScalarType dtype, bool under_over, double threshold) {
  if (!std::isfinite(abs_sum)) return true;
  if (!under_over) return false;
  auto band = band_of(dtype);
  if (!band) return false;
  // A layer's subnormal share reaches `threshold` only if its whole |x| sum is
  // at most numel * tiny / threshold (with a margin for a sum accumulated in
  // float32); an overflow needs one |x| >= the edge.
  if (abs_sum > 0 && abs_sum <= static_cast<double>(numel) * band->tiny / threshold * 1.001) return true;
  return abs_sum >= band->overflow;
}

}  // namespace nansense::numerics
