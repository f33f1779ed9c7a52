#include "render/strip.h"

#include <cmath>
#include <stdexcept>

#include "common/dtype.h"
#include "render/colormap.h"

namespace nansense::render {

namespace {

// The sample as [tiles, height, width] plus its layout name.
std::pair<torch::Tensor, std::string> as_tiles(const torch::Tensor& s) {
  switch (s.dim()) {
    case 0:
      return {s.reshape({1, 1, 1}), "scalar"};
    case 1:
      return {s.reshape({1, 1, s.size(0)}), "features"};
    case 2: {
      const int64_t tokens = s.size(0);
      const auto side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(tokens))));
      if (side * side == tokens && tokens > 1) {
        // [T, D] -> D grids of side x side tokens, in row-major token order.
        return {s.transpose(0, 1).reshape({s.size(1), side, side}), "tokens"};
      }
      return {s.unsqueeze(0), "matrix"};
    }
    case 3:
      return {s, "channels"};
    default:
      throw std::invalid_argument("cannot show a per-sample tensor of shape " + common::shape_text(s.sizes()) +
                                  ": only [C,H,W], [F], [T,D] and scalars are drawn");
  }
}

}  // namespace

std::string_view to_string(Values values) {
  switch (values) {
    case Values::kUnchanged:
      return "unchanged";
    case Values::kAbs:
      return "abs";
    case Values::kSquare:
      return "square";
  }
  return "unchanged";
}

Values parse_values(const std::string& text) {
  if (text == "unchanged") return Values::kUnchanged;
  if (text == "abs") return Values::kAbs;
  if (text == "square") return Values::kSquare;
  throw std::invalid_argument("values must be \"unchanged\", \"abs\" or \"square\", got \"" + text + "\"");
}

Strip render_strip(const torch::Tensor& batch, const StripOptions& options) {
  torch::NoGradGuard no_grad;
  if (!batch.defined() || batch.dim() == 0)
    throw std::invalid_argument("nothing to draw: the tensor has no batch dimension");
  if (!(batch.is_floating_point())) {
    throw std::invalid_argument("cannot draw a " + common::dtype_name(batch.scalar_type()) + " tensor");
  }
  const int64_t n = batch.size(0);
  if (options.sample < 0 || options.sample >= n) {
    throw std::invalid_argument("sample " + std::to_string(options.sample) + " is out of range: the batch has " +
                                std::to_string(n) + " samples (0.." + std::to_string(n - 1) + ")");
  }
  torch::Tensor s = batch[options.sample].to(torch::kCPU, torch::kDouble);
  if (options.values == Values::kAbs) s = s.abs();
  if (options.values == Values::kSquare) s = s.square();
  auto [tiles, layout] = as_tiles(s);
  if (options.average && tiles.size(0) > 1) tiles = tiles.nanmean(0, /*keepdim=*/true);
  Strip strip = render_tiles(tiles, options.values == Values::kUnchanged, layout, "use average to collapse it");
  strip.info.batch_size = n;
  return strip;
}

Strip render_tiles(const torch::Tensor& tiles_in, bool signed_scale, const std::string& layout,
                   const std::string& too_big_hint) {
  torch::NoGradGuard no_grad;
  torch::Tensor tiles = tiles_in.to(torch::kCPU, torch::kDouble).contiguous();
  Strip strip;
  StripInfo& info = strip.info;
  info.layout = layout;
  info.tiles = tiles.size(0);
  info.tile_height = tiles.size(1);
  info.tile_width = tiles.size(2);
  info.diverging = signed_scale;
  auto finite = torch::isfinite(tiles);
  info.nan = torch::isnan(tiles).sum().item<int64_t>();
  info.pos_inf = (tiles == std::numeric_limits<double>::infinity()).sum().item<int64_t>();
  info.neg_inf = (tiles == -std::numeric_limits<double>::infinity()).sum().item<int64_t>();
  auto finite_values = tiles.masked_select(finite);
  info.scale_max = finite_values.numel() ? finite_values.abs().max().item<double>() : 0.0;

  const int64_t width = info.tiles * info.tile_width + (info.tiles - 1);
  if (width > 1 << 15 || info.tile_height > 1 << 15) {
    throw std::invalid_argument("the strip would be " + std::to_string(width) + " x " +
                                std::to_string(info.tile_height) + " pixels; " + too_big_hint);
  }
  strip.image = Image(static_cast<int>(width), static_cast<int>(info.tile_height));
  const double* v = tiles.data_ptr<double>();
  const double scale = info.scale_max > 0 ? info.scale_max : 1.0;
  for (int64_t t = 0; t < info.tiles; ++t) {
    const int64_t x0 = t * (info.tile_width + 1);
    for (int64_t y = 0; y < info.tile_height; ++y) {
      for (int64_t x = 0; x < info.tile_width; ++x) {
        const double value = v[(t * info.tile_height + y) * info.tile_width + x];
        Rgba c;
        if (std::isnan(value)) {
          c = nan_mark(static_cast<int>(x0 + x), static_cast<int>(y));
        } else if (std::isinf(value)) {
          c = value > 0 ? pos_inf_mark() : neg_inf_mark();
        } else {
          c = info.diverging ? diverging(value / scale) : sequential(value / scale);
        }
        strip.image.at(static_cast<int>(x0 + x), static_cast<int>(y)) = c;
      }
    }
  }
  return strip;
}

}  // namespace nansense::render
