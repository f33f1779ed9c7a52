// The Weights page's queries: a layer's parameters and every tensor that
// belongs to one (its gradient, optimizer state, weight-tensor instruments),
// drawn by dimension roles. They read the immutable snapshot only.
#include <algorithm>
#include <stdexcept>

#include "common/dtype.h"
#include "common/text.h"
#include "server/controller/controller.h"

namespace nansense::server {

namespace {

const std::string kStatePrefix = "state:";
const std::string kInstrumentPrefix = "instrument:";

// Every tensor name render_weight takes for `parameter` in `snap`, in the
// page's order; scalar optimizer state is left out (it is a number, not a
// picture).
std::vector<std::string> tensors_of(const BatchSnapshot& snap, const std::string& parameter) {
  std::vector<std::string> names = {"weight"};
  if (snap.weight_gradients.count(parameter)) names.push_back("gradient");
  if (auto st = snap.optimizer_state.find(parameter); st != snap.optimizer_state.end()) {
    for (const auto& [key, t] : st->second) {
      if (t.dim() > 0) names.push_back(kStatePrefix + key);
    }
  }
  if (auto in = snap.custom_weight_tensors.find(parameter); in != snap.custom_weight_tensors.end()) {
    for (const auto& [name, t] : in->second) names.push_back(kInstrumentPrefix + name);
  }
  return names;
}

// The tensor `name` of `parameter`, or a refusal naming what there is.
const torch::Tensor& tensor_of(const BatchSnapshot& snap, const std::string& parameter, const std::string& name) {
  const auto refuse = [&](Refusal::Kind kind, const std::string& why) -> const torch::Tensor& {
    throw Refusal(kind, why + "; " + parameter + " has: " + common::join(tensors_of(snap, parameter)), "tensor");
  };
  if (name == "weight") {
    auto w = snap.weights.find(parameter);
    if (w == snap.weights.end()) {
      throw Refusal(Refusal::Kind::kNotFound,
                    parameter + " was not captured in the batch at " + snap.position.to_string(), "parameter");
    }
    return w->second;
  }
  if (name == "gradient") {
    auto g = snap.weight_gradients.find(parameter);
    if (g != snap.weight_gradients.end()) return g->second;
    return refuse(Refusal::Kind::kNotFound,
                  "no gradient of " + parameter + " in the batch at " + snap.position.to_string() +
                      ": none before the first backward, in an eval phase, for a frozen parameter, or after "
                      "zero_grad(set_to_none)");
  }
  if (name.rfind(kStatePrefix, 0) == 0) {
    const std::string key = name.substr(kStatePrefix.size());
    auto st = snap.optimizer_state.find(parameter);
    if (st == snap.optimizer_state.end() || !st->second.count(key)) {
      return refuse(Refusal::Kind::kNotFound, "the optimizer holds no state \"" + key + "\" for " + parameter);
    }
    const torch::Tensor& t = st->second.at(key);
    if (t.dim() == 0) {
      return refuse(Refusal::Kind::kInvalidArgument, "state \"" + key + "\" is a scalar (" +
                                                         number(t.item<double>()).dump() +
                                                         "), not a picture: get_weight_stats shows it");
    }
    return t;
  }
  if (name.rfind(kInstrumentPrefix, 0) == 0) {
    const std::string key = name.substr(kInstrumentPrefix.size());
    auto in = snap.custom_weight_tensors.find(parameter);
    if (in == snap.custom_weight_tensors.end() || !in->second.count(key)) {
      return refuse(Refusal::Kind::kNotFound,
                    "no weight-tensor instrument \"" + key + "\" output for " + parameter +
                        " (instruments run for the layers the statistics collect, on captured batches)");
    }
    return in->second.at(key);
  }
  return refuse(
      Refusal::Kind::kInvalidArgument,
      "tensor must be \"weight\", \"gradient\", \"state:<key>\" or \"instrument:<name>\", got \"" + name + "\"");
}

std::string request_key(const render::WeightLayoutRequest& r) {
  const auto part = [](const std::optional<int64_t>& d) { return d ? std::to_string(*d) : std::string("d"); };
  std::string key = part(r.x_dim) + "," + part(r.y_dim) + "," + part(r.tile_dim) + ",";
  for (int64_t i : r.index) key += std::to_string(i) + ".";
  return key;
}

}  // namespace

WeightArea::WeightArea(Controller& owner) : owner_(owner) {}

std::pair<const LayerInfo*, std::vector<std::string>> WeightArea::layer_parameters(
    const BatchSnapshot& snap, const std::string& layer_name, const std::vector<std::string>& wanted,
    const std::string& argument) const {
  const Architecture& arch = *snap.architecture;
  const LayerInfo* layer = arch.find(layer_name);
  if (!layer) {
    std::vector<std::string> known;
    for (const auto& l : arch.layers) known.push_back(l.name);
    throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + layer_name + "\"; layers: " + common::join(known),
                  "layer");
  }
  if (layer->parameters.empty()) {
    std::vector<std::string> with;
    for (const auto& l : arch.layers) {
      if (!l.parameters.empty()) with.push_back(l.name);
    }
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "layer \"" + layer->name + "\" (" + layer->kind +
                      ") has no parameters; layers with parameters: " + common::join(with),
                  "layer");
  }
  std::vector<std::string> chosen;
  for (const auto& name : wanted) {
    std::string match;
    for (const auto& p : layer->parameters) {
      if (p == name || p == layer->module + "." + name) match = p;
    }
    if (match.empty()) {
      throw Refusal(Refusal::Kind::kNotFound,
                    "layer \"" + layer->name + "\" has no parameter \"" + name +
                        "\"; its parameters: " + common::join(layer->parameters),
                    argument);
    }
    chosen.push_back(match);
  }
  if (chosen.empty()) chosen = layer->parameters;
  return {layer, chosen};
}

std::shared_ptr<const WeightPicture> WeightArea::render_weight(const std::string& layer, const std::string& parameter,
                                                               const std::string& tensor,
                                                               const render::WeightLayoutRequest& layout,
                                                               std::optional<uint64_t> shown) const {
  auto snap = owner_.require_snapshot();
  // An unknown layer or parameter is the caller's mistake whichever snapshot it shows.
  layer_parameters(*snap, layer, {parameter}, "parameter");
  try {
    return draw_weight(snap, layer, parameter, tensor, layout);
  } catch (const Refusal& e) {
    // A tensor the newer snapshot lacks (no gradient in an eval batch) is no
    // refusal of the caller's snapshot; a bad layout or name stays one.
    if (shown && *shown != snap->sequence && e.kind() == Refusal::Kind::kNotFound) {
      throw SnapshotReplaced(*shown, snap->sequence, e.what());
    }
    throw;
  }
}

std::shared_ptr<const WeightPicture> WeightArea::draw_weight(const std::shared_ptr<const BatchSnapshot>& snap,
                                                             const std::string& layer, const std::string& parameter,
                                                             const std::string& tensor,
                                                             const render::WeightLayoutRequest& request) const {
  auto [info, names] = layer_parameters(*snap, layer, {parameter}, "parameter");
  const std::string qualified = names.front();
  const torch::Tensor& t = tensor_of(*snap, qualified, tensor);
  render::WeightLayout layout;
  try {
    layout = render::resolve_weight_layout(t.sizes(), request);
  } catch (const std::invalid_argument& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, std::string(e.what()) + " (" + qualified + " " + tensor + ")");
  }
  const std::string key = std::to_string(snap->sequence) + "|" + qualified + "|" + tensor + "|" + request_key(request);
  return weight_cache_.get_or_compute(key, [&]() -> std::shared_ptr<const WeightPicture> {
    render::Strip strip;
    try {
      strip = render::render_weight_strip(t, layout);
    } catch (const std::invalid_argument& e) {
      throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
    }
    auto out = std::make_shared<WeightPicture>();
    out->png = render::encode_png(strip.image);
    out->layer = info->name;
    out->parameter = qualified;
    out->tensor = tensor;
    out->shape = t.sizes().vec();
    out->layout = layout;
    out->position = snap->position;
    out->sequence = snap->sequence;
    out->drawn = strip.info;
    out->width = strip.image.width;
    out->height = strip.image.height;
    return out;
  });
}

WeightArea::WeightPictures WeightArea::render_weights(const std::string& layer,
                                                      const std::vector<std::string>& parameters,
                                                      const render::WeightLayoutRequest& layout) const {
  auto snap = owner_.require_snapshot();
  auto [info, chosen] = layer_parameters(*snap, layer, parameters);
  WeightPictures out;
  for (const auto& name : chosen) {
    auto w = snap->weights.find(name);
    if (w == snap->weights.end()) {
      out.missing.push_back({name, "weight", "not captured in the batch at " + snap->position.to_string()});
      continue;
    }
    const auto shape = w->second.sizes();
    for (const auto& tensor : tensors_of(*snap, name)) {
      const bool same_shape = tensor_of(*snap, name, tensor).sizes() == shape;
      out.pictures.push_back(
          draw_weight(snap, layer, name, tensor, same_shape ? layout : render::WeightLayoutRequest{}));
    }
    if (!snap->weight_gradients.count(name)) {
      out.missing.push_back({name, "gradient",
                             "no gradient yet: none before the first backward, in an eval phase, for a frozen "
                             "parameter, or after zero_grad(set_to_none)"});
    }
    json scalars = json::object();
    if (auto st = snap->optimizer_state.find(name); st != snap->optimizer_state.end()) {
      for (const auto& [key, t] : st->second) {
        if (t.dim() == 0) scalars[key] = number(t.item<double>());
      }
    }
    json hyper = json::object();
    if (auto hp = snap->optimizer_hyperparams.find(name); hp != snap->optimizer_hyperparams.end()) {
      for (const auto& [key, v] : hp->second) hyper[key] = number(v);
    }
    render::WeightLayout resolved;
    try {
      resolved = render::resolve_weight_layout(shape, layout);
    } catch (const std::invalid_argument& e) {
      throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
    }
    out.parameters.push_back({{"name", name},
                              {"shape", shape.vec()},
                              {"layout", weight_layout_json(resolved)},
                              {"scalars", std::move(scalars)},
                              {"hyperparameters", std::move(hyper)}});
  }
  return out;
}

}  // namespace nansense::server
