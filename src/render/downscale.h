// Sizes images for agents. Vision models shrink anything larger than about
// 1568 px on the long side themselves, with no word about it; shrinking here
// lets the caller say so in the text beside the image. Strips of a few pixels
// (a 10-feature layer is 10x1 px) are enlarged so a model can see them.
#pragma once

#include <string>

#include "render/image.h"

namespace nansense::render {

inline constexpr int kAgentMaxSide = 1568;
// Small images are enlarged by a whole factor until the short side reaches
// this (within kAgentMaxSide).
inline constexpr int kAgentMinShortSide = 32;

// `image` with its long side at most `max_side`, by area averaging over
// premultiplied alpha (transparent gaps fade instead of darkening their
// neighbours); the aspect ratio is kept and no side drops below 1 px.
// Returns a copy unchanged when it already fits.
Image downscale_to_fit(const Image& image, int max_side);

// Every pixel as a factor x factor block (nearest neighbour: values stay
// crisp, no colour appears that the renderer did not draw).
Image enlarge(const Image& image, int factor);

// RGBA pixels of a PNG. Throws std::invalid_argument when it does not decode.
Image decode_png(const std::string& png);

struct FittedPng {
  std::string png;
  int width = 0, height = 0;                    // as sent
  int original_width = 0, original_height = 0;  // as rendered
  bool downscaled() const { return width < original_width || height < original_height; }
  bool enlarged() const { return width > original_width; }
};

// The PNG downscaled to fit `max_side`, enlarged by a whole factor while its
// short side is under `min_short_side`, or itself when neither applies.
FittedPng fit_png(const std::string& png, int max_side = kAgentMaxSide, int min_short_side = kAgentMinShortSide);

}  // namespace nansense::render
