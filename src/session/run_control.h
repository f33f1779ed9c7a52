// Run control: the mode state machine, the pause loop and the queue of work
// that must run on the training thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/session.h"
#include "nansense/stats.h"

namespace nansense::detail {

// What happens at one batch boundary, decided in one place so it stays a
// small value (a future distributed run broadcasts it from rank 0).
struct BoundaryDecision {
  bool capture = false;      // trace this batch and publish a snapshot
  bool pause_after = false;  // pause once the batch's body has run
  bool collect = false;      // trace this batch and fold its statistics
};

class RunControl {
 public:
  explicit RunControl(const Schedule& schedule) : schedule_(schedule) {}

  // --- training thread ---
  // `collect`: whether the statistics settings collect on this batch.
  BoundaryDecision decide(const BatchPosition& pos, bool collect = false);
  // Blocks in the pause loop, running queued work, until a command resumes
  // the run or the session closes.
  void pause_at(const BatchPosition& pos);
  // How a host language hears its own signals while the loop is paused
  // (Python's Ctrl-C): when set, the pause wakes every `slice` to call
  // `check` (from the training thread, without the lock); true leaves the
  // pause at once, the mode kept, and the caller reports why. Unset (C++),
  // the pause sleeps until woken. Set it before the first batch.
  void set_pause_check(std::function<bool()> check, std::chrono::milliseconds slice);

  // --- any thread ---
  void step_batch();
  void step_phase();
  void step_epoch();
  void run_until(const BatchPosition& target);
  void run();
  void detach();
  void pause();
  void refresh();
  // The live-update cadence (nansense/stats.h). Throws UsageError for n out
  // of range, a phase with a non-batch unit or a phase the schedule lacks.
  void set_update_frequency(const UpdateFrequency& frequency);
  UpdateFrequency update_frequency() const;
  void close();
  void mark_lost(const std::string& reason);
  // Queues `work` for the training thread; it runs at the current or next pause.
  void post(std::function<void()> work);
  // Leaves the current pause, and makes pause_at() return at once, until
  // clear_interrupt(): the training thread must reach a batch boundary to
  // carry out a time-travel jump. The mode is kept.
  void interrupt();
  void clear_interrupt();

  // Whether the pause is ending (a resume command, a jump) or the run ended:
  // long queued work (an experiment) checks it between steps and stops.
  bool leave_requested() const;

  RunState state() const;
  Mode mode() const;
  std::optional<BatchPosition> paused_at() const;
  std::string lost_reason() const;
  RunState wait_until_stopped(std::chrono::milliseconds timeout) const;
  // How many pauses the loop has entered so far (the reference's
  // pause_count), and a wait for the count to pass `after`: true once it
  // has (or the run finished or was lost), false when `timeout` passed
  // first (nullopt: no limit).
  int64_t pause_count() const;
  bool wait_for_pause(int64_t after, std::optional<std::chrono::milliseconds> timeout) const;
  // When the current pause began (wall clock), if paused.
  std::optional<std::chrono::system_clock::time_point> paused_since() const;

  // A counter of changes to the state, the mode or the pause. A watcher (the
  // push channel) sleeps in wait_for_change() instead of polling; it returns
  // the counter once it passes `seen` or the timeout ends.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  // Counts a change made outside run control (a published snapshot).
  void notify_changed();

 private:
  void resume_with(Mode mode, std::unique_lock<std::mutex>& lock);
  // Expects mu_ held: counts a change and wakes every waiter.
  void changed();
  // These expect mu_ held.
  void require_live() const;
  BatchPosition reference() const;
  bool pauses_at(const BatchPosition& pos) const;
  // Whether the cadence publishes this batch (counts it when it is of the
  // cadence's phase).
  bool update_due(const BatchPosition& pos, std::chrono::steady_clock::time_point now);

  const Schedule& schedule_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Mode mode_ = Mode::kStepBatch;
  BatchPosition ref_;                    // where the current command was given
  std::optional<BatchPosition> target_;  // kRunUntil
  std::optional<BatchPosition> paused_at_;
  std::chrono::system_clock::time_point paused_since_;
  int64_t pauses_ = 0;
  uint64_t version_ = 0;
  bool resume_ = false;
  // Counts commands that change the mode; decide() notes the count so that a
  // command given while the batch ran can still cancel the pause it decided.
  uint64_t commands_ = 0;
  uint64_t commands_at_decision_ = 0;
  bool snapshot_requested_ = false;
  UpdateFrequency frequency_;
  int64_t batches_since_update_ = 0;
  // Training time is counted from here: the last capture or the end of the
  // last pause.
  std::optional<std::chrono::steady_clock::time_point> update_clock_;
  bool finished_ = false;
  bool lost_ = false;
  bool interrupted_ = false;
  std::string lost_reason_;
  std::deque<std::function<void()>> work_;
  std::function<bool()> pause_check_;
  std::chrono::milliseconds pause_check_slice_{0};
};

}  // namespace nansense::detail
