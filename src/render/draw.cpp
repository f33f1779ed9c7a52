#include "render/draw.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace nansense::render {

void blend(Image& image, int x, int y, Rgba color, float coverage) {
  if (x < 0 || y < 0 || x >= image.width || y >= image.height) return;
  const float a = color.a / 255.0f * std::clamp(coverage, 0.0f, 1.0f);
  if (a <= 0) return;
  Rgba& dst = image.at(x, y);
  // Porter-Duff "over", so text and bars also compose on transparent images.
  const float da = dst.a / 255.0f * (1 - a);
  const float out_a = a + da;
  auto channel = [&](uint8_t s, uint8_t d) { return static_cast<uint8_t>(std::lround((s * a + d * da) / out_a)); };
  dst = {channel(color.r, dst.r), channel(color.g, dst.g), channel(color.b, dst.b),
         static_cast<uint8_t>(std::lround(out_a * 255))};
}

void fill_rect(Image& image, int x0, int y0, int x1, int y1, Rgba color) {
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, image.width);
  y1 = std::min(y1, image.height);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) blend(image, x, y, color);
  }
}

void vertical_line(Image& image, int x, int y0, int y1, Rgba color) {
  if (y0 > y1) std::swap(y0, y1);
  fill_rect(image, x, y0, x + 1, y1 + 1, color);
}

void horizontal_line(Image& image, int x0, int x1, int y, Rgba color) {
  if (x0 > x1) std::swap(x0, x1);
  fill_rect(image, x0, y, x1 + 1, y + 1, color);
}

void dotted_vertical_line(Image& image, int x, int y0, int y1, Rgba color, int on) {
  if (y0 > y1) std::swap(y0, y1);
  on = std::max(on, 1);
  for (int y = y0; y <= y1; y += 2 * on) vertical_line(image, x, y, std::min(y + on - 1, y1), color);
}

}  // namespace nansense::render
