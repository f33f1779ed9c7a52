#include "render/downscale.h"

#include <stb/stb_image.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

namespace nansense::render {

namespace {

// Weights of source pixels [first, first + weights.size()) for one output
// pixel covering [begin, end) in source coordinates.
struct Span {
  int first = 0;
  std::vector<float> weights;
};

std::vector<Span> spans(int source, int target) {
  std::vector<Span> out(static_cast<size_t>(target));
  const double step = static_cast<double>(source) / target;
  for (int i = 0; i < target; ++i) {
    const double begin = i * step, end = std::min<double>(source, (i + 1) * step);
    Span& s = out[static_cast<size_t>(i)];
    s.first = static_cast<int>(std::floor(begin));
    const int last = std::min(source - 1, static_cast<int>(std::ceil(end)) - 1);
    for (int p = s.first; p <= last; ++p) {
      const double covered = std::min<double>(end, p + 1) - std::max<double>(begin, p);
      s.weights.push_back(static_cast<float>(covered / step));
    }
  }
  return out;
}

}  // namespace

Image downscale_to_fit(const Image& image, int max_side) {
  const int long_side = std::max(image.width, image.height);
  if (max_side <= 0) throw std::invalid_argument("max_side must be positive");
  if (long_side <= max_side) return image;
  const double scale = static_cast<double>(max_side) / long_side;
  const int width = std::max(1, static_cast<int>(std::lround(image.width * scale)));
  const int height = std::max(1, static_cast<int>(std::lround(image.height * scale)));

  // Horizontal pass into premultiplied floats, then the vertical pass.
  const auto xs = spans(image.width, width);
  std::vector<float> rows(static_cast<size_t>(width) * image.height * 4, 0.f);
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < width; ++x) {
      float* out = &rows[(static_cast<size_t>(y) * width + x) * 4];
      const Span& s = xs[static_cast<size_t>(x)];
      for (size_t k = 0; k < s.weights.size(); ++k) {
        const Rgba& p = image.at(s.first + static_cast<int>(k), y);
        const float wa = s.weights[k] * p.a / 255.f;
        out[0] += wa * p.r;
        out[1] += wa * p.g;
        out[2] += wa * p.b;
        out[3] += s.weights[k] * p.a;
      }
    }
  }
  const auto ys = spans(image.height, height);
  Image out(width, height);
  for (int y = 0; y < height; ++y) {
    const Span& s = ys[static_cast<size_t>(y)];
    for (int x = 0; x < width; ++x) {
      float acc[4] = {0, 0, 0, 0};
      for (size_t k = 0; k < s.weights.size(); ++k) {
        const float* in = &rows[(static_cast<size_t>(s.first + static_cast<int>(k)) * width + x) * 4];
        for (int c = 0; c < 4; ++c) acc[c] += s.weights[k] * in[c];
      }
      Rgba& p = out.at(x, y);
      const float alpha = std::clamp(acc[3], 0.f, 255.f);
      p.a = static_cast<uint8_t>(std::lround(alpha));
      if (alpha > 0) {
        // Un-premultiply: the averaged colour of the opaque part.
        const float k = 255.f / alpha;
        p.r = static_cast<uint8_t>(std::lround(std::clamp(acc[0] * k, 0.f, 255.f)));
        p.g = static_cast<uint8_t>(std::lround(std::clamp(acc[1] * k, 0.f, 255.f)));
        p.b = static_cast<uint8_t>(std::lround(std::clamp(acc[2] * k, 0.f, 255.f)));
      }
    }
  }
  return out;
}

Image decode_png(const std::string& png) {
  int width = 0, height = 0, channels = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(png.data()), static_cast<int>(png.size()), &width, &height,
                            &channels, 4),
      stbi_image_free);
  if (!pixels) throw std::invalid_argument(std::string("cannot decode PNG: ") + stbi_failure_reason());
  Image image(width, height);
  std::copy_n(pixels.get(), static_cast<size_t>(width) * height * 4, reinterpret_cast<uint8_t*>(image.pixels.data()));
  return image;
}

Image enlarge(const Image& image, int factor) {
  if (factor < 1) throw std::invalid_argument("factor must be 1 or more");
  Image out(image.width * factor, image.height * factor);
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) out.at(x, y) = image.at(x / factor, y / factor);
  }
  return out;
}

FittedPng fit_png(const std::string& png, int max_side, int min_short_side) {
  FittedPng out;
  int channels = 0;
  if (!stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(png.data()), static_cast<int>(png.size()),
                             &out.original_width, &out.original_height, &channels)) {
    throw std::invalid_argument(std::string("cannot read PNG header: ") + stbi_failure_reason());
  }
  const int long_side = std::max(out.original_width, out.original_height);
  const int short_side = std::min(out.original_width, out.original_height);
  Image sized;
  if (long_side > max_side) {
    sized = downscale_to_fit(decode_png(png), max_side);
  } else {
    const int wanted = (min_short_side + short_side - 1) / std::max(1, short_side);
    const int factor = std::min(wanted, max_side / std::max(1, long_side));
    if (factor <= 1) {
      out.png = png;
      out.width = out.original_width;
      out.height = out.original_height;
      return out;
    }
    sized = enlarge(decode_png(png), factor);
  }
  out.png = encode_png(sized);
  out.width = sized.width;
  out.height = sized.height;
  return out;
}

}  // namespace nansense::render
