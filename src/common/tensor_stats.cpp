#include "common/tensor_stats.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "common/dtype.h"
#include "common/own_ops.h"

namespace nansense::common {

namespace {

// Counts and the finite values' statistics, from a double copy.
void describe_values(const torch::Tensor& d, StatsDetail detail, TensorStats& s) {
  auto flat = d.reshape({-1});
  auto values = flat.masked_select(torch::isfinite(flat));
  s.n = values.numel();
  s.nan = torch::isnan(flat).sum().item<int64_t>();
  s.pos_inf = flat.eq(std::numeric_limits<double>::infinity()).sum().item<int64_t>();
  s.neg_inf = s.numel - s.n - s.nan - s.pos_inf;
  if (s.n > 0) {
    s.min = values.min().item<double>();
    s.max = values.max().item<double>();
    s.mean = values.mean().item<double>();
  }
  if (detail.spread) {
    if (s.n > 0) {
      s.std = values.std(/*unbiased=*/false).item<double>();
      s.median = values.median().item<double>();
    }
    s.zero_fraction = s.numel > 0 ? static_cast<double>(values.eq(0).sum().item<int64_t>()) / s.numel : 0.0;
  }
  if (detail.norm) s.norm = s.n > 0 ? values.norm().item<double>() : 0.0;
}

}  // namespace

TensorStats tensor_stats(const torch::Tensor& t, StatsDetail detail) {
  // Called from inside op observers: its own ops must not be observed.
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  TensorStats s;
  if (!t.defined()) return s;
  s.shape = t.sizes().vec();
  s.dtype = dtype_name(t.scalar_type());
  s.numel = t.numel();
  if (s.numel == 0) return s;
  auto x = t.detach();
  // A sparse tensor (an nn.Embedding(sparse=True) gradient): its statistics
  // count the implicit zeros, as its dense form holds them.
  if (x.layout() != torch::kStrided) x = x.to_dense();
  if (x.is_complex()) {
    // Only counts: complex numbers have no order for min and max.
    s.n = torch::isfinite(x).sum().item<int64_t>();
    s.nan = torch::isnan(x).sum().item<int64_t>();
    return s;
  }
  if (x.is_floating_point() && !detail.spread && !detail.norm) {
    // Half-precision reductions are not all implemented on CPU.
    if (x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16) x = x.to(torch::kFloat);
    // min and max propagate NaN and show infinities: finite extremes mean
    // every value is finite, and the mean can be taken in the tensor's dtype
    // (a double copy of a large tensor costs more than the sum).
    auto [lo, hi] = torch::aminmax(x);
    const double mn = lo.item<double>(), mx = hi.item<double>();
    if (std::isfinite(mn) && std::isfinite(mx)) {
      s.n = s.numel;
      s.min = mn;
      s.max = mx;
      s.mean = x.mean().item<double>();
      return s;
    }
  }
  describe_values(x.to(torch::kDouble), detail, s);
  return s;
}

json to_json(const TensorStats& s) {
  json out = {{"shape", s.shape},     {"dtype", s.dtype},      {"numel", s.numel},     {"n", s.n},
              {"nan", s.nan},         {"pos_inf", s.pos_inf},  {"neg_inf", s.neg_inf}, {"min", number(s.min)},
              {"max", number(s.max)}, {"mean", number(s.mean)}};
  if (s.zero_fraction) {
    out["std"] = number(s.std);
    out["median"] = number(s.median);
    out["zero_fraction"] = number(s.zero_fraction);
  }
  if (s.norm) out["norm"] = number(s.norm);
  return out;
}

}  // namespace nansense::common
