#include "render/input_image.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/dtype.h"
#include "render/strip.h"

namespace nansense::render {

namespace {

std::string range_text(double lo, double hi) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%.3g, %.3g]", lo, hi);
  return buf;
}

// x * std + mean along the channel dimension of a [C,H,W] sample.
torch::Tensor denormalise(const torch::Tensor& s, const std::vector<double>& mean, const std::vector<double>& std) {
  const int64_t channels = s.size(0);
  auto per_channel = [&](const std::vector<double>& v, const char* what, double fallback) {
    if (v.empty()) return torch::full({channels, 1, 1}, fallback, torch::kDouble);
    if (v.size() != 1 && static_cast<int64_t>(v.size()) != channels) {
      throw std::invalid_argument(std::string("input_") + what + " has " + std::to_string(v.size()) +
                                  " values but the input has " + std::to_string(channels) +
                                  " channels: give one value, or one per channel");
    }
    auto t = torch::tensor(v, torch::kDouble).reshape({-1, 1, 1});
    return v.size() == 1 ? t.expand({channels, 1, 1}) : t;
  };
  return s * per_channel(std, "std", 1.0) + per_channel(mean, "mean", 0.0);
}

// A [1|3,H,W] sample in 0..1 (clamped) as an opaque image. Non-finite pixels
// get the renderer's marks so a NaN input is as visible as a NaN activation.
Image to_image(const torch::Tensor& chw) {
  auto rgb = chw.size(0) == 1 ? chw.expand({3, chw.size(1), chw.size(2)}) : chw;
  auto values = rgb.contiguous();
  const auto* v = values.data_ptr<double>();
  const int h = static_cast<int>(chw.size(1));
  const int w = static_cast<int>(chw.size(2));
  const size_t plane = static_cast<size_t>(h) * w;
  Image image(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(y) * w + x;
      auto byte = [](double c) { return static_cast<uint8_t>(std::clamp(c, 0.0, 1.0) * 255.0 + 0.5); };
      const double r = v[i], g = v[plane + i], b = v[2 * plane + i];
      if (!std::isfinite(r) || !std::isfinite(g) || !std::isfinite(b)) {
        const bool dark = ((x / 2) + (y / 2)) % 2;
        image.at(x, y) = dark ? Rgba{0, 0, 0, 255} : Rgba{255, 0, 255, 255};
      } else {
        image.at(x, y) = Rgba{byte(r), byte(g), byte(b), 255};
      }
    }
  }
  return image;
}

}  // namespace

InputImage render_input(const torch::Tensor& batch, const InputImageOptions& options) {
  torch::NoGradGuard no_grad;
  if (!batch.defined() || batch.dim() == 0) throw std::invalid_argument("the input has no batch dimension");
  const int64_t n = batch.size(0);
  if (options.sample < 0 || options.sample >= n) {
    throw std::invalid_argument("sample " + std::to_string(options.sample) + " is out of range: the batch has " +
                                std::to_string(n) + " samples (0.." + std::to_string(n - 1) + ")");
  }
  InputImage out;
  out.batch_size = n;
  torch::Tensor s = batch[options.sample].detach().to(torch::kCPU);
  if (s.dim() == 2 && batch.is_floating_point()) s = s.unsqueeze(0);  // [H,W] gray

  const bool image_like = s.dim() == 3 && s.is_floating_point();
  if (image_like && (s.size(0) == 1 || s.size(0) == 3 || options.transform)) {
    auto x = denormalise(s.to(torch::kDouble), options.mean, options.std);
    if (s.size(0) != 1 && s.size(0) != 3) {
      auto shown = options.transform(x.to(torch::kFloat));
      if (!shown.defined() || shown.dim() != 3 || (shown.size(0) != 1 && shown.size(0) != 3)) {
        throw std::invalid_argument(
            "the input transform must return [1,H,W] or [3,H,W], got " +
            (shown.defined() ? common::shape_text(shown.sizes()) : std::string("an undefined tensor")));
      }
      x = shown.detach().to(torch::kCPU, torch::kDouble);
    }
    auto finite = x.masked_select(torch::isfinite(x));
    if (finite.numel() > 0) {
      const double lo = finite.min().item<double>(), hi = finite.max().item<double>();
      // Slack for float rounding of normalised pixels.
      if (lo < -0.01 || hi > 1.01) {
        x = (x - lo) / std::max(hi - lo, 1e-12);
        out.hint = "values span " + range_text(lo, hi) +
                   ", not 0..1: shown min-max scaled; set input_mean/input_std to show the image as it was";
      }
    }
    out.image = to_image(x);
    out.layout = "image";
    return out;
  }

  StripOptions strip_options;
  strip_options.sample = options.sample;
  auto strip = render_strip(batch.is_floating_point() ? batch : batch.to(torch::kFloat), strip_options);
  out.image = std::move(strip.image);
  out.layout = "strip";
  if (image_like) {
    out.hint = "the input has " + std::to_string(s.size(0)) +
               " channels, so it is drawn one tile per channel: pass StartOptions().input_transform(...) "
               "mapping a sample [C,H,W] to [3,H,W] in 0..1 to see it as an image";
  }
  return out;
}

}  // namespace nansense::render
