// The controller's statistics over time: the settings (scope, watched
// layers, update cadence, per-channel detail), the published statistics
// view, the current batch binned the same way, logged series, and the
// histogram chart. Views are immutable CPU copies; nothing here touches the
// training thread.
#include <algorithm>
#include <set>
#include <tuple>

#include "common/text.h"
#include "common/dtype.h"
#include "experiments/engine.h"
#include "nansense/errors.h"
#include "render/histogram_plot.h"
#include "server/controller/controller.h"
#include "server/controller/lookup.h"
#include "session/session_port.h"
#include "stats/stats_store.h"

namespace nansense::server {

namespace {

// bool and integer dtypes, as common::dtype_name spells them.
bool is_value_dtype(const std::string& dtype) {
  return dtype == "bool" || dtype.rfind("int", 0) == 0 || dtype.rfind("uint", 0) == 0;
}

// What a bool or integer tensor holds, in counts: no moment of an id or a
// mask means anything.
ValueCounts value_counts(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  auto v = t.detach().to(torch::kCPU, torch::kLong).reshape({-1});
  ValueCounts out;
  out.dtype = common::dtype_name(t.scalar_type());
  out.numel = v.numel();
  if (v.numel() == 0) return out;
  auto [lo, hi] = torch::aminmax(v);
  out.min = lo.item<int64_t>();
  out.max = hi.item<int64_t>();
  out.distinct = std::get<0>(torch::_unique(v, /*sorted=*/false)).numel();
  if (t.scalar_type() == torch::kBool) {
    const auto count = v.sum().item<int64_t>();
    out.true_count = count;
    out.true_fraction = static_cast<double>(count) / static_cast<double>(v.numel());
  }
  return out;
}

json frequency_json(const UpdateFrequency& f) {
  const bool seconds = f.unit() == UpdateFrequency::Unit::kSeconds;
  return {{"unit", std::string(to_string(f.unit()))},
          {"n", seconds ? number(f.n()) : json(static_cast<int64_t>(f.n()))},
          {"phase", f.phase() ? json(*f.phase()) : json(nullptr)}};
}

CollectedStats collected_stats(const TensorStatsSnapshot& v) {
  CollectedStats out;
  out.n = v.n;
  out.sum = number(v.sum);
  out.sum_sq = number(v.sum_sq);
  out.mean = number(v.mean());
  out.std = number(v.std());
  out.median = number(v.median);
  out.min = number(v.min);
  out.max = number(v.max);
  out.nan = v.nan;
  out.pos_inf = v.pos_inf;
  out.neg_inf = v.neg_inf;
  if (!v.hist.empty()) out.hist = v.hist;
  if (!v.channel_hists.empty()) out.channel_hists = v.channel_hists;
  out.channels = v.channels;
  out.binned = v.binned;
  out.dead_count = v.dead_count;
  out.dead_channels = v.dead_channels;
  return out;
}

std::optional<CollectedStats> optional_stats(const std::optional<TensorStatsSnapshot>& v) {
  if (!v) return std::nullopt;
  return collected_stats(*v);
}

EpochStats epoch_stats(const LayerStatsSnapshot& v) {
  return {v.epoch, v.batches, optional_stats(v.activation), optional_stats(v.gradient)};
}

ParameterSampleReply parameter_sample(const ParameterSample& p) {
  return {p.epoch,
          number(p.value_norm),
          number(p.mean),
          number(p.std),
          number(p.min),
          number(p.max),
          number(p.grad_norm),
          number(p.grad_mean),
          number(p.grad_std),
          number(p.grad_min),
          number(p.grad_max),
          number(p.update_ratio)};
}

StatsScope parse_scope(const std::string& scope) {
  if (scope == "none") return StatsScope::kNone;
  if (scope == "watched") return StatsScope::kWatched;
  if (scope == "all") return StatsScope::kAll;
  throw std::logic_error("set_stats_scope: undeclared scope \"" + scope + "\"");  // the declaration admits no other
}

UpdateFrequency::Unit parse_unit(const std::string& unit) {
  if (unit == "batch") return UpdateFrequency::Unit::kBatch;
  if (unit == "epoch") return UpdateFrequency::Unit::kEpoch;
  if (unit == "seconds") return UpdateFrequency::Unit::kSeconds;
  throw std::logic_error("set_update_frequency: undeclared unit \"" + unit + "\"");
}

[[noreturn]] void refuse(Refusal::Kind kind, const UsageError& e, const std::string& argument = "") {
  throw Refusal(kind, e.what(), argument);
}

// Distinct series colours, in order.
render::Rgba series_color(size_t i) {
  static const render::Rgba kPalette[] = {{31, 119, 180, 255},  {255, 127, 14, 255},  {44, 160, 44, 255},
                                          {214, 39, 40, 255},   {148, 103, 189, 255}, {140, 86, 75, 255},
                                          {227, 119, 194, 255}, {127, 127, 127, 255}};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

}  // namespace

std::string join(const std::vector<std::string>& names) { return common::join(names, "(none)"); }

std::vector<std::string> phases_of(const WatchSnapshot& s, const std::string& layer, const Schedule& schedule) {
  std::vector<std::string> phases;
  for (const auto& [key, _] : s.layers) {
    if (key.first == layer) phases.push_back(key.second);
  }
  const auto order = schedule.phase_order();
  auto rank = [&](const std::string& p) {
    auto it = std::find(order.begin(), order.end(), p);
    return std::make_pair(static_cast<size_t>(it - order.begin()), p);
  };
  std::sort(phases.begin(), phases.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return phases;
}

std::vector<std::string> layers_of(const WatchSnapshot& s, const Architecture* architecture) {
  std::set<std::string> with;
  for (const auto& [key, _] : s.layers) with.insert(key.first);
  std::vector<std::string> out;
  if (architecture) {
    for (const auto& l : architecture->layers) {
      if (with.erase(l.name)) out.push_back(l.name);
    }
  }
  out.insert(out.end(), with.begin(), with.end());
  return out;
}

StatsArea::StatsArea(Controller& owner, detail::SessionPort& session) : owner_(owner), session_(session) {}

std::shared_ptr<const WatchSnapshot> Controller::require_stats() const {
  if (auto s = session_.watch_snapshot()) return s;
  static const auto kEmpty = std::make_shared<const WatchSnapshot>();
  return kEmpty;
}

StatsSummary StatsArea::summary() const {
  const auto s = session_.watch_snapshot();
  return {std::string(to_string(session_.stats_scope())),
          session_.watched_layers(),
          s ? s->sequence : 0,
          s ? s->ranks : 1,
          session_.stats_collecting(),
          frequency_json(session_.update_frequency())};
}

Settings StatsArea::get_settings() const {
  const auto performance = session_.watch_performance();
  Settings out;
  out.update_frequency = frequency_json(session_.update_frequency());
  out.stats_scope = std::string(to_string(session_.stats_scope()));
  out.watched_layers = session_.watched_layers();
  out.watch_performance = {performance.channel_limit_enabled(), performance.channel_limit(),
                           performance.histogram_sample(), performance.samples_per_channel(),
                           performance.average_patches()};
  out.patch_layers = session_.patch_layers();
  out.stats_collecting = session_.stats_collecting();
  out.auto_run_experiments = session_.auto_run_experiments();
  out.experiment_defaults = session_.experiment_defaults();
  out.experiment_time_limit_seconds = session_.experiment_time_limit_seconds();
  return out;
}

Settings StatsArea::set_update_frequency(const std::string& unit, double n, const std::optional<std::string>& phase) {
  const auto frequency = UpdateFrequency().unit(parse_unit(unit)).n(n).phase(phase);
  if (!(frequency == session_.update_frequency()))
    owner_.recordings().refuse_if_fixed("set_update_frequency", "update_frequency", "unit");
  try {
    session_.set_update_frequency(frequency);
  } catch (const UsageError& e) {
    refuse(Refusal::Kind::kInvalidArgument, e);
  }
  return get_settings();
}

Settings StatsArea::set_stats_scope(const std::string& scope) {
  const StatsScope next = parse_scope(scope);
  if (next != session_.stats_scope()) owner_.recordings().refuse_if_fixed("set_stats_scope", "stats_scope", "scope");
  session_.set_stats_scope(next);
  return get_settings();
}

Settings StatsArea::watch_layers(const std::vector<std::string>& layers) {
  try {
    session_.watch(layers);
  } catch (const UsageError& e) {
    refuse(Refusal::Kind::kInvalidArgument, e, "layers");
  }
  return get_settings();
}

Settings StatsArea::unwatch_layers(const std::vector<std::string>& layers) {
  const auto watched = session_.watched_layers();
  for (const auto& layer : layers) {
    if (std::find(watched.begin(), watched.end(), layer) != watched.end()) {
      owner_.recordings().refuse_if_fixed("unwatch_layers", "watched:" + layer, "layers");
    }
  }
  try {
    session_.unwatch(layers);
  } catch (const UsageError& e) {
    refuse(Refusal::Kind::kInvalidArgument, e, "layers");
  }
  return get_settings();
}

Settings StatsArea::set_watch_performance(const PerformanceChange& change) {
  auto performance = session_.watch_performance();
  if (change.channel_limit_enabled) performance.channel_limit_enabled(*change.channel_limit_enabled);
  if (change.channel_limit) performance.channel_limit(*change.channel_limit);
  if (change.histogram_sample) performance.histogram_sample(*change.histogram_sample);
  if (change.samples_per_channel) performance.samples_per_channel(*change.samples_per_channel);
  if (change.average_patches) performance.average_patches(*change.average_patches);
  const auto now = session_.watch_performance();
  if (performance.channel_limit_enabled() != now.channel_limit_enabled() ||
      performance.channel_limit() != now.channel_limit() || performance.histogram_sample() != now.histogram_sample() ||
      performance.samples_per_channel() != now.samples_per_channel() ||
      performance.average_patches() != now.average_patches()) {
    owner_.recordings().refuse_if_fixed("set_watch_performance", "watch_performance");
  }
  bool flushed = false;
  try {
    flushed = session_.set_watch_performance(performance);
  } catch (const UsageError& e) {
    const std::string what = e.what();
    const char* argument = what.find("samples_per_channel") != std::string::npos ? "samples_per_channel"
                           : what.find("histogram_sample") != std::string::npos  ? "histogram_sample"
                                                                                 : "channel_limit";
    refuse(Refusal::Kind::kInvalidArgument, e, argument);
  }
  Settings out = get_settings();
  out.statistics_flushed = flushed;
  return out;
}

Settings StatsArea::set_patch_layers(const std::optional<std::vector<std::string>>& layers) {
  // A recorded layer must keep its patches: in the new list, or watched
  // when the list goes back to the watched layers.
  const auto kept = layers ? *layers : session_.watched_layers();
  for (const auto& [setting, why] : owner_.recordings().fixed_settings()) {
    const std::string prefix = "patch_layers:";
    if (setting.rfind(prefix, 0) != 0) continue;
    const std::string layer = setting.substr(prefix.size());
    if (std::find(kept.begin(), kept.end(), layer) == kept.end())
      owner_.recordings().refuse_if_fixed("set_patch_layers", setting, "layers");
  }
  try {
    session_.set_patch_layers(layers);
  } catch (const UsageError& e) {
    refuse(Refusal::Kind::kInvalidArgument, e, "layers");
  }
  return get_settings();
}

StatsList StatsArea::list_stats() const {
  const auto s = owner_.require_stats();
  const auto architecture = session_.architecture();
  StatsList out;
  out.sequence = s->sequence;
  out.edges = stats::bin_edges();
  for (const auto& layer : layers_of(*s, architecture.get())) {
    CollectedLayer& collected = out.layers.emplace_back();
    collected.layer = layer;
    for (const auto& phase : phases_of(*s, layer, session_.schedule())) {
      CollectedPhase& epochs = collected.phases.emplace_back();
      epochs.phase = phase;
      for (const auto& bucket : s->layers.at({layer, phase})) epochs.epochs.push_back(bucket.epoch);
    }
  }
  for (const auto& [param, owner] : s->owner) {
    if (s->parameters.count(param)) out.parameters[owner].push_back(param);
  }
  for (const auto& v : s->series) out.series.push_back({v.name, v.phase, v.layer});
  out.device_bytes = static_cast<int64_t>(s->device_bytes);
  return out;
}

StatsHistory StatsArea::get_stats_history(const std::string& layer, const std::optional<std::string>& phase) const {
  const auto s = owner_.require_stats();
  const auto phases = phases_of(*s, layer, session_.schedule());
  const auto architecture = session_.architecture();
  const LayerInfo* info = architecture ? architecture->find(layer) : nullptr;
  if (phases.empty() && info && is_value_dtype(info->dtype)) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "layer \"" + layer + "\" outputs " + info->dtype +
                      " values (a mask, ids or labels): the statistics over time (moments, signed-log "
                      "histograms) are collected for floating-point tensors only, so it has none; "
                      "get_current_stats counts its values in the last captured batch and render_layer "
                      "draws them",
                  "layer");
  }
  if (phases.empty()) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "no statistics for layer \"" + layer +
                      "\"; layers with statistics: " + join(layers_of(*s, session_.architecture().get())) +
                      " (watch_layers collects a layer's, or set_stats_scope all)",
                  "layer");
  }
  if (phase && std::find(phases.begin(), phases.end(), *phase) == phases.end()) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "layer \"" + layer + "\" has no statistics for phase \"" + *phase + "\"; its phases: " + join(phases),
                  "phase");
  }
  StatsHistory out;
  out.layer = layer;
  out.edges = stats::bin_edges();
  for (const auto& p : phases) {
    if (phase && p != *phase) continue;
    auto& epochs = out.phases[p];
    for (const auto& bucket : s->layers.at({layer, p})) epochs.push_back(epoch_stats(bucket));
  }
  for (const auto& [param, owner] : s->owner) {
    auto samples = s->parameters.find(param);
    if (owner != layer || samples == s->parameters.end()) continue;
    auto& list = out.parameters[param];
    for (const auto& sample : samples->second) list.push_back(parameter_sample(sample));
  }
  return out;
}

CurrentStats StatsArea::get_current_stats(const std::string& layer) const {
  auto snap = owner_.require_snapshot();
  if (!snap->architecture->find(layer)) {
    std::vector<std::string> known;
    for (const auto& l : snap->architecture->layers) known.push_back(l.name);
    throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + layer + "\"; layers: " + join(known), "layer");
  }
  const auto detail = session_.watch_performance();
  // The same accumulator the training thread folds with, on this thread's
  // CPU copy: the bins and channel cap match the collected statistics.
  auto binned = [&](const std::map<std::string, torch::Tensor>& tensors) -> std::optional<CollectedStats> {
    auto it = tensors.find(layer);
    if (it == tensors.end() || !it->second.is_floating_point()) return std::nullopt;
    stats::TensorAccumulator accumulator(detail);
    accumulator.add(it->second);
    return collected_stats(accumulator.view(accumulator.buffers()));
  };
  CurrentStats out;
  out.layer = layer;
  out.position = to_json(snap->position);
  out.activation = binned(snap->activations);
  out.gradient = binned(snap->activation_gradients);
  // A mask, ids or labels: counted, not binned.
  if (auto it = snap->activations.find(layer); it != snap->activations.end() && it->second.defined() &&
                                               !it->second.is_floating_point() && !it->second.is_complex()) {
    out.values = value_counts(it->second);
    out.note = "layer \"" + layer + "\" outputs " + common::dtype_name(it->second.scalar_type()) +
               " values: the binned statistics are for floating-point tensors, so activation is null and "
               "values counts them";
  }
  if (snap->trimmed()) out.samples = samples_kept(*snap, "these bins count the kept samples");
  return out;
}

Metrics StatsArea::get_metrics(const std::vector<std::string>& layers) const {
  const auto s = owner_.require_stats();
  Metrics out;
  for (const auto& v : s->series) {
    if (!layers.empty() && !v.layer.empty() && std::find(layers.begin(), layers.end(), v.layer) == layers.end()) {
      continue;
    }
    MetricSeries series;
    series.name = v.name;
    series.phase = v.phase;
    series.layer = v.layer;
    for (const auto& p : v.points) series.points.push_back({p.epoch, p.batch, number(p.x), number(p.value)});
    out.series.push_back(std::move(series));
  }
  for (const auto& f : session_.instrument_errors()) out.failed.push_back({f.name, f.error});
  return out;
}

std::shared_ptr<const HistogramPicture> StatsArea::render_histogram(const HistogramOptions& options) const {
  const auto s = owner_.require_stats();
  std::string key = std::to_string(s->sequence) + "|" + (options.phase ? *options.phase : "*") + "|" +
                    (options.log_x ? "lx" : "") + (options.log_y ? "ly" : "") + "|" +
                    (options.channel ? std::to_string(*options.channel) : "all");
  for (const auto& l : options.layers) key += "|" + l;
  return histogram_cache_.get_or_compute(key, [&]() -> std::shared_ptr<const HistogramPicture> {
    auto out = std::make_shared<HistogramPicture>();
    std::vector<render::HistogramPanel> panels;
    for (const auto& layer : options.layers) {
      const auto phases = phases_of(*s, layer, session_.schedule());
      if (phases.empty()) {
        throw Refusal(Refusal::Kind::kNotFound,
                      "no statistics for layer \"" + layer +
                          "\"; layers with statistics: " + join(layers_of(*s, session_.architecture().get())),
                      "layers");
      }
      if (options.phase && std::find(phases.begin(), phases.end(), *options.phase) == phases.end()) {
        throw Refusal(Refusal::Kind::kNotFound,
                      "layer \"" + layer + "\" has no statistics for phase \"" + *options.phase +
                          "\"; its phases: " + join(phases),
                      "phase");
      }
      for (const bool gradient : {false, true}) {
        render::HistogramPanel panel;
        panel.title = layer + (gradient ? " gradients" : " activations");
        for (const auto& phase : phases) {
          if (options.phase && phase != *options.phase) continue;
          // The newest epoch keeps its bins.
          const auto& buckets = s->layers.at({layer, phase});
          const LayerStatsSnapshot* bucket = nullptr;
          const TensorStatsSnapshot* view = nullptr;
          for (auto it = buckets.rbegin(); it != buckets.rend() && !view; ++it) {
            const auto& v = gradient ? it->gradient : it->activation;
            if (v && !v->hist.empty()) {
              bucket = &*it;
              view = &*v;
            }
          }
          if (!view) continue;
          render::HistogramSeries series;
          series.label = phase + " epoch " + std::to_string(bucket->epoch);
          series.counts = view->hist;
          if (options.channel) {
            const auto c = static_cast<size_t>(*options.channel);
            if (c >= view->channel_hists.size()) {
              const std::string kept =
                  view->channel_hists.empty()
                      ? std::string("no per-channel histograms (fewer than 2 dims, or a changing dim 1)")
                      : "per-channel histograms of channels 0.." + std::to_string(view->channel_hists.size() - 1);
              throw Refusal(Refusal::Kind::kInvalidArgument,
                            "channel " + std::to_string(*options.channel) + " is out of range: " + layer + " keeps " +
                                kept + "; set_watch_performance changes how many",
                            "channel");
            }
            series.counts = view->channel_hists[c];
            series.label += " channel " + std::to_string(c);
          }
          series.color = series_color(panel.series.size());
          series.neg_overflow = view->neg_inf;
          series.pos_overflow = view->pos_inf;
          out->series.push_back(panel.title + ": " + series.label + " (" + std::to_string(bucket->batches) +
                                " batches, " + std::to_string(view->n) + " finite values)");
          panel.series.push_back(std::move(series));
        }
        if (panel.series.empty()) {
          panel.empty_reason = gradient ? "no gradient collected (forward-only phases, or no backward reached it)"
                                        : "no activation collected";
        }
        panels.push_back(std::move(panel));
      }
    }
    render::HistogramPlotOptions plot;
    plot.log_x = options.log_x;
    plot.log_y = options.log_y;
    plot.edges = stats::bin_edges();
    const auto image = render::render_histogram_plot(panels, plot);
    out->png = render::encode_png(image);
    out->layers = options.layers;
    out->phase = options.phase;
    out->channel = options.channel;
    out->log_x = options.log_x;
    out->log_y = options.log_y;
    out->sequence = s->sequence;
    out->width = image.width;
    out->height = image.height;
    return out;
  });
}

}  // namespace nansense::server
