#include "render/text.h"

#include <stb/stb_truetype.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/asm_embed.h"
#include "render/draw.h"

// The font file is assembled into the library (.incbin, as cmake/embed_web.cmake
// does for the web UI); CMake passes its path as NANSENSE_FONT_FILE.
__asm__(NANSENSE_ASM_RODATA_BEGIN
        ".balign 16\n"
        "nansense_font_begin:\n"
        ".incbin \"" NANSENSE_FONT_FILE
        "\"\n"
        "nansense_font_end:\n" NANSENSE_ASM_RODATA_END);
extern const unsigned char nansense_font_begin[] __asm__("nansense_font_begin");
extern const unsigned char nansense_font_end[] __asm__("nansense_font_end");

namespace nansense::render {

namespace {

// stb_truetype only reads the font once initialised, so one instance serves
// every thread.
const stbtt_fontinfo& font() {
  static const stbtt_fontinfo info = [] {
    stbtt_fontinfo f;
    if (nansense_font_end - nansense_font_begin < 12 ||
        !stbtt_InitFont(&f, nansense_font_begin, stbtt_GetFontOffsetForIndex(nansense_font_begin, 0))) {
      throw std::runtime_error("the embedded font (" NANSENSE_FONT_FILE ") cannot be read");
    }
    return f;
  }();
  return info;
}

// The next code point of UTF-8 `text` from `i` (advanced past it); malformed
// bytes read as U+FFFD.
int next_code_point(std::string_view text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i++);
  if (lead < 0x80) return lead;
  const int extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : -1;
  if (extra < 0 || i + extra > text.size()) return 0xFFFD;
  int cp = lead & (0x3F >> extra);
  for (int k = 0; k < extra; ++k) {
    if ((byte(i) & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (byte(i++) & 0x3F);
  }
  return cp;
}

struct LineMetrics {
  float scale;
  int baseline;  // from the line's top
  int height;
};

LineMetrics metrics(float px) {
  const stbtt_fontinfo& f = font();
  int ascent = 0, descent = 0, gap = 0;
  stbtt_GetFontVMetrics(&f, &ascent, &descent, &gap);
  const float scale = stbtt_ScaleForMappingEmToPixels(&f, px);
  return {scale, static_cast<int>(std::ceil(ascent * scale)),
          static_cast<int>(std::ceil((ascent - descent + gap) * scale))};
}

// Lays `text` out on one line and calls plot(x, y, coverage) for every inked
// pixel, x and y from the line's top-left; returns the advance width. With
// `plot` null it only measures.
template <class Plot>
float lay_out(std::string_view text, float px, Plot* plot) {
  const stbtt_fontinfo& f = font();
  const LineMetrics m = metrics(px);
  float pen = 0;
  int previous = 0;
  std::vector<unsigned char> glyph;
  for (size_t i = 0; i < text.size();) {
    const int cp = next_code_point(text, i);
    if (previous) pen += m.scale * stbtt_GetCodepointKernAdvance(&f, previous, cp);
    previous = cp;
    int advance = 0, left_bearing = 0;
    stbtt_GetCodepointHMetrics(&f, cp, &advance, &left_bearing);
    if (plot) {
      // Glyphs start at their fractional pen position, so spacing stays even.
      const int origin = static_cast<int>(std::floor(pen));
      const float shift = pen - origin;
      int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
      stbtt_GetCodepointBitmapBoxSubpixel(&f, cp, m.scale, m.scale, shift, 0, &x0, &y0, &x1, &y1);
      const int w = x1 - x0, h = y1 - y0;
      if (w > 0 && h > 0) {
        glyph.assign(static_cast<size_t>(w) * h, 0);
        stbtt_MakeCodepointBitmapSubpixel(&f, glyph.data(), w, h, w, m.scale, m.scale, shift, 0, cp);
        for (int gy = 0; gy < h; ++gy) {
          for (int gx = 0; gx < w; ++gx) {
            if (const unsigned char c = glyph[static_cast<size_t>(gy) * w + gx]) {
              (*plot)(origin + x0 + gx, m.baseline + y0 + gy, c / 255.0f);
            }
          }
        }
      }
    }
    pen += m.scale * advance;
  }
  return pen;
}

// Stem edges of small anti-aliased text on white look washed out at linear
// coverage; a mild curve darkens them without making glyphs bolder.
float ink(float coverage) { return std::pow(coverage, 0.8f); }

}  // namespace

int text_width(std::string_view text, float px) {
  using NoPlot = void (*)(int, int, float);
  return static_cast<int>(std::ceil(lay_out<NoPlot>(text, px, nullptr)));
}

int line_height(float px) { return metrics(px).height; }

int draw_text(Image& image, std::string_view text, int x, int y, float px, Rgba color, Align align) {
  const int width = text_width(text, px);
  const int left = align == Align::kLeft ? x : align == Align::kCenter ? x - width / 2 : x - width;
  auto plot = [&](int gx, int gy, float coverage) { blend(image, left + gx, y + gy, color, ink(coverage)); };
  lay_out(text, px, &plot);
  return width;
}

void draw_text_vertical(Image& image, std::string_view text, int x, int y_center, float px, Rgba color) {
  const int bottom = y_center + text_width(text, px) / 2;
  // Turned a quarter left: the line's x runs up the image, its y runs right.
  auto plot = [&](int gx, int gy, float coverage) { blend(image, x + gy, bottom - gx, color, ink(coverage)); };
  lay_out(text, px, &plot);
}

std::vector<std::string> wrap_text(std::string_view text, float px, int width) {
  std::vector<std::string> lines;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find(' ', i), text.size());
    const std::string word(text.substr(i, end - i));
    const std::string joined = line.empty() ? word : line + " " + word;
    if (!line.empty() && text_width(joined, px) > width) {
      lines.push_back(line);
      line = word;
    } else {
      line = joined;
    }
    i = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace nansense::render
