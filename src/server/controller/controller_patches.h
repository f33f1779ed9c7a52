// The controller's Min/Max patches and bin samples (controller_patches.cpp):
// where in the inputs a layer's channels respond most and least, and which
// elements fell in a histogram bin.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/replies_status.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;

class PatchArea {
 public:
  PatchArea(Controller& owner, detail::SessionPort& session);

  struct PatchOptions {
    std::string layer;
    std::optional<std::string> phase;  // nullopt: the training phase if it has patches, else the first that does
    std::vector<std::string> grids;    // rankings; empty: max_pixel and min_pixel
    bool heatmap = false;              // overlay the channel's activation (signed, red/blue)
    // The last captured batch alone (any layer, watched or not) instead of
    // an epoch's collected gallery; `phase` is then not used.
    bool current_batch = false;
  };
  // One ranking's grid: per (sample, channel) where the input came from, its
  // score and the crop as a PNG (base64), for the Stats page.
  Patches get_patches(const PatchOptions& options) const;
  // The grids as one labelled picture (MCP render_extreme_patches).
  std::shared_ptr<const Picture> render_extreme_patches(const PatchOptions& options) const;
  struct BinSampleOptions {
    std::string layer;
    std::string kind = "activation";  // or "gradient"
    std::optional<int64_t> channel;   // nullopt: the whole layer
    int64_t bin = 0;                  // 0..210
    int64_t count = 6;
  };
  // A few elements of the last captured batch in that bin (and channel),
  // with the input crop around each.
  BinSamples get_bin_samples(const BinSampleOptions& options) const;
  std::shared_ptr<const Picture> render_bin_samples(const BinSampleOptions& options) const;

 private:
  Controller& owner_;
  detail::SessionPort& session_;
};

}  // namespace nansense::server
