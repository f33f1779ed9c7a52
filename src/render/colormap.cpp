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

Rgba nan_mark(int x, int y) { return ((x + y) % 2 == 0) ? Rgba{255, 0, 255, 255} : Rgba{0, 0, 0, 255}; }
Rgba pos_inf_mark() { return {255, 215, 0, 255}; }
Rgba neg_inf_mark() { return {0, 170, 60, 255}; }

}  // namespace nansense::render
