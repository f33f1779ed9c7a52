#include "server/controller/status.h"

namespace nansense::server {

const char* hint(RunState state) {
  switch (state) {
    case RunState::kPaused:
      return "paused: inspect the layers, then step or run";
    case RunState::kRunning:
      return "running: pause to stop at the next batch";
    case RunState::kFinished:
      return "training finished: the last captured batch stays available";
    case RunState::kLost:
      return "the training loop exited without close(): see lost_reason";
  }
  return "";
}

json to_json(const Status& s) {
  json out = {{"state", std::string(to_string(s.state))},
              {"mode", std::string(to_string(s.mode))},
              {"live_position", to_json(s.live_position)},
              {"snapshot_position", to_json(s.snapshot_position)},
              {"snapshot_sequence", s.snapshot_sequence},
              {"snapshot_batch_size", s.snapshot_batch_size},
              {"snapshot_samples_kept", s.snapshot_samples_kept},
              {"live_trainer_step", to_json(s.live_trainer_step)},
              {"snapshot_trainer_step", to_json(s.snapshot_trainer_step)},
              {"schedule", s.schedule},
              {"hint", s.locked && s.state == RunState::kPaused
                           ? "locked: a shared, read-only view; inspect the layers, statistics and weights, or run "
                             "an experiment"
                           : hint(s.state)},
              {"time_travel", s.time_travel},
              {"debug", s.debug},
              {"stats", s.stats},
              {"probe", s.probe},
              {"locked", s.locked},
              {"front_end", s.front_end},
              {"recordings", s.recordings},
              {"fixed", s.fixed}};
  if (s.paused_at_ms) out["paused_at_ms"] = *s.paused_at_ms;
  if (s.state == RunState::kLost) out["lost_reason"] = s.lost_reason;
  if (!s.internal_errors.empty()) out["internal_errors"] = s.internal_errors;
  if (s.refreshed) out["refreshed"] = *s.refreshed;
  return out;
}

}  // namespace nansense::server
