#include "render/tiles.h"

#include <algorithm>
#include <cmath>

#include "render/colormap.h"
#include "render/text.h"

namespace nansense::render {

// `map` stretched to h x w (bilinear), the way the page draws maps at input size.
torch::Tensor stretched(const torch::Tensor& map, int64_t h, int64_t w) {
  if (map.size(0) == h && map.size(1) == w) return map;
  namespace F = torch::nn::functional;
  return F::interpolate(
             map.unsqueeze(0).unsqueeze(0),
             F::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear).align_corners(false))
      .squeeze(0)
      .squeeze(0);
}

Image colour_map(const torch::Tensor& map, bool one_sided) {
  const double scale = std::max(map.abs().max().item<double>(), 1e-12);
  auto m = map.contiguous();
  const auto* v = m.data_ptr<float>();
  Image img(static_cast<int>(m.size(1)), static_cast<int>(m.size(0)));
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      const double d = v[y * img.width + x] / scale;
      img.at(x, y) = std::isnan(d) ? nan_mark(x, y)
                     : one_sided   ? sequential(std::clamp(d, 0.0, 1.0))
                                   : diverging(std::clamp(d, -1.0, 1.0));
    }
  }
  return img;
}

// The input in grey with the attribution's colour over it where it is strong.
Image overlay(const Image& input, const Image& heat, const torch::Tensor& map) {
  Image out = input;
  const double scale = std::max(map.abs().max().item<double>(), 1e-12);
  auto m = map.contiguous();
  const auto* v = m.data_ptr<float>();
  for (int y = 0; y < out.height && y < heat.height; ++y) {
    for (int x = 0; x < out.width && x < heat.width; ++x) {
      auto& p = out.at(x, y);
      const auto grey = static_cast<uint8_t>((p.r * 30 + p.g * 59 + p.b * 11) / 100);
      const double a = std::min(1.0, std::abs(v[y * out.width + x]) / scale) * 0.75;
      const auto& h = heat.at(x, y);
      p = {static_cast<uint8_t>(grey * (1 - a) + h.r * a), static_cast<uint8_t>(grey * (1 - a) + h.g * a),
           static_cast<uint8_t>(grey * (1 - a) + h.b * a), 255};
    }
  }
  return out;
}

// Tiles side by side in rows, each scaled up by an integer factor so small
// images (28x28) stay readable, each captioned ("start", "channel 3",
// "attribution", "input").
Image compose(const std::vector<std::vector<Tile>>& rows, int tile_height) {
  constexpr float kLabelPx = 12;
  int tile_h = 1, tile_w = 1;
  for (const auto& row : rows) {
    for (const auto& t : row) {
      tile_h = std::max(tile_h, t.image.height);
      tile_w = std::max(tile_w, t.image.width);
    }
  }
  const int factor = std::max(1, tile_height / std::max(tile_h, 1));
  const int gap = 4;
  const int label_h = line_height(kLabelPx) + 2;
  size_t columns = 0;
  int widest_label = 0;
  for (const auto& row : rows) {
    columns = std::max(columns, row.size());
    for (const auto& t : row) widest_label = std::max(widest_label, text_width(t.label, kLabelPx));
  }
  const int cell_w = std::max(tile_w * factor, widest_label);
  const int cell_h = tile_h * factor + label_h;
  const int width = static_cast<int>(columns) * (cell_w + gap) + gap;
  const int height = static_cast<int>(rows.size()) * (cell_h + gap) + gap;
  Image out(width, height);
  for (auto& p : out.pixels) p = {32, 32, 40, 255};
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const auto& t = rows[r][c].image;
      const int x0 = gap + static_cast<int>(c) * (cell_w + gap);
      const int y0 = gap + static_cast<int>(r) * (cell_h + gap);
      for (int y = 0; y < t.height * factor; ++y) {
        for (int x = 0; x < t.width * factor; ++x) out.at(x0 + x, y0 + y) = t.at(x / factor, y / factor);
      }
      draw_text(out, rows[r][c].label, x0 + t.width * factor / 2, y0 + t.height * factor + 1, kLabelPx,
                {200, 200, 210, 255}, Align::kCenter);
    }
  }
  return out;
}

}  // namespace nansense::render
