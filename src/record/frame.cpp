#include "record/frame.h"

#include <algorithm>

#include "render/downscale.h"
#include "render/draw.h"
#include "render/text.h"

namespace nansense::record {

namespace {

constexpr float kStampPx = 15;
constexpr float kLabelPx = 13;
constexpr int kMargin = 8;
constexpr int kMinPanelSide = 48;
const render::Rgba kWhite{255, 255, 255, 255};
const render::Rgba kInk{33, 37, 41, 255};
const render::Rgba kMuted{108, 117, 125, 255};

void paste(render::Image& page, const render::Image& image, int x0, int y0) {
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      const render::Rgba p = image.at(x, y);
      if (p.a == 255) {
        if (x0 + x < page.width && y0 + y < page.height) page.at(x0 + x, y0 + y) = p;
      } else {
        render::blend(page, x0 + x, y0 + y, p);
      }
    }
  }
}

// Tiny strips grow by a whole factor (crisp values) until they can be seen.
render::Image legible(const render::Image& image) {
  if (image.width == 0 || image.height == 0) return image;
  int factor = 1;
  while (std::min(image.width, image.height) * factor < kMinPanelSide &&
         std::max(image.width, image.height) * (factor + 1) <= kMaxFrameWidth) {
    ++factor;
  }
  return factor > 1 ? render::enlarge(image, factor) : image;
}

}  // namespace

render::Image compose(const std::string& stamp, const std::vector<Panel>& panels) {
  std::vector<render::Image> images;
  int width = kMargin * 2 + render::text_width(stamp, kStampPx);
  int height = kMargin + render::line_height(kStampPx) + kMargin;
  for (const auto& panel : panels) {
    images.push_back(legible(panel.image));
    width = std::max(width, kMargin * 2 + std::max(images.back().width, render::text_width(panel.label, kLabelPx)));
    height += render::line_height(kLabelPx) + images.back().height + kMargin;
  }
  render::Image page(width, height);
  std::fill(page.pixels.begin(), page.pixels.end(), kWhite);
  int y = kMargin;
  render::draw_text(page, stamp, kMargin, y, kStampPx, kInk);
  y += render::line_height(kStampPx) + kMargin;
  for (size_t i = 0; i < panels.size(); ++i) {
    render::draw_text(page, panels[i].label, kMargin, y, kLabelPx, images[i].width ? kInk : kMuted);
    y += render::line_height(kLabelPx);
    paste(page, images[i], kMargin, y);
    y += images[i].height + kMargin;
  }
  return page;
}

void frame_size_for(const render::Image& first, int& width, int& height) {
  double scale = 1.0;
  if (first.width > kMaxFrameWidth) scale = std::min(scale, double(kMaxFrameWidth) / first.width);
  if (first.height > kMaxFrameHeight) scale = std::min(scale, double(kMaxFrameHeight) / first.height);
  width = std::max(2, static_cast<int>(first.width * scale));
  height = std::max(2, static_cast<int>(first.height * scale));
  width = std::min(kMaxFrameWidth, width + width % 2);
  height = std::min(kMaxFrameHeight, height + height % 2);
}

render::Image fit_frame(const render::Image& page, int width, int height) {
  const render::Image* source = &page;
  render::Image shrunk;
  if (page.width > width || page.height > height) {
    // downscale_to_fit bounds the long side: choose the bound that fits both.
    const double scale = std::min(double(width) / page.width, double(height) / page.height);
    const int side = std::max(1, static_cast<int>(std::max(page.width, page.height) * scale));
    shrunk = render::downscale_to_fit(page, side);
    source = &shrunk;
  }
  render::Image frame(width, height);
  std::fill(frame.pixels.begin(), frame.pixels.end(), kWhite);
  paste(frame, *source, 0, 0);
  return frame;
}

}  // namespace nansense::record
