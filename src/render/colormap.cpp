#include "render/colormap.h"

#include <algorithm>
#include <cmath>

namespace nansense::render {

namespace {

constexpr Rgba kBlue{33, 102, 172, 255};
constexpr Rgba kWhite{247, 247, 247, 255};
constexpr Rgba kRed{178, 24, 43, 255};

Rgba mix(Rgba a, Rgba b, double t) {
  auto lerp = [t](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(std::lround(x + (static_cast<double>(y) - x) * t));
  };
  return {lerp(a.r, b.r), lerp(a.g, b.g), lerp(a.b, b.b), 255};
}

}  // namespace

Rgba diverging(double v) {
  v = std::clamp(v, -1.0, 1.0);
  return v < 0 ? mix(kWhite, kBlue, -v) : mix(kWhite, kRed, v);
}

Rgba sequential(double v) { return mix(kWhite, kRed, std::clamp(v, 0.0, 1.0)); }

Rgba boolean_colour(bool value) { return value ? Rgba{31, 78, 140, 255} : Rgba{222, 226, 232, 255}; }

Rgba categorical(int64_t value) {
  if (value == 0) return {150, 150, 150, 255};
  // Hue by the golden ratio; lightness alternates in three steps so that two
  // ids whose hues come close still differ.
  const double golden = 0.6180339887498949;
  const double hue = std::fmod(static_cast<double>(value) * golden, 1.0);
  const double h = (hue < 0 ? hue + 1.0 : hue) * 6.0;
  const int64_t step = ((value % 3) + 3) % 3;
  const double v = 0.92 - 0.14 * static_cast<double>(step);
  const double s = 0.62;
  const double c = v * s;
  const double x = c * (1.0 - std::fabs(std::fmod(h, 2.0) - 1.0));
  const double m = v - c;
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h) % 6) {
    case 0:
      r = c, g = x;
      break;
    case 1:
      r = x, g = c;
      break;
    case 2:
      g = c, b = x;
      break;
    case 3:
      g = x, b = c;
      break;
    case 4:
      r = x, b = c;
      break;
    default:
      r = c, b = x;
      break;
  }
  auto byte = [m](double u) { return static_cast<uint8_t>(std::lround((u + m) * 255.0)); };
  return {byte(r), byte(g), byte(b), 255};
}

Rgba text_colour_on(Rgba bg) {
  const double luma = 0.299 * bg.r + 0.587 * bg.g + 0.114 * bg.b;
  return luma > 140 ? Rgba{0, 0, 0, 255} : Rgba{255, 255, 255, 255};
}

Rgba nan_mark(int x, int y) { return ((x + y) % 2 == 0) ? Rgba{255, 0, 255, 255} : Rgba{0, 0, 0, 255}; }
Rgba pos_inf_mark() { return {255, 215, 0, 255}; }
Rgba neg_inf_mark() { return {0, 170, 60, 255}; }

}  // namespace nansense::render
