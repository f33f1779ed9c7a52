// The typed replies (reply.h) of the experiments on the paused model
// (controller_experiments.h) and of the recordings and snapshots of a view
// (controller_recordings.h, recorder.h): each struct lists its fields once,
// with what each means, and both its JSON and its JSON Schema in
// wire_types() come from that list. Like replies.h, free of torch, so that
// wire_types.cpp, which the web build's type generator compiles on its own,
// reads them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/reply.h"

namespace nansense::server {

// --- Experiments (ExperimentArea). ---

// One parameter of an experiment kind, with its default as the session sets it.
struct ExperimentParamSpec {
  static constexpr const char* kWireName = "ExperimentParamSpec";
  std::string key;
  std::string label;
  std::string description;
  std::string type;
  json fallback;  // the session's default, else the kind's
  std::optional<double> minimum;
  std::optional<double> maximum;
  std::optional<std::vector<std::string>> options;
  template <class Fields>
  static void fields(Fields& f) {
    using P = ExperimentParamSpec;
    f.field("key", &P::key, "The key params take it under.");
    f.field("label", &P::label, "Its name on the Experiment page.");
    f.field("description", &P::description, "What it does.");
    f.field("type", &P::type, "What kind of value it takes.",
            {{"type", "string"}, {"enum", {"integer", "number", "boolean", "choice"}}});
    f.field("default", &P::fallback, "The value a run starts from: the session's default, else the kind's.",
            json::object());
    f.optional_field("minimum", &P::minimum, "The smallest value accepted, where there is one.");
    f.optional_field("maximum", &P::maximum, "The largest value accepted, where there is one.");
    f.optional_field("options", &P::options, "A choice's values.");
  }
};

// A layer an experiment kind cannot run on, and why.
struct UnusableLayer {
  static constexpr const char* kWireName = "UnusableLayer";
  std::string layer;
  std::string reason;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("layer", &UnusableLayer::layer, "The layer's name.");
    f.field("reason", &UnusableLayer::reason, "Why the kind cannot use it.");
  }
};

// One experiment kind, as list_experiments describes it.
struct ExperimentKind {
  static constexpr const char* kWireName = "ExperimentKind";
  std::string kind;
  std::string title;
  std::string summary;
  std::string description;
  bool attribution = false;
  std::vector<std::string> layers;
  std::vector<UnusableLayer> unusable_layers;
  std::vector<ExperimentParamSpec> params;
  template <class Fields>
  static void fields(Fields& f) {
    using K = ExperimentKind;
    f.field("kind", &K::kind, "Its name, as run_experiment takes it.");
    f.field("title", &K::title, "Its title on the Experiment page.");
    f.field("summary", &K::summary, "What it does, in one line.");
    f.field("description", &K::description, "What it does and how to read its result.");
    f.field("attribution", &K::attribution,
            "Whether it attributes a layer's activation to the input (not Deep Dream).");
    f.field("layers", &K::layers, "The layers it can run on.");
    f.field("unusable_layers", &K::unusable_layers, "The other layers, each with the reason.");
    f.field("params", &K::params, "Its parameters.");
  }
};

// A page's auto experiment, as registered now.
struct RegisteredAutoExperiment {
  static constexpr const char* kWireName = "RegisteredAutoExperiment";
  std::string tab;
  std::string kind;
  std::string layer;
  json params = json::object();
  template <class Fields>
  static void fields(Fields& f) {
    using R = RegisteredAutoExperiment;
    f.field("tab", &R::tab, "The page's tab name (a recording's: \"recording:<key>\").");
    f.field("kind", &R::kind, "The experiment kind.");
    f.field("layer", &R::layer, "The layer it runs on.");
    f.field("params", &R::params, "Its parameters as the page sent them.",
            {{"type", "object"}, {"additionalProperties", json::object()}});
  }
};

// list_experiments' reply.
struct ExperimentList {
  static constexpr const char* kWireName = "ExperimentList";
  std::vector<ExperimentKind> kinds;
  double time_limit_seconds = 0;
  bool auto_run = false;
  bool forward_known = false;
  std::vector<uint64_t> kept_results;
  std::vector<RegisteredAutoExperiment> auto_experiments;
  template <class Fields>
  static void fields(Fields& f) {
    using L = ExperimentList;
    f.field("kinds", &L::kinds, "Every experiment kind.");
    f.field("time_limit_seconds", &L::time_limit_seconds, "How long one experiment may run before it is stopped.");
    f.field("auto_run", &L::auto_run, "Whether experiments run at live updates while the loop runs.");
    f.field("forward_known", &L::forward_known,
            "Whether the model's forward is known (seen on a captured batch), which experiments need.");
    f.field("kept_results", &L::kept_results, "The seqs of the results kept (the 8 most recent).");
    f.field("auto_experiments", &L::auto_experiments, "The pages' auto experiments registered now.");
  }
};

// One sample's attribution: its range and mean magnitude.
struct AttributionRange {
  static constexpr const char* kWireName = "AttributionRange";
  json min;       // common::number
  json max;       // common::number
  json mean_abs;  // common::number
  template <class Fields>
  static void fields(Fields& f) {
    const json num = {{"$ref", "#/$defs/Num"}};
    f.field("min", &AttributionRange::min, "Its smallest value.", num);
    f.field("max", &AttributionRange::max, "Its largest value.", num);
    f.field("mean_abs", &AttributionRange::mean_abs, "The mean of its magnitude.", num);
  }
};

// run_experiment with video: the Deep Dream clip.
struct ExperimentVideo {
  static constexpr const char* kWireName = "ExperimentVideo";
  std::optional<std::string> path;
  int64_t frames = 0;
  std::string error;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("path", &ExperimentVideo::path, "The MP4 in the recordings folder; null when no step was drawn.");
    f.field("frames", &ExperimentVideo::frames, "The steps it shows.");
    f.field("error", &ExperimentVideo::error, "What went wrong drawing or encoding it; \"\" when nothing did.");
  }
};

// An experiment's progress or outcome (get_experiment_result, run_experiment,
// the push channel's experiment events). What is common to every kind is
// always there; Deep Dream adds objectives, channels and produced_images,
// the attribution kinds targets, target_values, attribution_sums,
// attributions (and attribution_shape once there are some).
struct ExperimentResult {
  static constexpr const char* kWireName = "ExperimentResult";
  uint64_t seq = 0;
  std::string kind;
  std::string layer;
  json params = json::object();
  std::string stage;
  bool done = false;
  int64_t step = 0;
  int64_t total = 0;
  json objective = nullptr;  // common::number or null
  json seconds = 0;          // common::number
  std::vector<std::string> notes;
  std::optional<int64_t> queued_ahead;
  std::optional<std::string> tab;
  std::optional<std::string> error;
  std::optional<std::string> stop_reason;
  // Deep Dream.
  std::optional<std::vector<json>> objectives;  // common::number each
  std::optional<std::vector<int64_t>> channels;
  std::optional<int64_t> produced_images;
  // The attribution kinds.
  std::optional<std::vector<int64_t>> targets;
  std::optional<std::vector<json>> target_values;     // common::number each
  std::optional<std::vector<json>> attribution_sums;  // common::number each
  std::optional<std::vector<AttributionRange>> attributions;
  std::optional<std::vector<int64_t>> attribution_shape;
  // run_experiment only.
  std::optional<std::vector<std::string>> ignored_params;
  std::optional<std::vector<std::string>> clamped_params;
  std::optional<ExperimentVideo> video;
  template <class Fields>
  static void fields(Fields& f) {
    using R = ExperimentResult;
    const json num = {{"$ref", "#/$defs/Num"}};
    const json nums = {{"type", "array"}, {"items", num}};
    f.field("seq", &R::seq, "The request's number (for get_experiment_result, render_experiment, cancel_experiment).");
    f.field("kind", &R::kind, "The experiment kind.");
    f.field("layer", &R::layer, "The layer it runs on.");
    f.field("params", &R::params, "Its parameters, resolved.",
            {{"type", "object"}, {"additionalProperties", json::object()}});
    f.field("stage", &R::stage, "Where it is (absent: it already left the 8 kept).",
            {{"$ref", "#/$defs/ExperimentStage"}});
    f.field("done", &R::done, "Whether it finished (done, stopped or failed).");
    f.field("step", &R::step, "The steps done.");
    f.field("total", &R::total, "The steps it takes.");
    f.field("objective", &R::objective, "Deep Dream: the mean target activation at step; null for the other kinds.",
            {{"anyOf", {num, {{"type", "null"}}}}});
    f.field("seconds", &R::seconds, "How long it has run.", num);
    f.field("notes", &R::notes, "What it changed of the request (parameters clamped to the layer or batch, ...).");
    f.optional_field("queued_ahead", &R::queued_ahead, "Only while queued: the requests before it.");
    f.optional_field("tab", &R::tab, "Only for a page's auto experiment: the page's tab name.");
    f.optional_field("error", &R::error, "Only when failed: why.");
    f.optional_field("stop_reason", &R::stop_reason,
                     "Only when stopped: why (\"cancelled\", \"time limit\", \"training resumed\", ...).");
    f.optional_field("objectives", &R::objectives,
                     "Deep Dream: the objective at each step so far (left out of push events).", nums);
    f.optional_field("channels", &R::channels, "Deep Dream: the channel each produced image maximises.");
    f.optional_field("produced_images", &R::produced_images, "Deep Dream: how many images it has produced.");
    f.optional_field("targets", &R::targets, "Attribution kinds: Grad-CAM's class per sample.");
    f.optional_field("target_values", &R::target_values,
                     "Attribution kinds: per sample, the target's value (Neuron IG: F(x) - F(0)).", nums);
    f.optional_field("attribution_sums", &R::attribution_sums, "Attribution kinds: per sample, the attributions' sum.",
                     nums);
    f.optional_field("attributions", &R::attributions, "Attribution kinds: per sample, the attribution's range.");
    f.optional_field("attribution_shape", &R::attribution_shape,
                     "Attribution kinds, once there are attributions: their shape.");
    f.optional_field("ignored_params", &R::ignored_params, "run_experiment only: the unknown parameter keys.");
    f.optional_field("clamped_params", &R::clamped_params, "run_experiment only: the keys a locked session bounded.");
    f.optional_field("video", &R::video, "run_experiment with video only: the clip.");
  }
};

// --- Recordings and snapshots (RecordingArea). ---

// One file of a recording.
struct RecordingFile {
  static constexpr const char* kWireName = "RecordingFile";
  std::string path;
  int64_t frames = 0;
  int64_t dropped = 0;
  int64_t width = 0;
  int64_t height = 0;
  std::string error;
  bool finished = false;
  template <class Fields>
  static void fields(Fields& f) {
    using F = RecordingFile;
    f.field("path", &F::path, "The MP4's path.");
    f.field("frames", &F::frames, "Frames written to it.");
    f.field("dropped", &F::dropped, "Frames not written (the encoder fell behind, or the file failed).");
    f.field("width", &F::width, "Its width in pixels; 0 before the first frame.");
    f.field("height", &F::height, "Its height in pixels; 0 before the first frame.");
    f.field("error", &F::error, "What failed; \"\" while sound.");
    f.field("finished", &F::finished, "Whether it is finished and plays.");
  }
};

// One recording, active or just stopped.
struct Recording {
  static constexpr const char* kWireName = "Recording";
  std::string key;
  std::string label;
  std::string view;
  int64_t frames = 0;
  int64_t dropped = 0;
  std::vector<RecordingFile> files;
  std::string error;
  template <class Fields>
  static void fields(Fields& f) {
    using R = Recording;
    f.field("key", &R::key, "Its key (one recording per key): main, weights:<layer>, ...");
    f.field("label", &R::label, "What it shows, in words.");
    f.field("view", &R::view, "The view it records.",
            {{"type", "string"}, {"enum", {"layers", "weights", "histograms", "patches", "experiment"}}});
    f.field("frames", &R::frames, "Frames recorded.");
    f.field("dropped", &R::dropped, "Frames not written, over its files.");
    f.field("files", &R::files, "Its files: one per page of the view.");
    f.field("error", &R::error, "The newest frame not drawn or file failure; \"\" when none.");
  }
};

// A recording saved in this run.
struct SavedRecording {
  static constexpr const char* kWireName = "SavedRecording";
  std::string key;
  std::string label;
  std::vector<std::string> files;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("key", &SavedRecording::key, "Its key.");
    f.field("label", &SavedRecording::label, "What it shows, in words.");
    f.field("files", &SavedRecording::files, "Its files with frames (for get_recording_file).");
  }
};

// list_recordings' reply.
struct Recordings {
  static constexpr const char* kWireName = "Recordings";
  std::string directory;
  int64_t frame_rate = 0;
  std::vector<Recording> recordings;
  std::vector<SavedRecording> saved;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("directory", &Recordings::directory, "The run's recordings folder.");
    f.field("frame_rate", &Recordings::frame_rate, "The videos' frames per second.");
    f.field("recordings", &Recordings::recordings, "The recordings active now.");
    f.field("saved", &Recordings::saved, "The recordings saved in this run.");
  }
};

// stop_recording's reply.
struct RecordingsStopped {
  static constexpr const char* kWireName = "RecordingsStopped";
  std::vector<Recording> stopped;
  std::vector<std::string> files;
  std::string directory;
  std::optional<std::string> note;
  template <class Fields>
  static void fields(Fields& f) {
    using S = RecordingsStopped;
    f.field("stopped", &S::stopped, "The recordings it finished.");
    f.field("files", &S::files, "Every saved file's path.");
    f.field("directory", &S::directory, "The run's recordings folder.");
    f.optional_field("note", &S::note, "Only when nothing was recording: says so.");
  }
};

// A recording discarded, and the files it removed.
struct DiscardedRecording {
  static constexpr const char* kWireName = "DiscardedRecording";
  std::string key;
  std::vector<std::string> removed;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("key", &DiscardedRecording::key, "Its key.");
    f.field("removed", &DiscardedRecording::removed, "The files removed.");
  }
};

// discard_recording's reply.
struct RecordingsDiscarded {
  static constexpr const char* kWireName = "RecordingsDiscarded";
  std::vector<DiscardedRecording> discarded;
  std::optional<std::string> note;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("discarded", &RecordingsDiscarded::discarded, "The recordings stopped without saving.");
    f.optional_field("note", &RecordingsDiscarded::note, "Only when nothing was recording: says so.");
  }
};

// save_snapshot's reply.
struct SnapshotSaved {
  static constexpr const char* kWireName = "SnapshotSaved";
  std::vector<std::string> files;
  std::string key;
  json position;  // to_json(BatchPosition)
  uint64_t sequence = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("files", &SnapshotSaved::files, "The PNGs written: one per page of the view.");
    f.field("key", &SnapshotSaved::key, "The view's key.");
    f.field("position", &SnapshotSaved::position, "Where training was in the view drawn.",
            {{"$ref", "#/$defs/Position"}});
    f.field("sequence", &SnapshotSaved::sequence,
            "The snapshot's sequence drawn (an experiment view: its result's seq).");
  }
};

}  // namespace nansense::server
