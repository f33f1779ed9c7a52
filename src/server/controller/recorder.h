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

namespace nansense::server {

class Controller;

// What a recording or a snapshot shows: one of the views a page can show.
struct RecordView {
  // "layers" (the main page's strips), "weights" (a layer's Weights page),
  // "histograms" (the Stats page's histograms), "patches" (its Min/Max patches).
  std::string view;
  std::vector<std::string> layers;    // layers, histograms
  std::string layer;                  // weights, patches
  std::optional<std::string> phase;   // histograms, patches
  std::string kind = "both";          // layers: activation, gradient or both
  render::StripOptions strip;         // layers: sample, average, values
  bool log_x = false, log_y = false;  // histograms
  std::optional<int64_t> channel;     // histograms
  bool heatmap = false;               // patches

  // One recording per key: "main", "weights:<layer>", "watch_histogram", "watch_minmax".
  std::string key() const;
  // What the dialog shows: "Layers: features.0, relu".
  std::string label() const;
};

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

  // {directory, frame_rate, recordings: [{key, label, view, frames, dropped,
  // files, error, width, height}], saved: [{key, files}]}.
  json list() const;
  // Draws the view now (refused when it cannot be drawn, or its key already
  // records) and starts its recording with that first frame.
  json start(const RecordView& view);
  // Finishes one recording (nullopt: every one) so its files play; refused
  // naming the active keys when none matches.
  json stop(const std::optional<std::string>& key);
  // Stops without saving and removes the files.
  json discard(const std::optional<std::string>& key);
  // The view drawn once as PNG(s): {files: [...], position, sequence}.
  json snapshot(const RecordView& view);
  // Every recording finished (the session's close(), the server going away).
  void finish_all();
  std::vector<std::string> keys() const;
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
  json describe(const Active& a) const;
  // Removes the matching recordings from the table; refuses when none.
  std::vector<std::shared_ptr<Active>> take(const std::optional<std::string>& key);

  Controller& controller_;
  const std::time_t started_;
  mutable std::mutex mu_;  // the table below
  std::mutex draw_mu_;     // one frame drawn, or one recording finished, at a time
  std::map<std::string, std::shared_ptr<Active>> active_;
  std::vector<json> saved_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nansense::server
