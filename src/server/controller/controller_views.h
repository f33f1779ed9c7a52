// The controller's views of the last captured batch: the graph, the
// per-layer summary, layer statistics, and the activation/gradient strips
// and input pictures the main page shows. They read the immutable snapshot
// the caller is shown (Controller::shown_snapshot) and never touch training.
// Implemented in controller.cpp and controller_stats.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nansense/snapshot.h"
#include "render/render_cache.h"
#include "render/strip.h"
#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/replies_views.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;

class ViewArea {
 public:
  ViewArea(Controller& owner, detail::SessionPort& session);

  // The traced graph: layers in execution order, edges, model inputs;
  // captured false with a reason before the first captured batch.
  ArchitectureView get_architecture() const;
  // Per-layer summary of the last captured batch.
  SnapshotSummary get_snapshot() const;

  // Statistics of layers in the last captured batch (controller_stats.cpp):
  // per activation and gradient the shared tensor statistics with spread
  // (common/tensor_stats.h) and dead channels (dim 1 all zero over the
  // batch); optionally a histogram of the finite values and one channel's
  // statistics. An empty `layers` means every layer.
  struct LayerStatsOptions {
    bool include_histogram = false;
    int64_t bins = 32;
    std::optional<int64_t> channel;  // an index along dim 1
  };
  LayerStats get_layer_stats(const std::vector<std::string>& layers, const LayerStatsOptions& options) const;

  // A layer's activation or gradient strip for one sample of the last captured
  // batch, as PNG, with what it shows (scale, layout, non-finite counts).
  // kind "instrument:<name>" draws a layer-tensor instrument's output.
  // `shown`: the snapshot the caller shows. A refusal of the latest snapshot
  // when that is another one throws SnapshotReplaced instead (the caller's
  // snapshot was not refused; a picture the latest can give is still drawn).
  std::shared_ptr<const StripPicture> render_strip(const std::string& layer, const std::string& kind,
                                                   const render::StripOptions& options,
                                                   std::optional<uint64_t> shown = std::nullopt) const;
  // One sample of model input `input` (index into the snapshot's inputs) as
  // the image it was (input_mean/std, input_transform) or a colour strip;
  // `shown` as for render_strip.
  std::shared_ptr<const InputPicture> render_input(int64_t input, int64_t sample,
                                                   std::optional<uint64_t> shown = std::nullopt) const;

 private:
  // render_strip's and render_input's pictures of `snap`.
  std::shared_ptr<const StripPicture> draw_strip(const std::shared_ptr<const BatchSnapshot>& snap,
                                                 const std::string& layer, const std::string& kind,
                                                 const render::StripOptions& options) const;
  std::shared_ptr<const InputPicture> draw_input(const std::shared_ptr<const BatchSnapshot>& snap, int64_t input,
                                                 int64_t sample) const;

  Controller& owner_;
  detail::SessionPort& session_;
  mutable std::mutex cache_mu_;
  mutable uint64_t cached_sequence_ = 0;
  mutable std::shared_ptr<const SnapshotSummary> cached_snapshot_;
  mutable render::RenderCache<StripPicture> strip_cache_{256};
  mutable render::RenderCache<InputPicture> input_cache_{32};
};

}  // namespace nansense::server
