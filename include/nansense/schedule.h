// Batch-position bookkeeping: which phase, epoch and batch the loop is on.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nansense/position.h"

namespace nansense {

// Phase name -> batch count, in the order the phases run each epoch.
using PhaseCounts = std::vector<std::pair<std::string, int64_t>>;

// Thread-safe: the training thread advances it while server threads read it.
//
// Lazy mode (no phases declared) learns phase names and batch counts by
// observation during epoch 0, so boundary flags are best effort until then.
// Declared mode pins both up front: an unknown phase, or one batch more than
// declared, raises ScheduleError naming both.
class Schedule {
 public:
  Schedule() = default;
  Schedule(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases);

  // Called by the training thread at the start of every batch of `phase`.
  // `epoch` is the loop's epoch when it knows it (epochs(), or an explicit
  // batches(..., epoch)); otherwise the schedule infers a new epoch when the
  // first phase of the epoch starts again.
  BatchPosition advance(const std::string& phase, std::optional<int64_t> epoch);
  // Called when a phase's loader is exhausted after `count` batches.
  void end_phase(const std::string& phase, int64_t count);

  // Re-declare mid-run; batch counters are kept. nullopt leaves a part as is.
  void set(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases);
  void set_epochs(int64_t epochs);
  // Rewind the epoch counter (used when the loop restarts at an earlier epoch).
  void rewind_to_epoch(int64_t epoch);
  // A frozen moment's schedule (load_moment): the epoch total, every phase in
  // run order and the counts known, positioned so that the next
  // advance(at.phase, at.epoch) returns `at`.
  void restore(std::optional<int64_t> epochs, const std::vector<std::string>& order,
               const std::map<std::string, int64_t>& counts, const BatchPosition& at);

  std::optional<int64_t> epochs() const;
  bool declared() const;
  // Phases with a known count, in order.
  PhaseCounts phases() const;
  // Every phase seen or declared, in order, counted or not.
  std::vector<std::string> phase_order() const;
  std::optional<int64_t> phase_count(const std::string& phase) const;
  // Index of `phase` in phase_order(), or nullopt.
  std::optional<size_t> phase_index(const std::string& phase) const;
  // The current batch's position with up-to-date flags, if a batch has run.
  std::optional<BatchPosition> current() const;
  // Recomputes the is_last_* flags of `pos` against what is known now.
  BatchPosition with_flags(BatchPosition pos) const;
  // Whether `a` comes strictly before `b` in run order (epoch, phase, batch).
  bool before(const BatchPosition& a, const BatchPosition& b) const;

 private:
  BatchPosition flags_locked(BatchPosition pos) const;
  std::optional<size_t> index_locked(const std::string& phase) const;

  mutable std::mutex mu_;
  std::optional<int64_t> epochs_;
  bool declared_ = false;
  std::vector<std::string> order_;
  std::map<std::string, int64_t> counts_;
  bool order_complete_ = false;  // every phase of an epoch has been seen
  std::optional<BatchPosition> current_;
  int64_t next_batch_ = 0;
  bool phase_ended_ = false;  // end_phase() closed the current phase's loader
  std::vector<std::string> seen_this_epoch_;
};

}  // namespace nansense
