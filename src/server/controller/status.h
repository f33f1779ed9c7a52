// The run's status as every transport shows it (GET /api/status, MCP
// get_status, each command's reply, the push channel). Typed, so that a
// transport reads the state or the snapshot sequence from a field, never back
// out of the JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nansense/position.h"
#include "nansense/session.h"
#include "server/controller/json_views.h"

namespace nansense::server {

struct Status {
  RunState state = RunState::kRunning;
  Mode mode = Mode::kStepBatch;
  std::optional<BatchPosition> live_position;      // where the loop is
  std::optional<BatchPosition> snapshot_position;  // the batch every view shows
  uint64_t snapshot_sequence = 0;                  // 0 before the first capture
  int64_t snapshot_batch_size = 0;
  // The samples its batch tensors hold (snapshot budget); == batch size when
  // nothing was left out.
  int64_t snapshot_samples_kept = 0;
  // A trainer adapter's step (the loop's, and the snapshot's); none for plain loops.
  std::optional<TrainerStep> live_trainer_step;
  std::optional<TrainerStep> snapshot_trainer_step;
  json schedule;                             // to_json(Schedule)
  std::optional<int64_t> paused_at_ms;       // wall clock, while paused
  json time_travel;                          // what the Time Travel button needs
  std::string lost_reason;                   // only when lost
  std::vector<std::string> internal_errors;  // parts of nansense that gave up
  json debug;                                // what the numerical banner needs
  json stats;                                // statistics settings and the view's sequence
  json probe;                                // get_probe_status()
  bool locked = false;                       // Session::lock(): a shared, read-only session
  std::string front_end = "cpp";             // "cpp" (LibTorch) or "python" (PyTorch)
  std::vector<std::string> recordings;       // the keys of the active recordings
  // What they fix: setting -> why (Controller::fixed_settings).
  std::map<std::string, std::string> fixed;
  // Only from refresh: whether a newer snapshot arrived within the wait.
  std::optional<bool> refreshed;
};

// What to do next in `state`, for people and agents.
const char* hint(RunState state);

json to_json(const Status& status);

}  // namespace nansense::server
