// Lays one sample of a captured layer tensor out as a strip of tiles and
// colours it. The one renderer behind the UI's strips and the agents' images.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
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
  // "diverging" or "sequential" (floating tensors), "boolean" (a bool: two
  // colours) or "categorical" (an integer: a colour per value).
  std::string scale = "diverging";
  std::string dtype;  // the tensor's, as common::dtype_name spells it
  // bool and integer tensors: the sample's smallest and largest value, how
  // many values are true (bool) and how many distinct values it holds.
  std::optional<int64_t> value_min, value_max;
  int64_t true_count = 0;
  int64_t distinct = 0;
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
// range or a tensor it cannot show (naming the shape or dtype).
//
// bool and integer tensors (masks, token ids, labels) keep the same layout,
// one pixel per value: a bool in boolean_colour, an integer in its
// categorical colour (render/colormap.h). `values` and `average` do not apply
// to them and are ignored (is_value_scale tells a caller so). Complex tensors
// are refused.
Strip render_strip(const torch::Tensor& batch, const StripOptions& options);

// Draws `tiles` ([T, H, W], any device and floating dtype) as T tiles in a
// row with 1-pixel transparent gaps, on one scale shared by every tile:
// symmetric around zero (`signed_scale`) or 0..max for magnitudes. `layout`
// names what the tiles are; `too_big_hint` says how to shrink a picture over
// 32768 pixels wide or high (std::invalid_argument). batch_size is left 0.
Strip render_tiles(const torch::Tensor& tiles, bool signed_scale, const std::string& layout,
                   const std::string& too_big_hint);

// Whether the strip shows values as they are (boolean or categorical), so
// that StripOptions' values and average were not applied.
bool is_value_scale(const StripInfo& info);

// Colours `tiles` ([T, H, W] of a bool or integer dtype) one pixel per value
// like render_tiles, and fills the value fields of the info.
Strip render_value_tiles(const torch::Tensor& tiles, const std::string& layout, const std::string& too_big_hint);

}  // namespace nansense::render
