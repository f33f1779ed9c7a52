#include "render/value_grid.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "render/colormap.h"
#include "render/draw.h"
#include "render/text.h"

namespace nansense::render {

namespace {

constexpr float kTextPx = 11.0f;
constexpr int64_t kWrap = 16;
constexpr int64_t kMaxPixels = 4096;

}  // namespace

std::optional<ValueGrid> render_value_grid(const torch::Tensor& sample) {
  torch::NoGradGuard no_grad;
  if (sample.is_floating_point() || sample.is_complex()) {
    throw std::invalid_argument("a value grid shows bool and integer tensors, not " +
                                common::dtype_name(sample.scalar_type()));
  }
  const bool is_bool = sample.scalar_type() == torch::kBool;
  torch::Tensor v = sample.detach().to(torch::kCPU, torch::kLong);
  if (v.numel() == 0 || v.numel() > kMaxGridCells) return std::nullopt;
  if (v.dim() == 0) {
    v = v.reshape({1, 1});
  } else if (v.dim() == 1) {
    const int64_t n = v.size(0);
    const int64_t cols = std::min(n, kWrap);
    const int64_t rows = (n + cols - 1) / cols;
    // The last row's missing cells stay empty (transparent).
    v = torch::cat({v, torch::zeros({rows * cols - n}, torch::kLong)}).reshape({rows, cols});
  } else if (v.dim() > 2) {
    v = v.reshape({-1, v.size(-1)});
  }
  v = v.contiguous();
  const int64_t count = sample.numel();
  ValueGrid grid;
  grid.rows = v.size(0);
  grid.cols = v.size(1);
  const auto flat = sample.detach().to(torch::kCPU, torch::kLong).reshape({-1});
  auto [lo, hi] = torch::aminmax(flat);
  grid.value_min = lo.item<int64_t>();
  grid.value_max = hi.item<int64_t>();
  if (is_bool) grid.true_count = flat.sum().item<int64_t>();
  auto label = [&](int64_t value) { return std::to_string(value); };
  const int text = std::max(text_width(label(grid.value_min), kTextPx), text_width(label(grid.value_max), kTextPx));
  grid.cell_width = std::max(text + 6, 16);
  grid.cell_height = line_height(kTextPx) + 4;
  const int64_t width = grid.cols * (grid.cell_width + 1) - 1;
  const int64_t height = grid.rows * (grid.cell_height + 1) - 1;
  if (width > kMaxPixels || height > kMaxPixels) return std::nullopt;
  grid.image = Image(static_cast<int>(width), static_cast<int>(height));
  const int64_t* values = v.data_ptr<int64_t>();
  for (int64_t r = 0; r < grid.rows; ++r) {
    for (int64_t c = 0; c < grid.cols; ++c) {
      const int64_t index = r * grid.cols + c;
      if (index >= count) continue;  // the padding of a wrapped vector's last row
      const int64_t value = values[index];
      const Rgba bg = is_bool ? boolean_colour(value != 0) : categorical(value);
      const int x0 = static_cast<int>(c * (grid.cell_width + 1));
      const int y0 = static_cast<int>(r * (grid.cell_height + 1));
      fill_rect(grid.image, x0, y0, x0 + static_cast<int>(grid.cell_width), y0 + static_cast<int>(grid.cell_height),
                bg);
      draw_text(grid.image, label(value), x0 + static_cast<int>(grid.cell_width) / 2, y0 + 2, kTextPx,
                text_colour_on(bg), Align::kCenter);
    }
  }
  return grid;
}

}  // namespace nansense::render
