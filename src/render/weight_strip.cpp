#include "render/weight_strip.h"

#include <stdexcept>

#include "common/dtype.h"

namespace nansense::render {

namespace {

std::string range_of(int64_t rank) {
  return rank == 0 ? "none: the tensor is a scalar" : "0.." + std::to_string(rank - 1) + " or -1 for none";
}

}  // namespace

WeightLayout default_weight_layout(c10::IntArrayRef shape) {
  const auto rank = static_cast<int64_t>(shape.size());
  WeightLayout l;
  l.index.assign(shape.size(), 0);
  switch (rank) {
    case 0:
      break;
    case 1:
      l.x_dim = 0;
      break;
    case 2:
      l.y_dim = 0;
      l.x_dim = 1;
      break;
    case 3:
      l.tile_dim = 1;
      l.x_dim = 2;
      break;
    default:
      l.tile_dim = 1;
      l.y_dim = rank - 2;
      l.x_dim = rank - 1;
      break;
  }
  return l;
}

WeightLayout resolve_weight_layout(c10::IntArrayRef shape, const WeightLayoutRequest& request) {
  const auto rank = static_cast<int64_t>(shape.size());
  const std::string shape_text = common::shape_text(shape);
  struct Role {
    const char* name;
    std::optional<int64_t> asked;
    int64_t WeightLayout::*dim;
  };
  const Role roles[] = {{"tile_dim", request.tile_dim, &WeightLayout::tile_dim},
                        {"y_dim", request.y_dim, &WeightLayout::y_dim},
                        {"x_dim", request.x_dim, &WeightLayout::x_dim}};
  for (const auto& r : roles) {
    if (r.asked && (*r.asked < -1 || *r.asked >= rank)) {
      throw std::invalid_argument(std::string(r.name) + " " + std::to_string(*r.asked) + " is out of range: a " +
                                  shape_text + " tensor's dimensions are " + range_of(rank));
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      if (roles[i].asked && roles[j].asked && *roles[i].asked >= 0 && *roles[i].asked == *roles[j].asked) {
        throw std::invalid_argument(std::string(roles[i].name) + " and " + roles[j].name + " are both " +
                                    std::to_string(*roles[i].asked) +
                                    ": a dimension takes one role (X, Y, Tile or Index)");
      }
    }
  }
  if (static_cast<int64_t>(request.index.size()) > rank) {
    throw std::invalid_argument("index has " + std::to_string(request.index.size()) + " entries, but a " + shape_text +
                                " tensor has " + std::to_string(rank) + " dimensions: give one index per dimension");
  }

  WeightLayout l = default_weight_layout(shape);
  for (const auto& r : roles) {
    if (!r.asked) continue;
    const int64_t dim = *r.asked;
    // The dimension leaves the role it held; the role's old holder becomes an Index.
    for (const auto& other : roles) {
      if (other.dim != r.dim && dim >= 0 && l.*(other.dim) == dim) l.*(other.dim) = -1;
    }
    l.*(r.dim) = dim;
  }
  for (size_t d = 0; d < request.index.size(); ++d) l.index[d] = request.index[d];
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t i = l.index[static_cast<size_t>(d)];
    if (l.is_index(d) && (i < 0 || i >= shape[static_cast<size_t>(d)])) {
      throw std::invalid_argument(
          "index " + std::to_string(i) + " of dimension " + std::to_string(d) + " is out of range: it has size " +
          std::to_string(shape[static_cast<size_t>(d)]) +
          (shape[static_cast<size_t>(d)] > 0 ? " (0.." + std::to_string(shape[static_cast<size_t>(d)] - 1) + ")" : "") +
          " in a " + shape_text + " tensor");
    }
  }
  return l;
}

torch::Tensor weight_tiles(const torch::Tensor& tensor, const WeightLayout& layout) {
  const int64_t rank = tensor.dim();
  if (rank == 0) return tensor.reshape({1, 1, 1});
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d) {
    if (layout.is_index(d)) order.push_back(d);
  }
  const size_t held = order.size();
  for (int64_t d : {layout.tile_dim, layout.y_dim, layout.x_dim}) {
    if (d >= 0) order.push_back(d);
  }
  torch::Tensor t = tensor.permute(order);
  for (size_t i = 0; i < held; ++i) t = t.select(0, layout.index[static_cast<size_t>(order[i])]);
  const auto size_of = [&](int64_t d) { return d >= 0 ? tensor.size(d) : int64_t{1}; };
  return t.reshape({size_of(layout.tile_dim), size_of(layout.y_dim), size_of(layout.x_dim)});
}

Strip render_weight_strip(const torch::Tensor& tensor, const WeightLayout& layout) {
  torch::NoGradGuard no_grad;
  if (!tensor.defined()) throw std::invalid_argument("nothing to draw: the tensor is undefined");
  if (!tensor.is_floating_point()) {
    throw std::invalid_argument("cannot draw a " + common::dtype_name(tensor.scalar_type()) + " tensor");
  }
  return render_tiles(weight_tiles(tensor, layout), /*signed_scale=*/true, "weight",
                      "choose fewer tiles (another Tile dimension, or none)");
}

std::string describe(const WeightLayout& l) {
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (l.tile_dim >= 0) add("tile=" + std::to_string(l.tile_dim));
  if (l.y_dim >= 0) add("y=" + std::to_string(l.y_dim));
  if (l.x_dim >= 0) add("x=" + std::to_string(l.x_dim));
  for (size_t d = 0; d < l.index.size(); ++d) {
    if (l.is_index(static_cast<int64_t>(d))) add("index[" + std::to_string(d) + "]=" + std::to_string(l.index[d]));
  }
  return out.empty() ? "scalar" : out;
}

}  // namespace nansense::render
