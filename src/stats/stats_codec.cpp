#include "stats/stats_codec.h"

#include "common/dtype.h"
#include "nansense/errors.h"
#include "stats/shards.h"

#include <torch/serialize.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace nansense::stats {

namespace {

using json = nlohmann::json;

json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}
double num_of(const json& j) {
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw std::invalid_argument("a number, got \"" + s + "\"");
  }
  return j.get<double>();
}
json opt(const std::optional<double>& v) { return v ? num(*v) : json(); }
std::optional<double> opt_of(const json& j) { return j.is_null() ? std::nullopt : std::optional<double>(num_of(j)); }
// A missing min, max or median: null, or NaN in files written before these
// were optional.
std::optional<double> finite_of(const json& j) {
  auto v = opt_of(j);
  if (v && std::isnan(*v)) return std::nullopt;
  return v;
}

json to_json(const TensorStatsSnapshot& t) {
  return {{"n", t.n},
          {"sum", num(t.sum)},
          {"sum_sq", num(t.sum_sq)},
          {"min", opt(t.min)},
          {"max", opt(t.max)},
          {"nan", t.nan},
          {"pos_inf", t.pos_inf},
          {"neg_inf", t.neg_inf},
          {"hist", t.hist},
          {"channel_hists", t.channel_hists},
          {"channels", t.channels},
          {"binned", t.binned},
          {"median", opt(t.median)},
          {"dead_count", t.dead_count ? json(*t.dead_count) : json()},
          {"dead_channels", t.dead_channels},
          {"dtype", t.dtype == c10::ScalarType::Undefined ? json() : json(common::dtype_name(t.dtype))}};
}
TensorStatsSnapshot tensor_stats_of(const json& j) {
  TensorStatsSnapshot t;
  t.n = j.at("n").get<int64_t>();
  t.sum = num_of(j.at("sum"));
  t.sum_sq = num_of(j.at("sum_sq"));
  t.min = finite_of(j.at("min"));
  t.max = finite_of(j.at("max"));
  t.nan = j.at("nan").get<int64_t>();
  t.pos_inf = j.at("pos_inf").get<int64_t>();
  t.neg_inf = j.at("neg_inf").get<int64_t>();
  t.hist = j.at("hist").get<std::vector<int64_t>>();
  t.channel_hists = j.at("channel_hists").get<std::vector<std::vector<int64_t>>>();
  t.channels = j.at("channels").get<int64_t>();
  t.binned = j.at("binned").get<int64_t>();
  t.median = finite_of(j.at("median"));
  if (!j.at("dead_count").is_null()) t.dead_count = j.at("dead_count").get<int64_t>();
  t.dead_channels = j.at("dead_channels").get<std::vector<int64_t>>();
  // Files written before the dtype was kept have none.
  if (j.contains("dtype") && !j.at("dtype").is_null()) {
    t.dtype = common::dtype_of_name(j.at("dtype").get<std::string>()).value_or(c10::ScalarType::Undefined);
  }
  return t;
}

json to_json(const ParameterSample& p) {
  return {{"epoch", p.epoch},
          {"value_norm", num(p.value_norm)},
          {"mean", num(p.mean)},
          {"std", num(p.std)},
          {"min", num(p.min)},
          {"max", num(p.max)},
          {"grad_norm", opt(p.grad_norm)},
          {"grad_mean", opt(p.grad_mean)},
          {"grad_std", opt(p.grad_std)},
          {"grad_min", opt(p.grad_min)},
          {"grad_max", opt(p.grad_max)},
          {"update_ratio", opt(p.update_ratio)},
          {"median", opt(p.median)}};
}
ParameterSample parameter_sample_of(const json& j) {
  ParameterSample p;
  p.epoch = j.at("epoch").get<int64_t>();
  p.value_norm = num_of(j.at("value_norm"));
  p.mean = num_of(j.at("mean"));
  p.std = num_of(j.at("std"));
  p.min = num_of(j.at("min"));
  p.max = num_of(j.at("max"));
  p.grad_norm = opt_of(j.at("grad_norm"));
  p.grad_mean = opt_of(j.at("grad_mean"));
  p.grad_std = opt_of(j.at("grad_std"));
  p.grad_min = opt_of(j.at("grad_min"));
  p.grad_max = opt_of(j.at("grad_max"));
  p.update_ratio = opt_of(j.at("update_ratio"));
  if (j.contains("median")) p.median = opt_of(j.at("median"));  // absent in older files
  return p;
}

std::string tensor_key(size_t bucket, size_t gallery, const char* what) {
  return "b" + std::to_string(bucket) + "g" + std::to_string(gallery) + what;
}

}  // namespace

void write_stats(const WatchSnapshot& view, state::StateFile& file) {
  json buckets = json::array();
  torch::serialize::OutputArchive archive;
  size_t index = 0;
  for (const auto& [key, layers] : view.layers) {
    for (const auto& b : layers) {
      json patches = json::array();
      for (size_t g = 0; g < b.patches.size(); ++g) {
        const auto& gv = b.patches[g];
        json slots = json::array();
        for (const auto& s : gv.slots) {
          slots.push_back({s.filled, num(s.score), s.batch, s.sample, s.y, s.x, s.top, s.left});
        }
        patches.push_back({{"ranking", std::string(to_string(gv.ranking))},
                           {"samples", gv.samples},
                           {"channels", gv.channels},
                           {"input_height", gv.input_height},
                           {"input_width", gv.input_width},
                           {"slots", std::move(slots)},
                           {"crops", gv.crops.defined()},
                           {"heat", gv.heat.defined()}});
        if (gv.crops.defined()) archive.write(tensor_key(index, g, "c"), gv.crops.contiguous(), /*is_buffer=*/true);
        if (gv.heat.defined()) archive.write(tensor_key(index, g, "h"), gv.heat.contiguous(), /*is_buffer=*/true);
      }
      buckets.push_back({{"layer", b.layer},
                         {"phase", b.phase},
                         {"epoch", b.epoch},
                         {"batches", b.batches},
                         {"activation", b.activation ? to_json(*b.activation) : json()},
                         {"gradient", b.gradient ? to_json(*b.gradient) : json()},
                         {"patches", std::move(patches)},
                         {"patches_note", b.patches_note ? json(*b.patches_note) : json()},
                         {"patches_skipped", b.patches_skipped}});
      ++index;
    }
  }
  json parameters = json::object();
  for (const auto& [name, samples] : view.parameters) {
    json list = json::array();
    for (const auto& s : samples) list.push_back(to_json(s));
    parameters[name] = std::move(list);
  }
  json series = json::array();
  for (const auto& s : view.series) {
    json points = json::array();
    for (const auto& p : s.points)
      points.push_back({p.epoch, p.batch ? json(*p.batch) : json(), num(p.x), num(p.value)});
    series.push_back({{"name", s.name}, {"phase", s.phase}, {"layer", s.layer}, {"points", std::move(points)}});
  }
  json out = {{"sequence", view.sequence},
              {"buckets", std::move(buckets)},
              {"parameters", std::move(parameters)},
              {"owner", view.owner},
              {"series", std::move(series)}};
  file.add("stats") = out.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string& bytes = file.add("stats_tensors");
  archive.save_to([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
}

std::shared_ptr<const WatchSnapshot> read_stats(const state::StateFile& file) {
  auto view = std::make_shared<WatchSnapshot>();
  try {
    const json in = json::parse(file.at("stats"));
    view->sequence = in.at("sequence").get<uint64_t>();
    const auto& tensor_bytes = file.at("stats_tensors");
    torch::serialize::InputArchive archive;
    archive.load_from(tensor_bytes.data(), tensor_bytes.size(), torch::Device(torch::kCPU));
    size_t index = 0;
    for (const auto& jb : in.at("buckets")) {
      LayerStatsSnapshot b;
      b.layer = jb.at("layer").get<std::string>();
      b.phase = jb.at("phase").get<std::string>();
      b.epoch = jb.at("epoch").get<int64_t>();
      b.batches = jb.at("batches").get<int64_t>();
      if (!jb.at("activation").is_null()) b.activation = tensor_stats_of(jb.at("activation"));
      if (!jb.at("gradient").is_null()) b.gradient = tensor_stats_of(jb.at("gradient"));
      size_t g = 0;
      for (const auto& jg : jb.at("patches")) {
        PatchGallery gv;
        const auto ranking = patch_ranking_from(jg.at("ranking").get<std::string>());
        if (!ranking) throw std::invalid_argument("unknown gallery ranking " + jg.at("ranking").dump());
        gv.ranking = *ranking;
        gv.samples = jg.at("samples").get<int64_t>();
        gv.channels = jg.at("channels").get<int64_t>();
        gv.input_height = jg.at("input_height").get<int64_t>();
        gv.input_width = jg.at("input_width").get<int64_t>();
        for (const auto& js : jg.at("slots")) {
          PatchSlot s;
          s.filled = js.at(0).get<bool>();
          s.score = num_of(js.at(1));
          s.batch = js.at(2).get<int64_t>();
          s.sample = js.at(3).get<int64_t>();
          s.y = js.at(4).get<int64_t>();
          s.x = js.at(5).get<int64_t>();
          s.top = js.at(6).get<int64_t>();
          s.left = js.at(7).get<int64_t>();
          gv.slots.push_back(s);
        }
        if (static_cast<int64_t>(gv.slots.size()) != gv.samples * gv.channels) {
          throw std::invalid_argument("a gallery of " + b.layer + " has " + std::to_string(gv.slots.size()) +
                                      " slots for " + std::to_string(gv.samples) + " x " + std::to_string(gv.channels));
        }
        if (jg.at("crops").get<bool>()) archive.read(tensor_key(index, g, "c"), gv.crops, /*is_buffer=*/true);
        if (jg.at("heat").get<bool>()) archive.read(tensor_key(index, g, "h"), gv.heat, /*is_buffer=*/true);
        b.patches.push_back(std::move(gv));
        ++g;
      }
      if (!jb.at("patches_note").is_null()) b.patches_note = jb.at("patches_note").get<std::string>();
      b.patches_skipped = jb.at("patches_skipped").get<int64_t>();
      view->layers[{b.layer, b.phase}].push_back(std::move(b));
      ++index;
    }
    for (const auto& [name, list] : in.at("parameters").items()) {
      auto& samples = view->parameters[name];
      for (const auto& s : list) samples.push_back(parameter_sample_of(s));
    }
    view->owner = in.at("owner").get<std::map<std::string, std::string>>();
    for (const auto& js : in.at("series")) {
      SeriesView s;
      s.name = js.at("name").get<std::string>();
      s.phase = js.at("phase").get<std::string>();
      s.layer = js.at("layer").get<std::string>();
      for (const auto& jp : js.at("points")) {
        ScalarPoint p;
        p.epoch = jp.at(0).get<int64_t>();
        if (!jp.at(1).is_null()) p.batch = jp.at(1).get<int64_t>();
        p.x = num_of(jp.at(2));
        p.value = num_of(jp.at(3));
        s.points.push_back(p);
      }
      view->series.push_back(std::move(s));
    }
  } catch (const state::StateError&) {
    throw;
  } catch (const std::exception& e) {
    throw state::StateError(file.origin + ": its statistics cannot be read: " + e.what());
  }
  return view;
}

std::string encode_shard(const WatchSnapshot& view) {
  json buckets = json::array();
  for (const auto& [key, epochs] : view.layers) {
    if (epochs.empty()) continue;
    const auto& b = epochs.back();  // the newest epoch: the older ones were sent while they were
    buckets.push_back({{"layer", b.layer},
                       {"phase", b.phase},
                       {"epoch", b.epoch},
                       {"batches", b.batches},
                       {"activation", b.activation ? to_json(*b.activation) : json()},
                       {"gradient", b.gradient ? to_json(*b.gradient) : json()}});
  }
  return json{{"buckets", std::move(buckets)}}.dump();
}

std::vector<LayerStatsSnapshot> decode_shard(const std::string& text) {
  std::vector<LayerStatsSnapshot> out;
  try {
    const auto j = json::parse(text);
    for (const auto& b : j.at("buckets")) {
      LayerStatsSnapshot v;
      v.layer = b.at("layer").get<std::string>();
      v.phase = b.at("phase").get<std::string>();
      v.epoch = b.at("epoch").get<int64_t>();
      v.batches = b.at("batches").get<int64_t>();
      if (!b.at("activation").is_null()) v.activation = tensor_stats_of(b.at("activation"));
      if (!b.at("gradient").is_null()) v.gradient = tensor_stats_of(b.at("gradient"));
      out.push_back(std::move(v));
    }
  } catch (const std::exception& e) {
    throw ArgumentError(std::string("a rank's statistics shard is malformed: ") + e.what());
  }
  return out;
}

}  // namespace nansense::stats
