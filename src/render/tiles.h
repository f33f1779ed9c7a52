// Pictures made of pictures: signed maps in colour, a map over its input, and
// captioned tiles in rows (experiment results, Min/Max patches, bin
// samples).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "render/image.h"

namespace nansense::render {

// `map` [H, W] float stretched to h x w (bilinear), the way the page draws
// maps at input size.
torch::Tensor stretched(const torch::Tensor& map, int64_t h, int64_t w);

// [H, W] float in colour, scaled by its largest magnitude: diverging (blue
// negative, red positive) or, `one_sided`, 0..max; NaN marked.
Image colour_map(const torch::Tensor& map, bool one_sided);

// The input in grey with `heat` (colour_map of `map`) over it where |map| is
// strong.
Image overlay(const Image& input, const Image& heat, const torch::Tensor& map);

// A picture with its caption.
struct Tile {
  Image image;
  std::string label;
};

// Tiles side by side in rows, each scaled up by an integer factor towards
// `tile_height` so small images (28x28) stay readable, each captioned under it.
Image compose(const std::vector<std::vector<Tile>>& rows, int tile_height = 112);

}  // namespace nansense::render
