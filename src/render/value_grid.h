// Masks, token ids and labels as a person reads them: a grid of cells, each
// in its value's colour (render/colormap.h) with the value written in it.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>

#include "render/image.h"

namespace nansense::render {

struct ValueGrid {
  Image image;
  int64_t rows = 0, cols = 0;               // cells
  int64_t cell_width = 0, cell_height = 0;  // pixels, a 1-pixel gap between cells
  int64_t value_min = 0, value_max = 0;
  int64_t true_count = 0;  // bool
};

// Most cells a grid writes out; a larger sample is left to the colour strip.
inline constexpr int64_t kMaxGridCells = 4096;

// `sample` is one sample of a bool or integer tensor (no batch dimension): a
// scalar is one cell, a vector wraps at 16 cells a row, [R, C] keeps its rows
// and more dimensions become rows of the last one. A bool cell reads 1 or 0.
// nullopt when there are no values, more than kMaxGridCells, or the grid
// would be wider or higher than 4096 pixels. Throws std::invalid_argument for
// a floating or complex tensor.
std::optional<ValueGrid> render_value_grid(const torch::Tensor& sample);

}  // namespace nansense::render
