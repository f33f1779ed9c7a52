// The controller's recordings and snapshots of a view
// (controller_recordings.cpp, recorder.h): each view drawn as one page of
// the pictures the pages and MCP show, with the training position stamped
// over it; and Deep Dream clips.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/replies_lab.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;
class Recorder;
struct RecordView;
struct ViewPages;

class RecordingArea {
 public:
  RecordingArea(Controller& owner, detail::SessionPort& session);
  ~RecordingArea();  // finishes every recording

  using Wait = std::chrono::milliseconds;
  // The view drawn now as the page(s) a recording frame or snapshot holds.
  // Refusals name the unknown view, layer or what is missing.
  ViewPages draw_view(const RecordView& view) const;
  Recordings list_recordings() const;
  Recording start_recording(const RecordView& view);
  RecordingsStopped stop_recording(const std::optional<std::string>& key);
  RecordingsDiscarded discard_recording(const std::optional<std::string>& key);
  SnapshotSaved save_snapshot(const RecordView& view);
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
  // Throws FixedByRecording (409) when an active recording fixes
  // `setting` (recorder.h's FixedSetting): `command` would change what it shows.
  void refuse_if_fixed(const std::string& command, const std::string& setting, const std::string& argument = "") const;
  // run_experiment with video: a Deep Dream's published steps (about 20,
  // evenly spaced; every step with all_steps) drawn as an MP4 in the
  // recordings folder while it runs; the reply adds video {path, frames,
  // error}. Refused for other kinds and without a wait.
  ExperimentResult run_experiment_video(const std::string& kind, const std::string& layer, const json& params,
                                        Wait wait);

 private:
  Controller& owner_;
  detail::SessionPort& session_;
  // Its thread draws through the controller's areas, which outlive it.
  std::unique_ptr<Recorder> recorder_;
};

}  // namespace nansense::server
