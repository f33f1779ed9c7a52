// The controller's pictures: the PNG and, typed, what it shows. Transports
// send the PNG with the info as JSON (REST's X-Nansense-Render header, the
// push channel's frame header) or as a caption (MCP).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nansense/position.h"
#include "render/strip.h"
#include "render/weight_strip.h"
#include "server/controller/json_views.h"

namespace nansense::server {

// One sample's activation or gradient strip of one layer.
struct StripPicture {
  std::string png;
  std::string layer;
  std::string kind;  // "activation" or "gradient"
  BatchPosition position;
  uint64_t sequence = 0;  // the snapshot it was drawn from
  render::StripOptions options;
  render::StripInfo drawn;  // layout, tiles, scale, non-finite counts, batch size
  int64_t width = 0;
  int64_t height = 0;
};

// One sample of one model input.
struct InputPicture {
  std::string png;
  int64_t input = 0;  // index into the snapshot's inputs
  std::string name;   // its input layer's name
  BatchPosition position;
  uint64_t sequence = 0;
  int64_t sample = 0;
  int64_t batch_size = 0;
  std::string layout;  // "image" or "strip"
  int64_t width = 0;
  int64_t height = 0;
  std::string hint;  // how to see it as an image, when it is not one
  // The normalisation the picture undoes (x * std + mean; empty: none), for
  // a page that turns a colour back into input units.
  std::vector<double> mean;
  std::vector<double> std;
};

// Histograms of collected statistics over the signed-log bins
// (render_histogram): one panel per layer and kind, a series per phase (or
// one channel of each phase).
struct HistogramPicture {
  std::string png;
  std::vector<std::string> layers;
  std::optional<std::string> phase;  // nullopt: every phase
  std::optional<int64_t> channel;
  bool log_x = false;
  bool log_y = false;
  uint64_t sequence = 0;  // the statistics view it was drawn from
  int64_t width = 0;
  int64_t height = 0;
  // What each series shows: "features.0 activations: train epoch 3 (12 batches)".
  std::vector<std::string> series;
};

// An experiment's result drawn (render_experiment): dreamed images, or per
// sample an attribution map beside or over its input.
struct ExperimentPicture {
  std::string png;
  uint64_t seq = 0;
  std::string kind;
  std::string stage;
  int64_t step = 0;
  int64_t total = 0;
  bool overlay = false;
  int64_t width = 0;
  int64_t height = 0;
  std::string caption;  // what the tiles are, for an agent
};

// One tensor of one parameter (its weight, gradient, an optimizer state entry
// or a weight-tensor instrument's output) laid out by dimension roles.
struct WeightPicture {
  std::string png;
  std::string layer;
  std::string parameter;  // qualified: "features.0.weight"
  // "weight", "gradient", "state:<key>" (an optimizer state entry) or
  // "instrument:<name>" (a watch_weight_tensor instrument).
  std::string tensor;
  std::vector<int64_t> shape;
  render::WeightLayout layout;
  BatchPosition position;
  uint64_t sequence = 0;
  render::StripInfo drawn;
  int64_t width = 0;
  int64_t height = 0;
};

// A picture whose description is its own JSON (render_extreme_patches,
// render_bin_samples).
struct Picture {
  std::string png;
  std::string caption;  // what it shows, for an agent
  json info;            // everything but the PNG
};

// Everything but the PNG.
json info_json(const StripPicture& picture);
json info_json(const InputPicture& picture);
json info_json(const HistogramPicture& picture);
json info_json(const ExperimentPicture& picture);
json info_json(const WeightPicture& picture);
// {x_dim, y_dim, tile_dim (null for none), index}.
json weight_layout_json(const render::WeightLayout& layout);

}  // namespace nansense::server
