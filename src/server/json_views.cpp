#include "server/json_views.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace nansense::server {

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

json to_json(const BatchPosition& pos) {
  return {{"phase", pos.phase},
          {"epoch", pos.epoch},
          {"batch_idx", pos.batch_idx},
          {"is_last_in_phase", pos.is_last_in_phase},
          {"is_last_in_epoch", pos.is_last_in_epoch},
          {"is_last_in_run", pos.is_last_in_run},
          {"text", pos.to_string()}};
}

json to_json(const std::optional<BatchPosition>& pos) { return pos ? to_json(*pos) : json(nullptr); }

json to_json(const Schedule& schedule) {
  json phases = json::array();
  for (const auto& name : schedule.phase_order()) {
    auto count = schedule.phase_count(name);
    phases.push_back({{"name", name}, {"batches", count ? json(*count) : json(nullptr)}});
  }
  auto epochs = schedule.epochs();
  return {{"epochs", epochs ? json(*epochs) : json(nullptr)},
          {"declared", schedule.declared()},
          {"phases", phases}};
}

json to_json(const Architecture& arch) {
  json layers = json::array();
  for (const auto& l : arch.layers) {
    layers.push_back({{"name", l.name},
                      {"role", std::string(to_string(l.role))},
                      {"kind", l.kind},
                      {"module", l.module},
                      {"ops", l.ops},
                      {"output_shape", l.output_shape},
                      {"dtype", l.dtype},
                      {"parameters", l.parameters},
                      {"description", l.description},
                      {"shape_op", l.shape_op}});
  }
  json edges = json::array();
  for (const auto& [from, to] : arch.edges) edges.push_back({{"from", from}, {"to", to}});
  return {{"layers", layers}, {"edges", edges}, {"inputs", arch.inputs}};
}

json tensor_summary(const torch::Tensor& t) {
  json out = {{"shape", t.sizes().vec()}, {"dtype", std::string(c10::toString(t.scalar_type()))},
              {"numel", t.numel()}};
  if (!(t.is_floating_point() || t.is_complex()) || t.numel() == 0) {
    if (t.numel() > 0 && !t.is_complex()) {
      auto d = t.to(torch::kDouble);
      out["min"] = number(d.min().item<double>());
      out["max"] = number(d.max().item<double>());
      out["mean"] = number(d.mean().item<double>());
    }
    out["non_finite"] = 0;
    return out;
  }
  torch::NoGradGuard no_grad;
  auto x = t.detach();
  // Half-precision reductions are not all implemented on CPU.
  if (x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16) x = x.to(torch::kFloat);
  if (!x.is_complex()) {
    // Two passes, no copies: min and max propagate NaN and
    // show infinities, so finite extremes mean every value is finite.
    auto [lo, hi] = torch::aminmax(x);
    const double mn = lo.item<double>(), mx = hi.item<double>();
    if (std::isfinite(mn) && std::isfinite(mx)) {
      out["non_finite"] = 0;
      out["min"] = number(mn);
      out["max"] = number(mx);
      // In the tensor's dtype: a double accumulator would first copy the
      // whole tensor to double, and fresh pages cost more than the sum.
      out["mean"] = number(x.mean().item<double>());
      return out;
    }
  }
  auto d = x.to(torch::kDouble);
  auto finite = torch::isfinite(d);
  const int64_t n_finite = finite.sum().item<int64_t>();
  out["non_finite"] = t.numel() - n_finite;
  if (n_finite == 0) {
    out["min"] = out["max"] = out["mean"] = nullptr;
    return out;
  }
  auto values = d.masked_select(finite);
  out["min"] = number(values.min().item<double>());
  out["max"] = number(values.max().item<double>());
  out["mean"] = number(values.mean().item<double>());
  return out;
}

}  // namespace nansense::server
