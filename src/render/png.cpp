#include <png.h>

#include <csetjmp>
#include <stdexcept>

#include "render/image.h"

namespace nansense::render {

namespace {

void append(png_structp png, png_bytep data, png_size_t size) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), size);
}

}  // namespace

std::string encode_png(const Image& image) {
  if (image.width <= 0 || image.height <= 0) throw std::invalid_argument("cannot encode an empty image");
  static_assert(sizeof(Rgba) == 4, "pixels are packed RGBA");
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (!png) throw std::runtime_error("PNG encoding failed: out of memory");
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("PNG encoding failed");
  }
  png_set_write_fn(png, &out, append, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  // Pictures are made for a page waiting on them, mostly over loopback: the
  // fastest compression (a third of the time of the default, a few percent
  // larger on strips) keeps the pause-to-pixels latency down.
  png_set_compression_level(png, 1);
  png_set_filter(png, 0, PNG_FILTER_NONE);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y) {
    png_write_row(png, reinterpret_cast<png_const_bytep>(&image.pixels[static_cast<size_t>(y) * image.width]));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace nansense::render
