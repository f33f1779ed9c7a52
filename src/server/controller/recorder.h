// The recordings of one served session: which views record, their files,
// and the thread that draws a frame of each at every live update (a new
// published snapshot: the push channel's cadence, so a paused run adds
// nothing). Frames are drawn here, off the training thread, from the same
// immutable snapshots and statistics views, by the same renderers, as the
// pages' and MCP's pictures (controller_recordings.cpp); each recording
// encodes on a thread of its own (record/recording.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nansense/position.h"
#include "record/frame.h"
#include "record/recording.h"
#include "render/strip.h"
#include "server/controller/json_views.h"
#include "server/controller/replies_lab.h"

namespace nansense::server {

class Controller;

// What a recording or a snapshot shows: one of the views a page can show.
struct RecordView {
  // "layers" (the main page's strips), "weights" (a layer's Weights page),
  // "histograms" (the Stats page's histograms), "patches" (its Min/Max
  // patches), "experiment" (the Experiment page's picture of an experiment
  // on `layer`: a recording pins its own auto experiment, re-run at every
  // live update, and draws each result).
  std::string view;
  std::vector<std::string> layers;   // layers, histograms
  std::string layer;                 // weights, patches, experiment
  std::optional<std::string> phase;  // histograms, patches
  // layers: activation, gradient or both; experiment: its kind (gradcam, ...).
  std::string kind = "both";
  json params = json::object();       // experiment: its parameters, as run_experiment takes them
  render::StripOptions strip;         // layers: sample, average, values
  bool log_x = false, log_y = false;  // histograms
  std::optional<int64_t> channel;     // histograms
  bool heatmap = false;               // patches
  bool overlay = false;               // experiment: attributions over the input
  // experiment, save_snapshot only: draw this already published result
  // (layer and kind are then its own) instead of the recording's reruns.
  std::optional<uint64_t> seq;

  // One recording per key: "main", "weights:<layer>", "watch_histogram",
  // "watch_minmax", "experiment:<layer>".
  std::string key() const;
  // experiment: the tab name of the recording's pinned auto experiment.
  std::string tab() const { return "recording:" + key(); }
  // What the dialog shows: "Layers: features.0, relu".
  std::string label() const;
};

// A setting an active recording fixes: a command that would change it is
// refused (FixedByRecording, refusal.h) until the recording is saved or
// deleted, and the page disables its control with the same words (the
// status's `fixed`). Which view fixes what is fixed_by's table
// (controller_recordings.cpp).
struct FixedSetting {
  // "update_frequency", "stats_scope", "watch_performance",
  // "watched:<layer>" (unwatching it), "patch_layers:<layer>" (leaving it out
  // of set_patch_layers' list).
  std::string setting;
  std::string what;  // "the update frequency", "watching conv"
  std::string why;   // what the change would do to the video
  std::string key;   // the recording's key
  std::string label;
  std::string message() const;
};
// What a recording of `view` fixes: the update cadence for every view (each
// update is a frame), the statistics it draws for histograms and patches.
std::vector<FixedSetting> fixed_by(const RecordView& view);

// One drawn state of a view: a page per file (patches: "pixel" and
// "average"; the others one, named ""), where training was, and what could
// not be drawn.
struct ViewPages {
  std::vector<std::pair<std::string, render::Image>> pages;
  BatchPosition position;
  uint64_t sequence = 0;
};

class Recorder {
 public:
  explicit Recorder(Controller& controller);
  ~Recorder();  // finish_all()

  // The active recordings, and those saved in this run.
  Recordings list() const;
  // Whether `path` is a file of a saved recording (true) or of one still
  // recording (false); nullopt for neither.
  std::optional<bool> saved_file(const std::string& path) const;
  // Draws the view now (refused when it cannot be drawn, or its key already
  // records) and starts its recording with that first frame.
  Recording start(const RecordView& view);
  // Finishes one recording (nullopt: every one) so its files play; refused
  // naming the active keys when none matches. `settle`: paused, an
  // experiment view's run still going finishes first and is the last frame.
  RecordingsStopped stop(const std::optional<std::string>& key, bool settle = true);
  // Stops without saving and removes the files.
  RecordingsDiscarded discard(const std::optional<std::string>& key);
  // The view drawn once as PNG(s).
  SnapshotSaved snapshot(const RecordView& view);
  // Every recording finished (the session's close(), the server going away).
  void finish_all();
  std::vector<std::string> keys() const;
  // What the active recordings fix, by setting (the first recording by
  // key where several fix one).
  std::map<std::string, FixedSetting> fixed() const;
  // nansense_recordings/<run timestamp> (or under NANSENSE_RECORDINGS_DIR).
  std::string folder() const;

 private:
  struct Active {
    RecordView view;
    std::string key;
    std::vector<std::pair<std::string, std::unique_ptr<record::Recording>>> files;  // suffix, recording
    uint64_t last_sequence = 0;
    std::string draw_error;  // the newest frame that could not be drawn, and why
  };
  void pump();
  void add_frame(Active& a, const ViewPages& pages);
  Recording describe(const Active& a) const;
  // Removes the matching recordings from the table; refuses when none.
  std::vector<std::shared_ptr<Active>> take(const std::optional<std::string>& key);

  Controller& controller_;
  const std::time_t started_;
  mutable std::mutex mu_;  // the table below
  std::mutex draw_mu_;     // one frame drawn, or one recording finished, at a time
  std::map<std::string, std::shared_ptr<Active>> active_;
  std::vector<SavedRecording> saved_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nansense::server
