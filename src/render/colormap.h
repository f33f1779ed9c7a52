// Colours for tensor values: a diverging blue-white-red scale centred on zero,
// a sequential white-red scale for magnitudes, and marks for non-finite values
// that no scale colour can be mistaken for.
#pragma once

#include <cstdint>

#include "render/image.h"

namespace nansense::render {

// v in [-1, 1]: blue (negative) through white (0) to red (positive).
Rgba diverging(double v);
// v in [0, 1]: white (0) to red (1).
Rgba sequential(double v);

// Non-float tensors (masks, token ids, labels) are values, not magnitudes:
// a bool is one of two colours (true dark blue, false light gray); an integer
// gets a colour of its own, the same for the same value in every picture
// (hues spread by the golden ratio, so neighbouring ids differ), 0 (the usual
// padding id and the first class) a mid gray.
Rgba boolean_colour(bool value);
Rgba categorical(int64_t value);
// Black or white, whichever reads better on `background`.
Rgba text_colour_on(Rgba background);

// NaN: a magenta/black checkerboard (x, y pick the square); +Inf: yellow;
// -Inf: green. None of them lies on either scale.
Rgba nan_mark(int x, int y);
Rgba pos_inf_mark();
Rgba neg_inf_mark();

}  // namespace nansense::render
