// The controller's Weights page: a layer's parameters in the last captured
// batch, as statistics (controller_stats.cpp) and as pictures laid out by
// dimension roles (controller_weights.cpp, render/weight_strip.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nansense/snapshot.h"
#include "render/render_cache.h"
#include "render/weight_strip.h"
#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/replies_views.h"

namespace nansense::server {

class Controller;

class WeightArea {
 public:
  explicit WeightArea(Controller& owner);

  // A layer's parameters in the last captured batch: value and gradient
  // statistics (with L2 norms), optimizer state and the param group's
  // hyperparameters, with a note where optimizer state is missing and why.
  // An empty `parameters` means all; names are qualified or short ("weight").
  WeightStats get_weight_stats(const std::string& layer, const std::vector<std::string>& parameters) const;

  // One tensor of a layer's parameter in the last captured batch, laid out
  // by dimension roles (render/weight_strip.h): `tensor` is "weight",
  // "gradient", "state:<key>" (a tensor-valued optimizer state entry) or
  // "instrument:<name>" (a watch_weight_tensor instrument); `parameter` is
  // qualified or short ("weight"). Refusals name what the layer, parameter or
  // tensor has; a layout out of range says what fits. `shown` as for
  // ViewArea::render_strip.
  std::shared_ptr<const WeightPicture> render_weight(const std::string& layer, const std::string& parameter,
                                                     const std::string& tensor,
                                                     const render::WeightLayoutRequest& layout,
                                                     std::optional<uint64_t> shown = std::nullopt) const;
  // Every tensor of each of a layer's parameters (all when `parameters` is
  // empty): weight, gradient, tensor-valued optimizer state, instruments.
  // `layout` applies to the tensors shaped like their parameter; the others
  // get their own default. What cannot be drawn is named with its reason;
  // `parameters` holds per parameter its shape, layout, scalar optimizer
  // state (Adam's step) and its group's hyperparameters.
  struct WeightPictures {
    struct Missing {
      std::string parameter;
      std::string tensor;
      std::string reason;
    };
    std::vector<std::shared_ptr<const WeightPicture>> pictures;
    std::vector<Missing> missing;
    json parameters = json::array();
  };
  WeightPictures render_weights(const std::string& layer, const std::vector<std::string>& parameters,
                                const render::WeightLayoutRequest& layout) const;

 private:
  // A layer of `snap` that has parameters, and the qualified names of those
  // `wanted` names (qualified or short; all when empty). kNotFound for an
  // unknown layer or parameter (about `argument`), kInvalidArgument for a
  // layer without parameters, each naming what there is.
  std::pair<const LayerInfo*, std::vector<std::string>> layer_parameters(
      const BatchSnapshot& snap, const std::string& layer, const std::vector<std::string>& wanted,
      const std::string& argument = "parameters") const;
  std::shared_ptr<const WeightPicture> draw_weight(const std::shared_ptr<const BatchSnapshot>& snap,
                                                   const std::string& layer, const std::string& parameter,
                                                   const std::string& tensor,
                                                   const render::WeightLayoutRequest& layout) const;

  Controller& owner_;
  mutable render::RenderCache<WeightPicture> weight_cache_{128};
};

}  // namespace nansense::server
