#include <stb/stb_image_write.h>

#include <stdexcept>

#include "render/image.h"

namespace nansense::render {

std::string encode_png(const Image& image) {
  if (image.width <= 0 || image.height <= 0) throw std::invalid_argument("cannot encode an empty image");
  std::string out;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  static_assert(sizeof(Rgba) == 4, "pixels are packed RGBA");
  if (!stbi_write_png_to_func(append, &out, image.width, image.height, 4, image.pixels.data(), image.width * 4)) {
    throw std::runtime_error("PNG encoding failed");
  }
  return out;
}

}  // namespace nansense::render
