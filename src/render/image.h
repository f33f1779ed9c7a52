// RGBA images and their PNG encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nansense::render {

struct Rgba {
  uint8_t r = 0, g = 0, b = 0, a = 0;
  bool operator==(const Rgba&) const = default;
};

struct Image {
  int width = 0;
  int height = 0;
  std::vector<Rgba> pixels;  // row-major

  Image() = default;
  Image(int w, int h) : width(w), height(h), pixels(static_cast<size_t>(w) * h) {}
  Rgba& at(int x, int y) { return pixels[static_cast<size_t>(y) * width + x]; }
  const Rgba& at(int x, int y) const { return pixels[static_cast<size_t>(y) * width + x]; }
};

// PNG bytes of `image` (8-bit RGBA).
std::string encode_png(const Image& image);

}  // namespace nansense::render
