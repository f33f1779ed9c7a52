// A recording's frames: the pictures a view shows laid out on one white page
// under a line that stamps the training position, then fitted to the video's
// fixed size. Snapshots (PNG) and recordings (MP4) draw the same page.
#pragma once

#include <string>
#include <vector>

#include "render/image.h"

namespace nansense::record {

// The longest sides a video frame may have (H.264's level 5.1 holds 4096
// wide; players and slides are happiest at HD and below).
inline constexpr int kMaxFrameWidth = 1920;
inline constexpr int kMaxFrameHeight = 1080;

// One picture of a view with the line naming it.
struct Panel {
  std::string label;    // "features.0 activation"
  render::Image image;  // may be empty: then `label` says why
};

// The panels stacked top to bottom on white, under `stamp` ("epoch 2 · train
// · batch 14"). Panels a few pixels high (a 10-feature layer's strip) are
// enlarged by a whole factor so they can be seen.
render::Image compose(const std::string& stamp, const std::vector<Panel>& panels);

// `page` on a white width x height frame: shrunk to fit when larger (aspect
// kept), placed top-left, the rest white.
render::Image fit_frame(const render::Image& page, int width, int height);

// The video's size for a first page: its sides rounded up to even, within
// kMaxFrameWidth x kMaxFrameHeight (a larger page is shrunk, aspect kept).
void frame_size_for(const render::Image& first, int& width, int& height);

}  // namespace nansense::record
