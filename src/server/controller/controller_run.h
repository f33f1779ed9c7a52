// The controller's run control and status: where the run is (get_status, the
// one typed reply every page polls), the commands that move it (step, run,
// pause, run_until, refresh, time_travel) and the change feed push
// transports sleep on. Implemented in controller.cpp and
// controller_time_travel.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/replies.h"
#include "server/controller/status.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class Controller;

class RunArea {
 public:
  RunArea(Controller& owner, detail::SessionPort& session);

  // --- queries ---
  Status get_status() const;

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

  // --- time travel (controller_time_travel.cpp) ---
  // The Time Travel dialog's data: availability and reason, cached epochs,
  // the epoch count, the current and pending epochs, the cache folder with
  // its budget and use, per-checkpoint sizes, jumps done and the last problem.
  TimeTravelReport get_time_travel_status() const;
  // Jumps to the start of a cached epoch, paused or running; waits like the
  // other commands for the pause on the target's first batch. Refused:
  // kConflict when no jump is possible now (no running epochs() loop, a
  // finished or lost run), kInvalidArgument for an epoch out of range, not
  // cached, or whose checkpoint is corrupted or belongs to another model.
  Status time_travel(int64_t epoch, Wait wait);

  // --- change feed for push transports ---
  // Sleeps until the run's state, mode or snapshot changes after `seen`, or
  // the timeout passes; returns the new change count.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Wakes every wait_for_change() (a transport shutting down).
  void wake_watchers();

 private:
  template <class F>
  Status command(F&& apply, Wait wait);
  // The `time_travel` field of the status: what the button needs.
  TimeTravelSummary time_travel_summary() const;

  Controller& owner_;
  detail::SessionPort& session_;
};

}  // namespace nansense::server
