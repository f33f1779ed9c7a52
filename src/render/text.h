// Text in server-drawn pictures (chart titles, tick labels, legends): DejaVu
// Sans, embedded in the library and drawn anti-aliased with stb_truetype, so a
// picture looks the same on every machine and needs no font at run time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "render/image.h"

namespace nansense::render {

enum class Align { kLeft, kCenter, kRight };

// `px` is the font size as CSS means it (the em, in pixels); a line is about
// 1.2 times as high. Readable sizes are 11 to 16.

// Width in pixels of `text` (UTF-8) drawn at `px`.
int text_width(std::string_view text, float px);

// Height of one line at `px`: where the next line starts.
int line_height(float px);

// Draws `text` with the top of its line at `y`; `x` is its left edge, centre or
// right edge as `align` says. Pixels outside the image are skipped. Returns
// the text's width.
int draw_text(Image& image, std::string_view text, int x, int y, float px, Rgba color, Align align = Align::kLeft);

// Draws `text` turned a quarter left, reading bottom to top (a y-axis label):
// the top of its line at column `x`, centred on row `y_center`.
void draw_text_vertical(Image& image, std::string_view text, int x, int y_center, float px, Rgba color);

// The words of `text` (split at spaces) in lines no wider than `width` at
// `px`; a word wider than that gets a line of its own.
std::vector<std::string> wrap_text(std::string_view text, float px, int width);

}  // namespace nansense::render
