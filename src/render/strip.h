// Lays one sample of a captured layer tensor out as a strip of tiles and
// colours it. The one renderer behind the UI's strips and the agents' images.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "render/image.h"

namespace nansense::render {

enum class Values { kUnchanged, kAbs, kSquare };

// "unchanged", "abs", "square"; parse_values throws std::invalid_argument.
std::string_view to_string(Values values);
Values parse_values(const std::string& text);

struct StripOptions {
  int64_t sample = 0;                  // index into the batch dimension
  bool average = false;                // collapse the channels to their mean (one tile)
  Values values = Values::kUnchanged;  // applied before averaging
};

// What the picture shows, for legends and captions.
struct StripInfo {
  std::string layout;  // "channels", "features", "tokens", "matrix", "scalar"
  int64_t tiles = 0;
  int64_t tile_width = 0;
  int64_t tile_height = 0;
  double scale_max = 0;   // |value| that maps to the end of the scale
  bool diverging = true;  // false: magnitudes on the sequential scale
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  int64_t batch_size = 0;
};

struct Strip {
  Image image;
  StripInfo info;
};

// `batch` is a layer's captured tensor with the batch dimension first: [N,C,H,W]
// gives one tile per channel, [N,F] one row, [N,T,D] one T-token grid per
// channel when T is a square (else a T x D matrix), [N] one pixel. Tiles are
// separated by a 1-pixel transparent gap. The scale is shared by every tile
// and symmetric around zero. Throws std::invalid_argument for a sample out of
// range or a tensor it cannot show (naming the shape).
Strip render_strip(const torch::Tensor& batch, const StripOptions& options);

// Draws `tiles` ([T, H, W], any device and floating dtype) as T tiles in a
// row with 1-pixel transparent gaps, on one scale shared by every tile:
// symmetric around zero (`signed_scale`) or 0..max for magnitudes. `layout`
// names what the tiles are; `too_big_hint` says how to shrink a picture over
// 32768 pixels wide or high (std::invalid_argument). batch_size is left 0.
Strip render_tiles(const torch::Tensor& tiles, bool signed_scale, const std::string& layout,
                   const std::string& too_big_hint);

}  // namespace nansense::render
