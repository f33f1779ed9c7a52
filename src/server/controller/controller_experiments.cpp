// Experiments on the paused model: the controller's side of
// experiments::Engine (validation is the engine's; this file maps refusals to
// Refusals, results to JSON and draws them).
#include <algorithm>
#include <cmath>

#include "experiments/engine.h"
#include "render/colormap.h"
#include "render/input_image.h"
#include "render/text.h"
#include "render/tiles.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

using experiments::Result;

json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double d : v) out.push_back(common::number(d));
  return out;
}

// Per sample: the attribution's range and mean magnitude.
json attribution_summary(const torch::Tensor& attr) {
  json out = json::array();
  if (!attr.defined()) return out;
  auto flat = attr.reshape({attr.size(0), -1}).to(torch::kDouble);
  for (int64_t i = 0; i < flat.size(0); ++i) {
    out.push_back({{"min", common::number(flat[i].min().item<double>())},
                   {"max", common::number(flat[i].max().item<double>())},
                   {"mean_abs", common::number(flat[i].abs().mean().item<double>())}});
  }
  return out;
}

json result_json(const Result& r, std::optional<int64_t> ahead, bool history = true) {
  json out = {{"seq", r.seq},
              {"kind", r.kind},
              {"layer", r.layer},
              {"params", r.params},
              {"stage", std::string(experiments::to_string(r.stage))},
              {"done", r.finished()},
              {"step", r.step},
              {"total", r.total},
              {"objective", common::number(r.objective)},
              {"seconds", common::number(r.seconds)},
              {"notes", r.notes}};
  if (r.stage == Result::Stage::kQueued) out["queued_ahead"] = ahead.value_or(0);
  if (!r.tab.empty()) out["tab"] = r.tab;
  if (!r.error.empty()) out["error"] = r.error;
  if (!r.stop_reason.empty()) out["stop_reason"] = r.stop_reason;
  if (r.kind == "deep_dream") {
    if (history) out["objectives"] = numbers(r.objectives);
    out["channels"] = r.channels;
    out["produced_images"] = r.images.defined() ? r.images.size(0) : 0;
  } else {
    out["targets"] = r.targets;
    out["target_values"] = numbers(r.target_values);
    out["attribution_sums"] = numbers(r.attribution_sums);
    out["attributions"] = attribution_summary(r.attributions);
    if (r.attributions.defined()) out["attribution_shape"] = r.attributions.sizes().vec();
  }
  return out;
}

// One sample's attribution as a 2-D map: input channels summed, a 1-D map as one row.
torch::Tensor as_map(torch::Tensor a) {
  a = a.to(torch::kFloat);
  if (a.dim() >= 3) a = a.reshape({a.size(0), a.size(a.dim() - 2), a.size(a.dim() - 1)}).sum(0);
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (a.dim() == 0) a = a.reshape({1, 1});
  return a;
}

}  // namespace

ExperimentArea::ExperimentArea(Controller& owner, detail::SessionPort& session) : owner_(owner), session_(session) {}

json ExperimentArea::list_experiments() const {
  detail::LabPort& lab = session_;
  const auto arch = session_.architecture();
  json kinds = json::array();
  const json defaults = lab.experiment_defaults();
  for (const auto& k : experiments::kinds()) {
    json params = json::array();
    for (const auto& p : k.params) {
      json spec = {{"key", p.key}, {"label", p.label}, {"description", p.description}};
      switch (p.type) {
        case experiments::ParamSpec::Type::kInteger:
          spec["type"] = "integer";
          break;
        case experiments::ParamSpec::Type::kNumber:
          spec["type"] = "number";
          break;
        case experiments::ParamSpec::Type::kBoolean:
          spec["type"] = "boolean";
          break;
        case experiments::ParamSpec::Type::kChoice:
          spec["type"] = "choice";
          break;
      }
      spec["default"] =
          defaults.contains(k.kind) && defaults[k.kind].contains(p.key) ? defaults[k.kind][p.key] : p.fallback;
      if (p.minimum) spec["minimum"] = *p.minimum;
      if (p.maximum) spec["maximum"] = *p.maximum;
      if (!p.options.empty()) spec["options"] = p.options;
      params.push_back(std::move(spec));
    }
    json layers = json::array(), unusable = json::array();
    if (arch) {
      for (const auto& l : arch->layers) {
        if (l.role == LayerInfo::Role::kInput) continue;
        if (auto why = experiments::why_unusable(k, l)) {
          unusable.push_back({{"layer", l.name}, {"reason", *why}});
        } else {
          layers.push_back(l.name);
        }
      }
    }
    kinds.push_back({{"kind", k.kind},
                     {"title", k.title},
                     {"summary", k.summary},
                     {"description", k.description},
                     {"attribution", k.attribution},
                     {"layers", std::move(layers)},
                     {"unusable_layers", std::move(unusable)},
                     {"params", std::move(params)}});
  }
  json autos = json::array();
  for (const auto& e : lab.auto_experiments()) {
    autos.push_back({{"tab", e.tab}, {"kind", e.kind}, {"layer", e.layer}, {"params", e.params}});
  }
  return {{"kinds", std::move(kinds)},
          {"time_limit_seconds", lab.experiment_time_limit_seconds()},
          {"auto_run", lab.auto_run_experiments()},
          {"forward_known", lab.experiment_forward_known()},
          {"kept_results", lab.kept_experiments()},
          {"auto_experiments", std::move(autos)}};
}

json ExperimentArea::run_experiment(const std::string& kind, const std::string& layer, const json& params, Wait wait) {
  detail::LabPort& lab = session_;
  auto sub = lab.submit_experiment(kind, layer, params);
  auto result = wait.count() > 0 ? lab.wait_for_experiment(sub.seq, wait) : lab.experiment_result(sub.seq);
  json out;
  if (result) {
    out = result_json(*result, lab.experiment_queued_ahead(sub.seq));
  } else {
    Result gone;  // already dropped from the 8 kept (a burst of newer requests)
    gone.seq = sub.seq;
    gone.kind = kind;
    gone.layer = layer;
    gone.params = sub.params;
    out = result_json(gone, std::nullopt);
    out["stage"] = "absent";
  }
  out["ignored_params"] = sub.ignored;
  if (!sub.clamped.empty()) out["clamped_params"] = sub.clamped;
  return out;
}

json ExperimentArea::get_experiment_result(uint64_t seq) const {
  detail::LabPort& lab = session_;
  auto result = lab.experiment_result(seq);
  if (!result) {
    auto kept = lab.kept_experiments();
    std::string list;
    for (auto s : kept) list += (list.empty() ? "" : ", ") + std::to_string(s);
    throw Refusal(Refusal::Kind::kNotFound,
                  "no experiment " + std::to_string(seq) +
                      " (only the 8 most recent results are kept; kept: " + (list.empty() ? "none" : list) + ")",
                  "seq");
  }
  return result_json(*result, lab.experiment_queued_ahead(seq));
}

ExperimentCancel ExperimentArea::cancel_experiment(std::optional<uint64_t> seq) {
  return {session_.cancel_experiments(seq)};
}

ExperimentAutoRun ExperimentArea::set_auto_run_experiments(bool enabled) {
  session_.set_auto_run_experiments(enabled);
  return {enabled};
}

ExperimentDefaults ExperimentArea::set_experiment_defaults(const std::string& kind, const json& params) {
  auto ignored = session_.set_experiment_defaults(kind, params);
  ExperimentDefaults out{owner_.stats().get_settings()};
  out.ignored_params = std::move(ignored);
  return out;
}

AutoExperiment ExperimentArea::set_auto_experiment(const std::string& tab, const std::string& kind,
                                                   const std::string& layer, const json& params) {
  detail::LabPort& lab = session_;
  auto sub = lab.set_auto_experiment(tab, kind, layer, params, false);
  return {tab,
          sub.seq,
          sub.params,
          sub.ignored,
          lab.auto_run_experiments(),
          static_cast<int64_t>(experiments::AutoRuns::kTtl.count())};
}

AutoExperimentCleared ExperimentArea::clear_auto_experiment(const std::string& tab) {
  return {tab, session_.clear_auto_experiment(tab)};
}

std::vector<json> ExperimentArea::experiment_changes(uint64_t& version) const {
  detail::LabPort& lab = session_;
  auto changes = lab.experiment_changes_since(version);
  version = changes.version;
  std::vector<json> out;
  for (const auto& r : changes.results) out.push_back(result_json(*r, lab.experiment_queued_ahead(r->seq), false));
  return out;
}

std::shared_ptr<const ExperimentPicture> ExperimentArea::render_experiment(uint64_t seq, bool overlay_input) const {
  auto result = session_.experiment_result(seq);
  if (!result) {
    throw Refusal(Refusal::Kind::kNotFound, "no experiment " + std::to_string(seq), "seq");
  }
  const Result& r = *result;
  if (r.stage == Result::Stage::kFailed) {
    throw Refusal(Refusal::Kind::kConflict, "experiment " + std::to_string(seq) + " failed: " + r.error);
  }
  const auto& display = session_.display_options();
  auto arch = session_.architecture();
  const std::string input_name = arch && !arch->inputs.empty() ? arch->inputs.front() : "input";
  render::InputImageOptions in_opts;
  in_opts.mean = display.input_mean().for_input(input_name);
  in_opts.std = display.input_std().for_input(input_name);
  in_opts.transform = display.input_transform().for_input(input_name);
  auto draw_input = [&](const torch::Tensor& batch, int64_t i) {
    in_opts.sample = i;
    return render::render_input(batch, in_opts).image;
  };
  std::vector<std::vector<render::Tile>> rows;
  auto picture = std::make_shared<ExperimentPicture>();
  picture->seq = seq;
  picture->kind = r.kind;
  picture->stage = std::string(experiments::to_string(r.stage));
  picture->step = r.step;
  picture->total = r.total;
  try {
    if (r.kind == "deep_dream") {
      if (!r.images.defined()) {
        throw Refusal(Refusal::Kind::kConflict,
                      "experiment " + std::to_string(seq) + " has no image yet (" + picture->stage + ")");
      }
      std::vector<render::Tile> row;
      const bool from_sample = r.params.value("start", "noise") == "sample";
      if (from_sample) row.push_back({draw_input(r.start, 0), "start"});
      for (int64_t i = 0; i < r.images.size(0); ++i) {
        const int64_t channel = static_cast<size_t>(i) < r.channels.size() ? r.channels[static_cast<size_t>(i)] : i;
        row.push_back({draw_input(r.images, i), "channel " + std::to_string(channel)});
      }
      rows.push_back(std::move(row));
      picture->caption = "Deep Dream of layer \"" + r.layer + "\", " + picture->stage + " at step " +
                         std::to_string(r.step) + "/" + std::to_string(r.total) + ": " +
                         (from_sample ? "the starting sample, then " : "") +
                         "one image per channel (channel 0, 1, ... " +
                         "from the left), each the input that raises that channel's mean activation.";
    } else {
      if (!r.attributions.defined()) {
        throw Refusal(Refusal::Kind::kConflict,
                      "experiment " + std::to_string(seq) + " has no attribution yet (" + picture->stage + ")");
      }
      const bool sequential = r.kind == "gradcam";
      for (int64_t i = 0; i < r.attributions.size(0); ++i) {
        render::Image input = draw_input(r.inputs, i);
        torch::Tensor map = render::stretched(as_map(r.attributions[i]), input.height, input.width);
        render::Image heat = render::colour_map(map, sequential);
        const std::string sample = "sample " + std::to_string(i);
        if (overlay_input) {
          rows.push_back({render::Tile{render::overlay(input, heat, map), sample + ": overlay"}});
        } else {
          rows.push_back({render::Tile{heat, sample + ": attribution"}, render::Tile{input, "input"}});
        }
      }
      picture->caption =
          r.kind + " of layer \"" + r.layer + "\" (" + picture->stage + "): one row per sample, " +
          (overlay_input ? "the attribution over the input in grey" : "the attribution map, then the input") +
          (sequential ? "; white = 0, red = the sample's largest value (Grad-CAM is ReLU'd)"
                      : "; blue negative, white 0, red positive, scaled per sample") +
          ". Maps are drawn at the input's size.";
    }
  } catch (const std::invalid_argument& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  }
  render::Image image = render::compose(rows);
  picture->png = render::encode_png(image);
  picture->width = image.width;
  picture->height = image.height;
  picture->overlay = overlay_input;
  return picture;
}

json info_json(const ExperimentPicture& p) {
  return {{"seq", p.seq},     {"kind", p.kind},       {"stage", p.stage}, {"step", p.step},
          {"total", p.total}, {"overlay", p.overlay}, {"width", p.width}, {"height", p.height}};
}

}  // namespace nansense::server
