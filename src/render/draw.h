// Drawing primitives for the server-drawn charts: alpha blending and clipped
// rectangles and lines. Everything here clips to the image, so a caller's
// layout arithmetic can never write outside it.
#pragma once

#include "render/image.h"

namespace nansense::render {

// Composites `color` (its alpha scaled by `coverage` in [0, 1]) over the pixel
// at (x, y); outside the image nothing happens.
void blend(Image& image, int x, int y, Rgba color, float coverage = 1.0f);

// Blends `color` over the pixels x in [x0, x1), y in [y0, y1).
void fill_rect(Image& image, int x0, int y0, int x1, int y1, Rgba color);

// One-pixel lines from (x, y0) to (x, y1) and from (x0, y) to (x1, y), ends
// included, in either order.
void vertical_line(Image& image, int x, int y0, int y1, Rgba color);
void horizontal_line(Image& image, int x0, int x1, int y, Rgba color);

// A vertical line of `on`-pixel dashes `on` pixels apart.
void dotted_vertical_line(Image& image, int x, int y0, int y1, Rgba color, int on = 2);

}  // namespace nansense::render
