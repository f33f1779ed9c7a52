// The controller's statistics queries: layer activations/gradients and a
// layer's parameters in the last captured batch. They read the immutable
// snapshot only, so they run on the caller's thread and never touch training.
#include <cmath>
#include <limits>

#include "common/tensor_stats.h"
#include "common/text.h"
#include "server/controller/controller.h"

namespace nansense::server {

namespace {

constexpr size_t kMaxListedChannels = 64;

struct Describe {
  bool channels = false;  // report dead channels along dim 1
  bool norm = false;      // report the L2 norm of the finite values
  int64_t bins = 0;       // histogram bins; 0 for none
};

// Non-empty histogram bins over [lo, hi] as [bin centre, count] pairs.
json histogram(const torch::Tensor& finite_values, int64_t bins, double lo, double hi) {
  json out = {{"bins", bins}, {"min", nullptr}, {"max", nullptr}};
  json pairs = json::array();
  if (finite_values.numel() > 0) {
    out["min"] = number(lo);
    out["max"] = number(hi);
    if (lo == hi) {
      pairs.push_back({number(lo), finite_values.numel()});
      out["bin_width"] = 0;
    } else {
      // Values outside the range (a channel against its layer's range cannot
      // have any) are clamped into the end bins.
      auto counts = torch::histc(finite_values.clamp(lo, hi), bins, lo, hi).to(torch::kLong);
      const double width = (hi - lo) / static_cast<double>(bins);
      auto c = counts.accessor<int64_t, 1>();
      for (int64_t i = 0; i < bins; ++i) {
        if (c[i] > 0) pairs.push_back({number(lo + (static_cast<double>(i) + 0.5) * width), c[i]});
      }
      out["bin_width"] = number(width);
    }
  }
  out["pairs"] = std::move(pairs);
  return out;
}

// The shared statistics of one tensor (common/tensor_stats.h) plus what only
// these queries show: dead channels and a histogram of the finite values.
// `range` fixes the histogram range (a channel is binned over its layer's
// range so the two compare); by default the finite min..max.
json describe(const torch::Tensor& tensor, const Describe& how,
              std::optional<std::pair<double, double>> range = std::nullopt) {
  const TensorStats stats = common::tensor_stats(tensor, {.spread = true, .norm = how.norm});
  json out = common::to_json(stats);
  if (tensor.is_complex()) return out;
  torch::NoGradGuard no_grad;
  if (how.channels && tensor.dim() >= 2 && tensor.size(1) > 0 && tensor.size(0) > 0) {
    const int64_t channels = tensor.size(1);
    // Dead: every value of the channel is exactly zero over the whole batch.
    auto dead = tensor.detach().transpose(0, 1).reshape({channels, -1}).eq(0).all(1);
    auto indices = dead.nonzero().reshape({-1});
    json listed = json::array();
    auto idx = indices.accessor<int64_t, 1>();
    for (int64_t i = 0; i < indices.numel() && listed.size() < kMaxListedChannels; ++i) listed.push_back(idx[i]);
    json dead_channels = {{"count", indices.numel()}, {"of", channels}, {"indices", listed}};
    if (static_cast<size_t>(indices.numel()) > listed.size()) dead_channels["indices_truncated"] = true;
    out["dead_channels"] = std::move(dead_channels);
  }
  if (how.bins > 0) {
    double lo = 0, hi = 0;
    if (range) {
      std::tie(lo, hi) = *range;
    } else if (stats.min && stats.max) {
      lo = *stats.min;
      hi = *stats.max;
    }
    auto flat = tensor.detach().to(torch::kDouble).reshape({-1});
    out["histogram"] = histogram(flat.masked_select(torch::isfinite(flat)), how.bins, lo, hi);
  }
  return out;
}

// The finite min..max of a tensor, if it has finite values.
std::optional<std::pair<double, double>> finite_range(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  auto flat = t.detach().to(torch::kDouble).reshape({-1});
  auto values = flat.masked_select(torch::isfinite(flat));
  if (values.numel() == 0) return std::nullopt;
  return std::make_pair(values.min().item<double>(), values.max().item<double>());
}

// A layer's figures with the counts, min, max and mean of the whole batch
// where the snapshot budget trimmed its copy.
json with_whole_batch(json figures, const std::map<std::string, TensorStats>& whole, const std::string& layer) {
  auto it = whole.find(layer);
  if (it == whole.end()) return figures;
  const json whole_batch = common::to_json(it->second);
  for (const auto& [key, value] : whole_batch.items()) figures[key] = value;
  return figures;
}

const LayerInfo& find_layer(const Architecture& arch, const std::string& name) {
  if (const LayerInfo* layer = arch.find(name)) return *layer;
  std::vector<std::string> known;
  for (const auto& l : arch.layers) known.push_back(l.name);
  throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + name + "\"; layers: " + common::join(known));
}

}  // namespace

LayerStats ViewArea::get_layer_stats(const std::vector<std::string>& names, const LayerStatsOptions& options) const {
  auto snap = owner_.require_snapshot();
  const Architecture& arch = *snap->architecture;
  std::vector<const LayerInfo*> layers;
  if (names.empty()) {
    for (const auto& l : arch.layers) layers.push_back(&l);
  } else {
    for (const auto& name : names) layers.push_back(&find_layer(arch, name));
  }

  Describe how;
  how.channels = true;
  how.bins = options.include_histogram ? options.bins : 0;
  LayerStats out;
  out.position = to_json(snap->position);
  out.sequence = snap->sequence;
  for (const LayerInfo* layer : layers) {
    LayerStatsEntry entry;
    entry.name = layer->name;
    entry.kind = layer->kind;
    auto act = snap->activations.find(layer->name);
    auto grad = snap->activation_gradients.find(layer->name);
    if (options.channel) {
      // Checked before any work so one bad layer refuses the whole query.
      const torch::Tensor* t = act != snap->activations.end() ? &act->second : nullptr;
      if (!t && grad != snap->activation_gradients.end()) t = &grad->second;
      if (t && t->dim() < 2) {
        throw Refusal(Refusal::Kind::kInvalidArgument,
                      "layer \"" + layer->name + "\" has no channel dimension (shape " + json(t->sizes().vec()).dump() +
                          "); leave channel out for it",
                      "channel");
      }
      if (t && *options.channel >= t->size(1)) {
        throw Refusal(Refusal::Kind::kInvalidArgument,
                      "channel " + std::to_string(*options.channel) + " is out of range for layer \"" + layer->name +
                          "\", which has " + std::to_string(t->size(1)) + " channels along dim 1 (0.." +
                          std::to_string(t->size(1) - 1) + ")",
                      "channel");
      }
    }
    auto summarise = [&](const torch::Tensor& t) {
      json s = describe(t, how);
      if (options.channel) {
        Describe one;
        one.bins = how.bins;
        json c = describe(t.select(1, *options.channel), one, how.bins > 0 ? finite_range(t) : std::nullopt);
        c["index"] = *options.channel;
        s["channel"] = std::move(c);
      }
      return s;
    };
    if (act != snap->activations.end()) {
      entry.activation = with_whole_batch(summarise(act->second), snap->activation_stats, layer->name);
    }
    if (grad != snap->activation_gradients.end()) {
      entry.gradient = with_whole_batch(summarise(grad->second), snap->activation_gradient_stats, layer->name);
    } else {
      entry.gradient_note = layer->role == LayerInfo::Role::kInput
                                ? "inputs get no gradient"
                                : "no backward ran through this layer in this batch (an eval phase, or it "
                                  "does not reach the loss)";
    }
    out.layers.push_back(std::move(entry));
  }
  if (snap->trimmed()) {
    out.samples = samples_kept(*snap,
                               "counts, min, max and mean cover the whole batch; std, median, zero_fraction, "
                               "norm, dead channels, histograms and channel figures cover the kept samples");
  }
  return out;
}

WeightStats WeightArea::get_weight_stats(const std::string& layer_name, const std::vector<std::string>& wanted) const {
  auto snap = owner_.require_snapshot();
  auto [found, chosen] = layer_parameters(*snap, layer_name, wanted);
  const LayerInfo& layer = *found;

  Describe how;
  how.norm = true;
  const bool has_optimizer = !snap->optimizer_hyperparams.empty() || !snap->optimizer_state.empty();
  WeightStats out{layer.name, layer.kind, to_json(snap->position), snap->sequence, {}};
  for (const auto& name : chosen) {
    ParameterStats& entry = out.parameters.emplace_back();
    entry.name = name;
    auto w = snap->weights.find(name);
    if (w == snap->weights.end()) {
      entry.note = "this parameter was not captured in this batch";
      continue;
    }
    entry.value = describe(w->second, how);
    entry.default_layout = weight_layout_json(render::default_weight_layout(w->second.sizes()));
    auto g = snap->weight_gradients.find(name);
    entry.gradient = g != snap->weight_gradients.end() ? describe(g->second, how) : json(nullptr);
    if (g == snap->weight_gradients.end()) {
      entry.gradient_note =
          "no gradient: an eval phase, a frozen parameter, or zero_grad(set_to_none) before "
          "the capture";
    }
    if (auto st = snap->optimizer_state.find(name); st != snap->optimizer_state.end()) {
      auto& state = entry.optimizer_state.emplace();
      for (const auto& [key, t] : st->second) state[key] = t.dim() == 0 ? number(t.item<double>()) : describe(t, how);
    }
    auto hp = snap->optimizer_hyperparams.find(name);
    if (hp != snap->optimizer_hyperparams.end()) {
      auto& hyper = entry.hyperparameters.emplace();
      for (const auto& [key, v] : hp->second) hyper[key] = number(v);
    }
    if (auto in = snap->custom_weight_tensors.find(name); in != snap->custom_weight_tensors.end()) {
      auto& instruments = entry.instruments.emplace();
      for (const auto& [key, t] : in->second) instruments[key] = describe(t, how);
    }
    if (!entry.optimizer_state) {
      entry.optimizer_state_note =
          !has_optimizer ? "no optimizer state: the session was started without StartOptions().optimizer(&optimizer)"
          : hp == snap->optimizer_hyperparams.end()
              ? "the optimizer does not hold this parameter (it is in no param group)"
              : "the optimizer holds no state for it yet: state appears after its first step (plain SGD without "
                "momentum keeps none)";
    }
  }
  return out;
}

}  // namespace nansense::server
