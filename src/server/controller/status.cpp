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

std::string status_hint(RunState state, bool locked) {
  if (locked && state == RunState::kPaused) {
    return "locked: a shared, read-only view; inspect the layers, statistics and weights, or run an experiment";
  }
  return hint(state);
}

ScheduleSummary schedule_summary(const Schedule& schedule) {
  ScheduleSummary out;
  out.epochs = schedule.epochs();
  out.declared = schedule.declared();
  for (const auto& name : schedule.phase_order()) out.phases.push_back({name, schedule.phase_count(name)});
  return out;
}

}  // namespace nansense::server
