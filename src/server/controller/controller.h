// The one command/query layer every UI and MCP action goes through, named like
// the MCP tools of the original NaNsense 0.4.0 (Python, on PyPI). Arguments arrive checked against their
// declarations (commands.h); transports only parse and format.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "render/render_cache.h"
#include "render/strip.h"
#include "server/controller/refusal.h"
#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/status.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::experiments {
class Probes;
struct ProbeSettings;
}  // namespace nansense::experiments

namespace nansense::server {

class Recorder;
struct RecordView;
struct ViewPages;

// Who the calls on this thread are made for, while it stands: a visitor of a
// locked session (Session::lock), named by the transport (the web server's
// nansense_visitor cookie, an MCP session). On a locked session each visitor
// has probes of its own (experiments/visitor_probes.h): its probe commands
// change them alone, and the snapshot its queries and pictures read is its
// own probe's result while one is active, else the shared snapshot every
// visitor sees. Without a scope ("" visitor) calls read the shared view and a
// locked session refuses probe changes. An unlocked session ignores it (one
// probe state, shared). dispatch() opens one per call; the push channel one
// per page it serves.
class VisitorScope {
 public:
  explicit VisitorScope(std::string visitor);
  ~VisitorScope();
  VisitorScope(const VisitorScope&) = delete;
  VisitorScope& operator=(const VisitorScope&) = delete;
  // The innermost scope's visitor on this thread; "" outside any.
  static const std::string& current();

 private:
  std::string visitor_;
  const std::string* previous_;
};

class Controller {
 public:
  explicit Controller(detail::SessionPort& session);
  ~Controller();  // finishes every recording

  // --- queries ---
  // Session::lock() was called (commands.h's dispatch refuses accordingly).
  bool locked() const;
  Status get_status() const;
  json get_architecture() const;
  // Per-layer summary of the last captured batch.
  json get_snapshot() const;

  // Statistics of layers in the last captured batch (controller_stats.cpp):
  // per activation and gradient the shared tensor statistics with spread
  // (common/tensor_stats.h) and dead channels (dim 1 all zero over the
  // batch); optionally a histogram of the finite values and one channel's
  // statistics. An empty `layers` means every layer.
  struct LayerStatsOptions {
    bool include_histogram = false;
    int64_t bins = 32;
    std::optional<int64_t> channel;  // an index along dim 1
  };
  json get_layer_stats(const std::vector<std::string>& layers, const LayerStatsOptions& options) const;
  // A layer's parameters in the last captured batch: value and gradient
  // statistics (with L2 norms), optimizer state and the param group's
  // hyperparameters, with a note where optimizer state is missing and why.
  // An empty `parameters` means all; names are qualified or short ("weight").
  json get_weight_stats(const std::string& layer, const std::vector<std::string>& parameters) const;

  // A layer's activation or gradient strip for one sample of the last captured
  // batch, as PNG, with what it shows (scale, layout, non-finite counts).
  // kind "instrument:<name>" draws a layer-tensor instrument's output.
  // `shown`: the snapshot the caller shows. A refusal of the latest snapshot
  // when that is another one throws SnapshotReplaced instead (the caller's
  // snapshot was not refused; a picture the latest can give is still drawn).
  std::shared_ptr<const StripPicture> render_strip(const std::string& layer, const std::string& kind,
                                                   const render::StripOptions& options,
                                                   std::optional<uint64_t> shown = std::nullopt) const;
  // One sample of model input `input` (index into the snapshot's inputs) as
  // the image it was (input_mean/std, input_transform) or a colour strip;
  // `shown` as for render_strip.
  std::shared_ptr<const InputPicture> render_input(int64_t input, int64_t sample,
                                                   std::optional<uint64_t> shown = std::nullopt) const;

  // The last published snapshot's sequence number; 0 before the first.
  uint64_t snapshot_sequence() const;
  // Whether `visitor` is shown a view of its own: the session is locked and
  // the visitor has probe state (VisitorScope). The push channel then makes
  // its status and strips apart from the shared ones.
  bool has_own_view(const std::string& visitor) const;

  // --- change feed for push transports ---
  // Sleeps until the run's state, mode or snapshot changes after `seen`, or
  // the timeout passes; returns the new change count.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Wakes every wait_for_change() (a transport shutting down).
  void wake_watchers();

  // --- commands: each returns the status once applied (or waited for) ---
  // `wait`: block until the loop pauses, finishes or is lost, at most this
  // long; zero returns at once.
  using Wait = std::chrono::milliseconds;
  Status step(const std::string& unit, Wait wait);
  Status run(bool detach, Wait wait);
  Status pause(Wait wait);
  Status run_until(const std::string& phase, int64_t epoch, int64_t batch, Wait wait);
  // `refreshed` says whether a newer snapshot arrived within the wait.
  Status refresh(Wait wait);

  // --- the Weights page (controller_weights.cpp) ---
  // One tensor of a layer's parameter in the last captured batch, laid out
  // by dimension roles (render/weight_strip.h): `tensor` is "weight",
  // "gradient", "state:<key>" (a tensor-valued optimizer state entry) or
  // "instrument:<name>" (a watch_weight_tensor instrument); `parameter` is
  // qualified or short ("weight"). Refusals name what the layer, parameter or
  // tensor has; a layout out of range says what fits. `shown` as for
  // render_strip.
  std::shared_ptr<const WeightPicture> render_weight(const std::string& layer, const std::string& parameter,
                                                     const std::string& tensor,
                                                     const render::WeightLayoutRequest& layout,
                                                     std::optional<uint64_t> shown = std::nullopt) const;
  // Every tensor of each of a layer's parameters (all when `parameters` is
  // empty): weight, gradient, tensor-valued optimizer state, instruments.
  // `layout` applies to the tensors shaped like their parameter; the others
  // get their own default. What cannot be drawn is named with its reason;
  // `parameters` holds per parameter its shape, layout, scalar optimizer
  // state (Adam's step) and its group's hyperparameters.
  struct WeightPictures {
    struct Missing {
      std::string parameter;
      std::string tensor;
      std::string reason;
    };
    std::vector<std::shared_ptr<const WeightPicture>> pictures;
    std::vector<Missing> missing;
    json parameters = json::array();
  };
  WeightPictures render_weights(const std::string& layer, const std::vector<std::string>& parameters,
                                const render::WeightLayoutRequest& layout) const;

  // --- time travel (controller_time_travel.cpp) ---
  // The Time Travel dialog's data: availability and reason, cached epochs,
  // the epoch count, the current and pending epochs, the cache folder with
  // its budget and use, per-checkpoint sizes, jumps done and the last problem.
  json get_time_travel_status() const;
  // Jumps to the start of a cached epoch, paused or running; waits like the
  // other commands for the pause on the target's first batch. Refused:
  // kConflict when no jump is possible now (no running epochs() loop, a
  // finished or lost run), kInvalidArgument for an epoch out of range, not
  // cached, or whose checkpoint is corrupted or belongs to another model.
  Status time_travel(int64_t epoch, Wait wait);

  // --- statistics over time (controller_history.cpp) ---
  // Settings = {update_frequency, stats_scope, watched_layers,
  // watch_performance, stats_collecting, auto_run_experiments,
  // experiment_defaults, experiment_time_limit_seconds}.
  json get_settings() const;
  // Each setter returns get_settings(); a refused value is kInvalidArgument
  // saying why, and nothing changes.
  json set_update_frequency(const std::string& unit, double n, const std::optional<std::string>& phase);
  json set_stats_scope(const std::string& scope);
  json watch_layers(const std::vector<std::string>& layers);
  json unwatch_layers(const std::vector<std::string>& layers);
  // Absent fields keep their value; the reply adds statistics_flushed.
  struct PerformanceChange {
    std::optional<bool> channel_limit_enabled;
    std::optional<int64_t> channel_limit;
    std::optional<int64_t> histogram_sample;
    std::optional<int64_t> samples_per_channel;
    std::optional<bool> average_patches;
  };
  json set_watch_performance(const PerformanceChange& change);
  // Min/Max patches for these layers (nullopt: the watched ones).
  json set_patch_layers(const std::optional<std::vector<std::string>>& layers);
  // What was collected: layers (graph order) with their phases and epochs,
  // parameters per layer, the scalar series, the bin edges.
  json list_stats() const;
  // A layer's per-epoch statistics per phase (one phase when given) and its
  // parameters' samples. kNotFound naming the known layers or phases.
  json get_stats_history(const std::string& layer, const std::optional<std::string>& phase) const;
  // The last captured batch's statistics of any layer, binned like the
  // collected ones (the Stats page's "current batch").
  json get_current_stats(const std::string& layer) const;
  // Logged scalars and metric series (those of `layers` and every logged
  // scalar when layers are given) and the instruments that failed.
  json get_metrics(const std::vector<std::string>& layers) const;
  struct HistogramOptions {
    std::vector<std::string> layers;
    std::optional<std::string> phase;
    bool log_x = false;
    bool log_y = false;
    std::optional<int64_t> channel;
  };
  // The newest epoch's histograms of each layer as a chart (PNG).
  std::shared_ptr<const HistogramPicture> render_histogram(const HistogramOptions& options) const;

  // --- Min/Max patches and bin samples (controller_patches.cpp) ---
  struct PatchOptions {
    std::string layer;
    std::optional<std::string> phase;  // nullopt: the training phase if it has patches, else the first that does
    std::vector<std::string> grids;    // rankings; empty: max_pixel and min_pixel
    bool heatmap = false;              // overlay the channel's activation (signed, red/blue)
    // The last captured batch alone (any layer, watched or not) instead of
    // an epoch's collected gallery; `phase` is then not used.
    bool current_batch = false;
  };
  // One ranking's grid: per (sample, channel) where the input came from, its
  // score and the crop as a PNG (base64), for the Stats page.
  json get_patches(const PatchOptions& options) const;
  // The grids as one labelled picture (MCP render_extreme_patches).
  std::shared_ptr<const Picture> render_extreme_patches(const PatchOptions& options) const;
  struct BinSampleOptions {
    std::string layer;
    std::string kind = "activation";  // or "gradient"
    std::optional<int64_t> channel;   // nullopt: the whole layer
    int64_t bin = 0;                  // 0..210
    int64_t count = 6;
  };
  // A few elements of the last captured batch in that bin (and channel),
  // with the input crop around each.
  json get_bin_samples(const BinSampleOptions& options) const;
  std::shared_ptr<const Picture> render_bin_samples(const BinSampleOptions& options) const;

  // --- experiments on the paused model (controller_experiments.cpp) ---
  // Every kind with its summary, description, accepted layers (and the others
  // with the reason), parameter specs with effective defaults and ranges, and
  // the time limit.
  json list_experiments() const;
  // Queues an experiment (params layered: the kind's defaults, the session's,
  // the caller's; unknown keys come back in ignored_params) and waits up to
  // `wait` for it to finish. Refusals name the unknown kind or layer, the bad
  // parameter, or say to pause first.
  json run_experiment(const std::string& kind, const std::string& layer, const json& params, Wait wait);
  // run_experiment with video: a Deep Dream's published steps (about 20,
  // evenly spaced; every step with all_steps) drawn as an MP4 in the
  // recordings folder while it runs; the reply adds video {path, frames,
  // error}. Refused for other kinds and without a wait
  // (controller_recordings.cpp).
  json run_experiment_video(const std::string& kind, const std::string& layer, const json& params, Wait wait);
  // Progress or outcome; kNotFound once it left the 8 kept.
  json get_experiment_result(uint64_t seq) const;
  // One request, or every one (nullopt); {"cancelled": how many}.
  json cancel_experiment(std::optional<uint64_t> seq);
  json set_auto_run_experiments(bool enabled);
  // Replaces one kind's session defaults (layered between the kind's own and
  // a caller's params); returns get_settings() with ignored_params (the
  // unknown keys, not kept). Bad values are kInvalidArgument naming them.
  json set_experiment_defaults(const std::string& kind, const json& params);
  // A page's auto experiment, re-run at every snapshot while auto-run is on:
  // registered or renewed (its heartbeat) under the page's tab name, and
  // forgotten by clear_auto_experiment or 5 s after its last renewal.
  json set_auto_experiment(const std::string& tab, const std::string& kind, const std::string& layer,
                           const json& params);
  json clear_auto_experiment(const std::string& tab);
  // The push channel's experiment events: each result changed since
  // `version` (as get_experiment_result shows it, less the objective
  // history); `version` becomes the current one.
  std::vector<json> experiment_changes(uint64_t& version) const;
  std::shared_ptr<const ExperimentPicture> render_experiment(uint64_t seq, bool overlay) const;

  // --- probes on the paused model (controller_probes.cpp) ---
  // Pinned batch (and where), forward mode, perturbations (input by name),
  // runs completed, whether one is pending, the newest result (run, the
  // batch re-run, diff, layers) or its error, and a hint. While a probe is
  // active the snapshot every query and picture reads is the probe's result.
  json get_probe_status() const;
  // Each change returns get_probe_status() once the probe's next run
  // finished or `wait` passed (then "pending": true). Refusals: kConflict
  // while the loop runs or after it ended, with nothing captured, or (unpin)
  // with nothing pinned; kInvalidArgument for a perturbation that does not
  // fit the input, saying what does.
  json pin_batch(Wait wait);
  json unpin_batch(Wait wait);
  json set_probe_mode(const std::string& mode, Wait wait);
  // `input`: a model input's name (the first when nullopt).
  json add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
                        const std::optional<std::string>& input, Wait wait);
  // Adds "cleared": how many.
  json clear_perturbations(Wait wait);

  // --- numerical debugging (controller_debug.cpp) ---
  // The checks' settings, the standing error (null when none: reasons,
  // position, per-layer fractions, band edges, root cause, capsule) and how
  // many batches were checked.
  json get_debug_report() const;
  // A partial update of the checks (DebugSettings' fields, same names);
  // absent fields keep their value. Returns get_debug_report().
  struct DebugChecksUpdate {
    std::optional<bool> enabled;
    std::optional<int64_t> interval_batches;
    std::optional<bool> check_nan_inf;
    std::optional<bool> check_under_over;
    std::optional<double> threshold_fraction;
    std::optional<int64_t> trace_interval_batches;
    std::optional<bool> rerun_to_trace;
    std::optional<std::vector<std::string>> allow;
  };
  json configure_debug_checks(const DebugChecksUpdate& update);
  // Turns a check category off ("nan_inf" or "under_over"; none = every
  // category of the standing error) and clears it from the standing error.
  json silence_debug_check(const std::optional<std::string>& category);
  // Dismisses the standing error, leaving the checks on.
  json clear_debug_error();
  // While the loop is paused before the optimizer step of a batch that
  // tripped: "skip" clears every parameter's gradient when the loop resumes
  // (its optimizer.step() then changes nothing), "apply" lets the update
  // through (the default). Conflict when no update is held.
  json choose_update(const std::string& action);

  // --- recordings and snapshots of a view (controller_recordings.cpp, recorder.h) ---
  // The view drawn now as the page(s) a recording frame or snapshot holds.
  // Refusals name the unknown view, layer or what is missing.
  ViewPages draw_view(const RecordView& view) const;
  json list_recordings() const;
  json start_recording(const RecordView& view);
  json stop_recording(const std::optional<std::string>& key);
  json discard_recording(const std::optional<std::string>& key);
  json save_snapshot(const RecordView& view);
  // A saved recording's file (a path list_recordings names under saved), to
  // play or download: refused for a file still being written or one this
  // run did not save.
  struct RecordedFile {
    std::string path;
    std::string name;          // the file name, for Content-Disposition
    std::string content_type;  // video/mp4
    std::string bytes;
  };
  std::shared_ptr<const RecordedFile> get_recording_file(const std::string& path) const;
  // The session's close(): every recording saved.
  void finish_recordings();
  // What a view's newest frame would show: the snapshot's sequence, or for
  // an experiment view its newest finished result's seq (0 before any).
  uint64_t view_sequence(const RecordView& view) const;
  // An experiment view's recording: registers its pinned auto experiment
  // (checked as run_experiment checks a request; refusals say why) and,
  // paused, waits a while for its first run; released when it stops.
  void pin_experiment(const RecordView& view);
  void release_experiment(const RecordView& view);
  // Paused: waits a while for the view's pinned experiment's newest run, if
  // it has not finished (Save & Finish draws it).
  void settle_experiment(const RecordView& view);
  // The active recordings' keys (the status's `recordings`).
  std::vector<std::string> recording_keys() const;
  // What the active recordings fix (recorder.h's FixedSetting): setting ->
  // what the page shows on its disabled control (the status's `fixed`).
  std::map<std::string, std::string> fixed_settings() const;

 private:
  template <class F>
  Status command(F&& apply, Wait wait);
  // Throws FixedByRecording (409) when an active recording fixes
  // `setting` (recorder.h's FixedSetting): `command` would change what it shows.
  void refuse_if_fixed(const std::string& command, const std::string& setting, const std::string& argument = "") const;
  // get_probe_status() once a run of `probes` with their current settings
  // finished (or `wait` passed).
  json probe_reply(const experiments::Probes& probes, Wait wait) const;
  // The probes the calling visitor's probe commands and status use: on a
  // locked session the visitor's own (null when it has none yet), else the
  // session's one shared state.
  std::shared_ptr<experiments::Probes> caller_probes() const;
  // Applies `change` to the caller's probes (made on first use on a locked
  // session) and returns them; `starts_run` as VisitorProbes::change says.
  // Refused on a locked session without a visitor (VisitorScope).
  std::shared_ptr<experiments::Probes> change_probes(
      const std::function<bool(const experiments::ProbeSettings&)>& starts_run,
      const std::function<void(experiments::Probes&)>& change);
  // The snapshot the caller is shown: on a locked session the visitor's own
  // probe result while one is active, else the last published snapshot
  // (null before the first). Every query and picture reads this one.
  std::shared_ptr<const BatchSnapshot> shown_snapshot() const;
  // The `time_travel` field of the status: what the button needs.
  json time_travel_summary() const;
  // The `debug` field of the status: what a banner shows.
  json debug_summary() const;
  // The `stats` field of the status: settings and the view's sequence.
  json stats_summary() const;
  // A layer of `snap` that has parameters, and the qualified names of those
  // `wanted` names (qualified or short; all when empty). kNotFound for an
  // unknown layer or parameter (about `argument`), kInvalidArgument for a
  // layer without parameters, each naming what there is.
  std::pair<const LayerInfo*, std::vector<std::string>> layer_parameters(
      const BatchSnapshot& snap, const std::string& layer, const std::vector<std::string>& wanted,
      const std::string& argument = "parameters") const;
  std::shared_ptr<const WeightPicture> draw_weight(const std::shared_ptr<const BatchSnapshot>& snap,
                                                   const std::string& layer, const std::string& parameter,
                                                   const std::string& tensor,
                                                   const render::WeightLayoutRequest& layout) const;
  // The published statistics; an empty view before the first.
  std::shared_ptr<const WatchSnapshot> require_stats() const;
  // The last published snapshot; kNotFound before the first capture.
  std::shared_ptr<const BatchSnapshot> require_snapshot() const;
  // render_strip's and render_input's pictures of `snap`.
  std::shared_ptr<const StripPicture> draw_strip(const std::shared_ptr<const BatchSnapshot>& snap,
                                                 const std::string& layer, const std::string& kind,
                                                 const render::StripOptions& options) const;
  std::shared_ptr<const InputPicture> draw_input(const std::shared_ptr<const BatchSnapshot>& snap, int64_t input,
                                                 int64_t sample) const;

  detail::SessionPort& session_;
  mutable std::mutex cache_mu_;
  mutable uint64_t cached_sequence_ = 0;
  mutable std::shared_ptr<const json> cached_snapshot_;
  mutable render::RenderCache<StripPicture> strip_cache_{256};
  mutable render::RenderCache<InputPicture> input_cache_{32};
  mutable render::RenderCache<HistogramPicture> histogram_cache_{32};
  mutable render::RenderCache<WeightPicture> weight_cache_{128};
  // Last: its thread draws through the members above, so it stops first.
  std::unique_ptr<Recorder> recorder_;
};

}  // namespace nansense::server
