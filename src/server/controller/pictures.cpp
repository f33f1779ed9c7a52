#include "server/controller/pictures.h"

namespace nansense::server {

json info_json(const StripPicture& p) {
  const auto& d = p.drawn;
  return {{"layer", p.layer},
          {"kind", p.kind},
          {"position", to_json(p.position)},
          {"sequence", p.sequence},
          {"sample", p.options.sample},
          {"batch_size", d.batch_size},
          {"average", p.options.average},
          {"values", std::string(render::to_string(p.options.values))},
          {"layout", d.layout},
          {"tiles", d.tiles},
          {"tile_width", d.tile_width},
          {"tile_height", d.tile_height},
          {"width", p.width},
          {"height", p.height},
          {"scale", d.diverging ? "diverging" : "sequential"},
          {"scale_max", number(d.scale_max)},
          {"nan", d.nan},
          {"pos_inf", d.pos_inf},
          {"neg_inf", d.neg_inf}};
}

json info_json(const InputPicture& p) {
  json out = {{"input", p.input},       {"name", p.name},     {"position", to_json(p.position)},
              {"sequence", p.sequence}, {"sample", p.sample}, {"batch_size", p.batch_size},
              {"layout", p.layout},     {"width", p.width},   {"height", p.height}};
  if (!p.hint.empty()) out["hint"] = p.hint;
  json mean = json::array();
  json std = json::array();
  for (double v : p.mean) mean.push_back(number(v));
  for (double v : p.std) std.push_back(number(v));
  out["mean"] = std::move(mean);
  out["std"] = std::move(std);
  return out;
}

json info_json(const HistogramPicture& p) {
  return {{"layers", p.layers},
          {"phase", p.phase ? json(*p.phase) : json(nullptr)},
          {"channel", p.channel ? json(*p.channel) : json(nullptr)},
          {"log_x", p.log_x},
          {"log_y", p.log_y},
          {"sequence", p.sequence},
          {"width", p.width},
          {"height", p.height},
          {"series", p.series}};
}

json weight_layout_json(const render::WeightLayout& l) {
  const auto dim = [](int64_t d) { return d >= 0 ? json(d) : json(nullptr); };
  return {{"x_dim", dim(l.x_dim)}, {"y_dim", dim(l.y_dim)}, {"tile_dim", dim(l.tile_dim)}, {"index", l.index}};
}

json info_json(const WeightPicture& p) {
  const auto& d = p.drawn;
  return {{"layer", p.layer},
          {"parameter", p.parameter},
          {"tensor", p.tensor},
          {"shape", p.shape},
          {"layout", weight_layout_json(p.layout)},
          {"position", to_json(p.position)},
          {"sequence", p.sequence},
          {"tiles", d.tiles},
          {"tile_width", d.tile_width},
          {"tile_height", d.tile_height},
          {"width", p.width},
          {"height", p.height},
          {"scale_max", number(d.scale_max)},
          {"nan", d.nan},
          {"pos_inf", d.pos_inf},
          {"neg_inf", d.neg_inf}};
}

}  // namespace nansense::server
