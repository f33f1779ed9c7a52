// Lays a parameter-shaped tensor (a weight, its gradient, an optimizer state
// entry, a weight-tensor instrument's output) out as the Weights page shows
// it. Each dimension takes one role: X (across a tile), Y (down a tile), Tile
// (one tile per index, in a row) or Index (held at one index). X, Y and Tile
// are held by at most one dimension each; every other dimension is an Index.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "render/strip.h"

namespace nansense::render {

struct WeightLayout {
  // The dimension holding each role; -1 when none does.
  int64_t x_dim = -1;
  int64_t y_dim = -1;
  int64_t tile_dim = -1;
  // One entry per dimension: where an Index dimension is held (the entries
  // of the X, Y and Tile dimensions are kept, unused, so a dimension that
  // becomes Index again returns to its index).
  std::vector<int64_t> index;

  bool is_index(int64_t dim) const { return dim != x_dim && dim != y_dim && dim != tile_dim; }
  bool operator==(const WeightLayout& o) const {
    return x_dim == o.x_dim && y_dim == o.y_dim && tile_dim == o.tile_dim && index == o.index;
  }
};

// What a caller asks of the default layout. A role given moves to that
// dimension, and the dimension that held it becomes an Index (the role the
// moved dimension held before is left vacant); -1 leaves the role to no
// dimension; nullopt keeps the default's. `index` gives the Index positions
// by dimension; dimensions past its end are held at 0.
struct WeightLayoutRequest {
  std::optional<int64_t> x_dim;
  std::optional<int64_t> y_dim;
  std::optional<int64_t> tile_dim;
  std::vector<int64_t> index;
};

// The layout a shape starts with: a conv weight [O, I, kH, kW] shows the kernels
// of one output channel (dim 0 held at 0) as tiles across the input channels
// (Tile 1, Y 2, X 3); [O, I, k] the same with 1-row kernels; a matrix one image
// (Y 0, X 1); a vector one row (X 0); a scalar one pixel; higher ranks tile
// dim 1 with the last two dimensions as Y and X.
WeightLayout default_weight_layout(c10::IntArrayRef shape);

// The default with `request` applied. std::invalid_argument naming the bad
// value and what it must be: a dimension out of range, two roles on one
// dimension, more index entries than dimensions, an index out of its
// dimension's range.
WeightLayout resolve_weight_layout(c10::IntArrayRef shape, const WeightLayoutRequest& request);

// `tensor` under `layout` as [tiles, height, width]: tiles along the Tile
// dimension, rows along Y, columns along X (a missing role is size 1), the
// Index dimensions held at their index. A view where it can be.
torch::Tensor weight_tiles(const torch::Tensor& tensor, const WeightLayout& layout);

// weight_tiles drawn as a strip on a scale symmetric around zero; the info's
// layout says "weight". Throws std::invalid_argument for a non-floating
// tensor or a picture too big to draw.
Strip render_weight_strip(const torch::Tensor& tensor, const WeightLayout& layout);

// "tile=1 y=2 x=3 index[0]=0": the layout in words, for captions.
std::string describe(const WeightLayout& layout);

}  // namespace nansense::render
