// Experiments on the paused model: the controller's side of
// experiments::Engine (validation is the engine's; this file maps refusals to
// Refusals, results to their replies (replies_lab.h) and draws them).
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

std::vector<json> numbers(const std::vector<double>& v) {
  std::vector<json> out;
  for (double d : v) out.push_back(common::number(d));
  return out;
}

// Per sample: the attribution's range and mean magnitude.
std::vector<AttributionRange> attribution_summary(const torch::Tensor& attr) {
  std::vector<AttributionRange> out;
  if (!attr.defined()) return out;
  auto flat = attr.reshape({attr.size(0), -1}).to(torch::kDouble);
  for (int64_t i = 0; i < flat.size(0); ++i) {
    out.push_back({common::number(flat[i].min().item<double>()), common::number(flat[i].max().item<double>()),
                   common::number(flat[i].abs().mean().item<double>())});
  }
  return out;
}

ExperimentResult result_reply(const Result& r, std::optional<int64_t> ahead, bool history = true) {
  ExperimentResult out;
  out.seq = r.seq;
  out.kind = r.kind;
  out.layer = r.layer;
  out.params = r.params;
  out.stage = std::string(experiments::to_string(r.stage));
  out.done = r.finished();
  out.step = r.step;
  out.total = r.total;
  out.objective = common::number(r.objective);
  out.seconds = common::number(r.seconds);
  out.notes = r.notes;
  if (r.stage == Result::Stage::kQueued) out.queued_ahead = ahead.value_or(0);
  if (!r.tab.empty()) out.tab = r.tab;
  if (!r.error.empty()) out.error = r.error;
  if (!r.stop_reason.empty()) out.stop_reason = r.stop_reason;
  if (r.kind == "deep_dream") {
    if (history) out.objectives = numbers(r.objectives);
    out.channels = r.channels;
    out.produced_images = r.images.defined() ? r.images.size(0) : 0;
  } else {
    out.targets = r.targets;
    out.target_values = numbers(r.target_values);
    out.attribution_sums = numbers(r.attribution_sums);
    out.attributions = attribution_summary(r.attributions);
    if (r.attributions.defined()) out.attribution_shape = r.attributions.sizes().vec();
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

ExperimentList ExperimentArea::list_experiments() const {
  detail::LabPort& lab = session_;
  const auto arch = session_.architecture();
  ExperimentList out;
  const json defaults = lab.experiment_defaults();
  for (const auto& k : experiments::kinds()) {
    ExperimentKind kind{k.kind, k.title, k.summary, k.description, k.attribution, {}, {}, {}};
    for (const auto& p : k.params) {
      ExperimentParamSpec spec;
      spec.key = p.key;
      spec.label = p.label;
      spec.description = p.description;
      switch (p.type) {
        case experiments::ParamSpec::Type::kInteger:
          spec.type = "integer";
          break;
        case experiments::ParamSpec::Type::kNumber:
          spec.type = "number";
          break;
        case experiments::ParamSpec::Type::kBoolean:
          spec.type = "boolean";
          break;
        case experiments::ParamSpec::Type::kChoice:
          spec.type = "choice";
          break;
      }
      spec.fallback =
          defaults.contains(k.kind) && defaults[k.kind].contains(p.key) ? defaults[k.kind][p.key] : p.fallback;
      spec.minimum = p.minimum;
      spec.maximum = p.maximum;
      if (!p.options.empty()) spec.options = p.options;
      kind.params.push_back(std::move(spec));
    }
    if (arch) {
      for (const auto& l : arch->layers) {
        if (l.role == LayerInfo::Role::kInput) continue;
        if (auto why = experiments::why_unusable(k, l)) {
          kind.unusable_layers.push_back({l.name, *why});
        } else {
          kind.layers.push_back(l.name);
        }
      }
    }
    out.kinds.push_back(std::move(kind));
  }
  for (const auto& e : lab.auto_experiments()) out.auto_experiments.push_back({e.tab, e.kind, e.layer, e.params});
  out.time_limit_seconds = lab.experiment_time_limit_seconds();
  out.auto_run = lab.auto_run_experiments();
  out.forward_known = lab.experiment_forward_known();
  out.kept_results = lab.kept_experiments();
  return out;
}

ExperimentResult ExperimentArea::run_experiment(const std::string& kind, const std::string& layer, const json& params,
                                                Wait wait) {
  detail::LabPort& lab = session_;
  const auto sub = lab.submit_experiment(kind, layer, params);
  ExperimentResult out = request_result(sub.seq, kind, layer, sub.params, wait);
  out.ignored_params = sub.ignored;
  if (!sub.clamped.empty()) out.clamped_params = sub.clamped;
  return out;
}

ExperimentResult ExperimentArea::request_result(uint64_t seq, const std::string& kind, const std::string& layer,
                                                const json& params, Wait wait) const {
  const detail::LabPort& lab = session_;
  const auto result = wait.count() > 0 ? lab.wait_for_experiment(seq, wait) : lab.experiment_result(seq);
  if (result) return result_reply(*result, lab.experiment_queued_ahead(seq));
  Result gone;  // already dropped from the 8 kept (a burst of newer requests)
  gone.seq = seq;
  gone.kind = kind;
  gone.layer = layer;
  gone.params = params;
  ExperimentResult out = result_reply(gone, std::nullopt);
  out.stage = "absent";
  out.queued_ahead.reset();
  return out;
}

ExperimentResult ExperimentArea::get_experiment_result(uint64_t seq) const {
  const detail::LabPort& lab = session_;
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
  return result_reply(*result, lab.experiment_queued_ahead(seq));
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
  return ExperimentDefaults{owner_.stats().get_settings(), std::move(ignored)};
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

std::vector<ExperimentResult> ExperimentArea::experiment_changes(uint64_t& version) const {
  detail::LabPort& lab = session_;
  auto changes = lab.experiment_changes_since(version);
  version = changes.version;
  std::vector<ExperimentResult> out;
  for (const auto& r : changes.results) out.push_back(result_reply(*r, lab.experiment_queued_ahead(r->seq), false));
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
