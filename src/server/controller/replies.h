// The controller's typed replies (reply.h): each struct lists its fields
// once, with what each means, and both its JSON and its JSON Schema in
// wire_types() come from that list. Kept apart from the area headers that
// return them (controller_<area>.h) so that wire_types.cpp, which the web
// build's type generator compiles on its own, reads them without torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/reply.h"

namespace nansense::server {

// --- Run control and time travel (RunArea). ---

// What the Time Travel button needs (the status's `time_travel`).
struct TimeTravelSummary {
  static constexpr const char* kWireName = "TimeTravelStatus";
  bool available = false;
  std::optional<std::string> reason;
  std::vector<int64_t> cached_epochs;
  int64_t total_epochs = 0;
  std::optional<int64_t> current_epoch;
  std::optional<int64_t> pending_epoch;
  template <class Fields>
  static void fields(Fields& f) {
    using S = TimeTravelSummary;
    f.field("available", &S::available, "Whether a jump is possible now.");
    f.optional_field("reason", &S::reason, "Only when not available: why not.");
    f.field("cached_epochs", &S::cached_epochs, "The epochs whose start is cached: the jump targets.");
    f.field("total_epochs", &S::total_epochs, "The epochs of the epochs() loop.");
    f.field("current_epoch", &S::current_epoch, "The epoch under way; null outside the loop.");
    f.field("pending_epoch", &S::pending_epoch, "The epoch a requested jump goes to; null when none is pending.");
  }
};

// One cached epoch's checkpoint on disk.
struct TimeTravelCheckpoint {
  static constexpr const char* kWireName = "Checkpoint";
  int64_t epoch = 0;
  uint64_t bytes = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("epoch", &TimeTravelCheckpoint::epoch, "The epoch whose start it holds.");
    f.field("bytes", &TimeTravelCheckpoint::bytes, "Its size on disk.");
  }
};

// get_time_travel_status' reply: the Time Travel dialog's data.
struct TimeTravelReport : TimeTravelSummary {
  static constexpr const char* kWireName = "TimeTravelReport";
  std::vector<int64_t> uncached_epochs;
  std::vector<TimeTravelCheckpoint> checkpoints;
  std::optional<std::string> cache_dir;
  std::optional<uint64_t> budget_bytes;
  uint64_t bytes_used = 0;
  int64_t jumps = 0;
  std::optional<std::string> last_error;
  std::string hint;
  template <class Fields>
  static void fields(Fields& f) {
    using R = TimeTravelReport;
    TimeTravelSummary::fields(f);
    f.field("uncached_epochs", &R::uncached_epochs, "The epochs of the loop not cached (yet).");
    f.field("checkpoints", &R::checkpoints, "Each cached epoch's checkpoint and its size.");
    f.field("cache_dir", &R::cache_dir, "The cache folder; null before the first checkpoint.");
    f.field("budget_bytes", &R::budget_bytes, "The cache's budget; null: unbounded.");
    f.field("bytes_used", &R::bytes_used, "What the cache holds now.");
    f.field("jumps", &R::jumps, "Jumps done in this run.");
    f.field("last_error", &R::last_error, "The last problem of the cache or a jump; null when none.");
    f.field("hint", &R::hint, "What to do next.");
  }
};

// --- Statistics settings and history (StatsArea). ---

// How much detail the statistics keep per channel (nansense::WatchPerformance).
struct WatchPerformanceSettings {
  static constexpr const char* kWireName = "WatchPerformance";
  bool channel_limit_enabled = false;
  int64_t channel_limit = 0;
  int64_t histogram_sample = 0;
  int64_t samples_per_channel = 0;
  bool average_patches = false;
  template <class Fields>
  static void fields(Fields& f) {
    using W = WatchPerformanceSettings;
    f.field("channel_limit_enabled", &W::channel_limit_enabled,
            "Whether per-channel statistics stop at channel_limit channels.");
    f.field("channel_limit", &W::channel_limit, "At most this many channels of a layer get statistics of their own.");
    f.field("histogram_sample", &W::histogram_sample, "Elements sampled per batch for a layer's histogram.");
    f.field("samples_per_channel", &W::samples_per_channel, "Min/Max patches kept per channel.");
    f.field("average_patches", &W::average_patches, "Whether the average-ranked patches are collected too.");
  }
};

// The statistics and experiment settings (get_settings, and every setter's
// reply).
struct Settings {
  static constexpr const char* kWireName = "Settings";
  json update_frequency;  // frequency_json(UpdateFrequency)
  std::string stats_scope;
  std::vector<std::string> watched_layers;
  WatchPerformanceSettings watch_performance;
  std::optional<std::vector<std::string>> patch_layers;
  bool stats_collecting = false;
  bool auto_run_experiments = false;
  json experiment_defaults = json::object();
  double experiment_time_limit_seconds = 0;
  std::optional<bool> statistics_flushed;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("update_frequency", &Settings::update_frequency, "How often the statistics are published.",
            {{"$ref", "#/$defs/UpdateFrequency"}});
    f.field("stats_scope", &Settings::stats_scope, "Which layers the statistics collect.",
            {{"$ref", "#/$defs/StatsScope"}});
    f.field("watched_layers", &Settings::watched_layers, "The layers watched, in the order they were watched.");
    f.field("watch_performance", &Settings::watch_performance, "How much detail the statistics keep per channel.");
    f.field("patch_layers", &Settings::patch_layers, "The layers with Min/Max patches; null: the watched ones.");
    f.field("stats_collecting", &Settings::stats_collecting,
            "Whether batches are collected now (scope all, or watched with a layer).");
    f.field("auto_run_experiments", &Settings::auto_run_experiments,
            "Whether experiments run at live updates while the loop runs.");
    f.field(
        "experiment_defaults", &Settings::experiment_defaults,
        "{kind: {param: value}}: the session's experiment defaults.",
        {{"type", "object"}, {"additionalProperties", {{"type", "object"}, {"additionalProperties", json::object()}}}});
    f.field("experiment_time_limit_seconds", &Settings::experiment_time_limit_seconds,
            "How long one experiment may run before it is stopped.");
    f.optional_field("statistics_flushed", &Settings::statistics_flushed,
                     "Only from set_watch_performance: whether the change dropped the collected statistics.");
  }
};

// set_experiment_defaults' reply: the settings, and the keys it did not keep.
struct ExperimentDefaults : Settings {
  static constexpr const char* kWireName = "ExperimentDefaults";
  std::vector<std::string> ignored_params;
  template <class Fields>
  static void fields(Fields& f) {
    Settings::fields(f);
    f.field("ignored_params", &ExperimentDefaults::ignored_params, "The unknown parameter keys, not kept.");
  }
};

// The status's `stats`: the statistics settings and the published view's
// sequence.
struct StatsSummary {
  static constexpr const char* kWireName = "StatsSummary";
  std::string scope;
  std::vector<std::string> watched_layers;
  uint64_t sequence = 0;
  int64_t ranks = 1;
  bool collecting = false;
  json update_frequency;  // frequency_json(UpdateFrequency)
  template <class Fields>
  static void fields(Fields& f) {
    using S = StatsSummary;
    f.field("scope", &S::scope, "Which layers the statistics collect.", {{"$ref", "#/$defs/StatsScope"}});
    f.field("watched_layers", &S::watched_layers, "The layers watched.");
    f.field("sequence", &S::sequence, "The published statistics view's sequence (0 before the first).");
    f.field("ranks", &S::ranks, "Distributed runs: the ranks the layer statistics add up.");
    f.field("collecting", &S::collecting, "Whether batches are collected now.");
    f.field("update_frequency", &S::update_frequency, "How often the statistics are published.",
            {{"$ref", "#/$defs/UpdateFrequency"}});
  }
};

// A logged series' identity (list_stats' `series`).
struct SeriesInfo {
  static constexpr const char* kWireName = "SeriesInfo";
  std::string name;
  std::string phase;
  std::string layer;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("name", &SeriesInfo::name, "The scalar's name (\"loss\"; a metric instrument's, or \"name/key\").");
    f.field("phase", &SeriesInfo::phase, "The phase it was logged in.");
    f.field("layer", &SeriesInfo::layer, "A metric instrument's layer; \"\" for a logged scalar.");
  }
};

// One point of a series.
struct MetricPoint {
  static constexpr const char* kWireName = "ScalarPoint";
  int64_t epoch = 0;
  std::optional<int64_t> batch;
  json x;      // common::number
  json value;  // common::number
  template <class Fields>
  static void fields(Fields& f) {
    const json num = {{"$ref", "#/$defs/Num"}};
    f.field("epoch", &MetricPoint::epoch, "Its epoch.");
    f.field("batch", &MetricPoint::batch, "Its batch; null for an epoch-reduced point.");
    f.field("x", &MetricPoint::x, "Where it goes on the x axis: epoch + batch / batches in that epoch's phase.", num);
    f.field("value", &MetricPoint::value, "The value as logged (non-finite kept).", num);
  }
};

struct MetricSeries : SeriesInfo {
  static constexpr const char* kWireName = "Series";
  std::vector<MetricPoint> points;
  template <class Fields>
  static void fields(Fields& f) {
    SeriesInfo::fields(f);
    f.field("points", &MetricSeries::points, "Its points, in the order they were logged.");
  }
};

// An instrument that failed (and was turned off).
struct FailedInstrumentReply {
  static constexpr const char* kWireName = "FailedInstrument";
  std::string name;
  std::string error;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("name", &FailedInstrumentReply::name, "The instrument's name.");
    f.field("error", &FailedInstrumentReply::error, "What failed.");
  }
};

// get_metrics' reply.
struct Metrics {
  static constexpr const char* kWireName = "Metrics";
  std::vector<MetricSeries> series;
  std::vector<FailedInstrumentReply> failed;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("series", &Metrics::series, "The logged scalars and metric series asked for.");
    f.field("failed", &Metrics::failed, "The instruments that failed.");
  }
};

// --- Experiments (ExperimentArea). ---

// cancel_experiment's reply.
struct ExperimentCancel {
  static constexpr const char* kWireName = "ExperimentCancel";
  int64_t cancelled = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("cancelled", &ExperimentCancel::cancelled, "How many requests, queued or running, it stopped.");
  }
};

// set_auto_run_experiments' reply.
struct ExperimentAutoRun {
  static constexpr const char* kWireName = "ExperimentAutoRun";
  bool auto_run_experiments = false;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("auto_run_experiments", &ExperimentAutoRun::auto_run_experiments,
            "Whether experiments now run at live updates while the loop runs.");
  }
};

// set_auto_experiment's reply: the page's auto experiment as registered.
struct AutoExperiment {
  static constexpr const char* kWireName = "AutoExperiment";
  std::string tab;
  uint64_t seq = 0;
  json params = json::object();
  std::vector<std::string> ignored_params;
  bool auto_run = false;
  int64_t expires_after_seconds = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("tab", &AutoExperiment::tab, "The page's tab name it is registered under.");
    f.field("seq", &AutoExperiment::seq, "The request it queued now (paused); 0 when it waits for the next snapshot.");
    f.field("params", &AutoExperiment::params, "The parameters it runs with, resolved.",
            {{"type", "object"}, {"additionalProperties", json::object()}});
    f.field("ignored_params", &AutoExperiment::ignored_params, "The unknown parameter keys, not kept.");
    f.field("auto_run", &AutoExperiment::auto_run, "Whether auto-run is on (else it runs only when paused).");
    f.field("expires_after_seconds", &AutoExperiment::expires_after_seconds,
            "It is forgotten this long after its last renewal.");
  }
};

// clear_auto_experiment's reply.
struct AutoExperimentCleared {
  static constexpr const char* kWireName = "AutoExperimentCleared";
  std::string tab;
  bool removed = false;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("tab", &AutoExperimentCleared::tab, "The page's tab name.");
    f.field("removed", &AutoExperimentCleared::removed, "Whether the tab had an auto experiment.");
  }
};

// --- Probes (ProbeArea). ---

// One input value a probe changes, with the input by name.
struct ProbePerturbation {
  static constexpr const char* kWireName = "Perturbation";
  std::string input;
  int64_t sample = 0;
  std::vector<int64_t> index;
  std::vector<json> values;  // common::number: "nan", "inf", "-inf" as strings
  template <class Fields>
  static void fields(Fields& f) {
    using P = ProbePerturbation;
    f.field("input", &P::input, "The model input's name.");
    f.field("sample", &P::sample, "The sample of the batch.");
    f.field("index", &P::index, "[y, x] of an image input, [feature] of a flat one.");
    f.field("values", &P::values, "The new values, in the input's own units.",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/Num"}}}});
  }
};

// The newest probe run, in brief.
struct ProbeResultSummary {
  static constexpr const char* kWireName = "ProbeResultSummary";
  uint64_t run = 0;
  json position;  // to_json(BatchPosition)
  bool diff = false;
  int64_t perturbations_applied = 0;
  uint64_t snapshot_sequence = 0;
  std::optional<int64_t> layers;
  template <class Fields>
  static void fields(Fields& f) {
    using R = ProbeResultSummary;
    f.field("run", &R::run, "Runs completed when it was published (1, 2, ...).");
    f.field("position", &R::position, "The batch whose inputs it re-ran.", {{"$ref", "#/$defs/Position"}});
    f.field("diff", &R::diff, "Whether its activations are perturbed - unperturbed.");
    f.field("perturbations_applied", &R::perturbations_applied, "How many perturbations it applied.");
    f.field("snapshot_sequence", &R::snapshot_sequence, "The sequence of the snapshot it shows (0: none).");
    f.optional_field("layers", &R::layers, "The layers it has activations of (absent when the run failed).");
  }
};

// get_probe_status' reply, and every probe command's.
struct ProbeStatus {
  static constexpr const char* kWireName = "ProbeStatus";
  bool active = false;
  bool pinned = false;
  json pinned_position = nullptr;  // to_json(BatchPosition) or null
  std::string mode;
  std::vector<ProbePerturbation> perturbations;
  uint64_t runs_completed = 0;
  bool pending = false;
  std::optional<ProbeResultSummary> result;
  std::optional<std::string> error;
  std::string hint;
  std::optional<int64_t> cleared;
  template <class Fields>
  static void fields(Fields& f) {
    using S = ProbeStatus;
    f.field("active", &S::active, "Whether a probe is set (pinned, a mode, or perturbations).");
    f.field("pinned", &S::pinned, "Whether a batch is pinned.");
    f.field("pinned_position", &S::pinned_position, "Where the pinned batch was; null when none is.",
            {{"anyOf", {{{"$ref", "#/$defs/Position"}}, {{"type", "null"}}}}});
    f.field("mode", &S::mode, "The forward mode probes run in.", {{"$ref", "#/$defs/ProbeMode"}});
    f.field("perturbations", &S::perturbations, "The input values changed before the forward.");
    f.field("runs_completed", &S::runs_completed, "How many probe runs finished.");
    f.field("pending", &S::pending, "Whether a run is queued or running.");
    f.field("result", &S::result, "The newest run; null before the first.");
    f.optional_field("error", &S::error, "Why the newest run failed.");
    f.field("hint", &S::hint, "What to do next.");
    f.optional_field("cleared", &S::cleared, "Only from clear_perturbations: how many it cleared.");
  }
};

// --- Numerical debugging (DebugArea). ---

// A tensor whose check failed and is off for it (the rest stay checked).
struct UncheckedTensorReport {
  static constexpr const char* kWireName = "UncheckedTensor";
  std::string source;
  std::string tensor;
  std::string layer;
  std::vector<std::string> checks;
  std::string error;
  json position;  // to_json(BatchPosition)
  template <class Fields>
  static void fields(Fields& f) {
    using U = UncheckedTensorReport;
    f.field("source", &U::source, "Which kind of tensor it is.", {{"$ref", "#/$defs/DebugSource"}});
    f.field("tensor", &U::tensor, "The parameter's name (weight gradients) or the layer's.");
    f.field("layer", &U::layer, "Its layer.");
    f.field("checks", &U::checks, "The categories it is no longer checked for.",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/DebugCheck"}}}});
    f.field("error", &U::error, "What failed.");
    f.field("position", &U::position, "The batch where it failed.", {{"$ref", "#/$defs/Position"}});
  }
};

// What a traced re-run of a tripped batch restores and what it repeats
// (docs/guide/nans.md), in the front end's words.
struct DebugRerun {
  static constexpr const char* kWireName = "DebugRerun";
  bool enabled = false;
  std::string ran_twice;
  std::vector<std::string> restored;
  std::vector<std::string> seen_twice;
  std::string detect;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("enabled", &DebugRerun::enabled, "Whether a tripped batch is re-run to trace its root cause.");
    f.field("ran_twice", &DebugRerun::ran_twice, "What ran twice.");
    f.field("restored", &DebugRerun::restored, "What the re-run restores first.");
    f.field("seen_twice", &DebugRerun::seen_twice, "What sees the batch twice.");
    f.field("detect", &DebugRerun::detect, "How user code tells it is the second run.");
  }
};

// get_debug_report's reply, and every debug command's.
struct DebugReport {
  static constexpr const char* kWireName = "DebugReport";
  json settings;         // numerics::to_json(DebugSettings)
  json error = nullptr;  // numerics::to_json(DebugError) or null
  int64_t checked_batches = 0;
  json loss_scale;  // numerics::to_json(LossScaleStatus)
  bool skip_update = false;
  std::optional<std::string> skip_refused;
  std::vector<UncheckedTensorReport> unchecked_tensors;
  DebugRerun rerun;
  template <class Fields>
  static void fields(Fields& f) {
    using R = DebugReport;
    f.field("settings", &R::settings, "The checks' settings.", {{"$ref", "#/$defs/DebugSettings"}});
    f.field("error", &R::error, "The standing error; null when none.",
            {{"anyOf", {{{"$ref", "#/$defs/DebugError"}}, {{"type", "null"}}}}});
    f.field("checked_batches", &R::checked_batches, "How many batches were checked.");
    f.field("loss_scale", &R::loss_scale, "The loss scaler as the guard counts it.", {{"$ref", "#/$defs/LossScale"}});
    f.field("skip_update", &R::skip_update, "Whether skipping the held poisoned update is chosen.");
    f.field("skip_refused", &R::skip_refused, "Why skipping a held update is refused; null when it is not.");
    f.field("unchecked_tensors", &R::unchecked_tensors, "Tensors whose check failed and is off for them.");
    f.field("rerun", &R::rerun, "What a traced re-run restores and repeats.");
  }
};

}  // namespace nansense::server
