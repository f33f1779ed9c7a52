#include "nansense/schedule.h"

#include <algorithm>
#include <sstream>

#include "common/text.h"
#include "nansense/errors.h"

namespace nansense {

std::string BatchPosition::to_string() const {
  std::ostringstream os;
  os << "epoch " << epoch << " | " << phase << " batch " << batch_idx;
  return os.str();
}

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::kStepBatch:
      return "step_batch";
    case Mode::kStepPhase:
      return "step_phase";
    case Mode::kStepEpoch:
      return "step_epoch";
    case Mode::kRunUntil:
      return "run_until";
    case Mode::kRun:
      return "run";
    case Mode::kDetach:
      return "detach";
  }
  return "unknown";
}

Schedule::Schedule(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases) { set(epochs, std::move(phases)); }

void Schedule::set(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases) {
  if (epochs && *epochs < 1) {
    throw ScheduleError("epochs must be at least 1, got " + std::to_string(*epochs));
  }
  if (phases) {
    if (phases->empty()) throw ScheduleError("a declared schedule needs at least one phase");
    std::vector<std::string> names;
    for (const auto& [name, count] : *phases) {
      if (name.empty()) throw ScheduleError("phase names must not be empty");
      if (count < 1) {
        throw ScheduleError("phase '" + name + "' must have at least 1 batch, got " + std::to_string(count));
      }
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        throw ScheduleError("phase '" + name + "' is declared twice");
      }
      names.push_back(name);
    }
  }
  std::lock_guard lock(mu_);
  if (epochs) epochs_ = epochs;
  if (phases) {
    declared_ = true;
    order_.clear();
    counts_.clear();
    for (const auto& [name, count] : *phases) {
      order_.push_back(name);
      counts_[name] = count;
    }
    order_complete_ = true;
  }
}

void Schedule::set_epochs(int64_t epochs) { set(epochs, std::nullopt); }

void Schedule::rewind_to_epoch(int64_t epoch) {
  std::lock_guard lock(mu_);
  if (current_) {
    current_->epoch = epoch;
    current_->phase.clear();
  }
  seen_this_epoch_.clear();
  next_batch_ = 0;
}

BatchPosition Schedule::advance(const std::string& phase, std::optional<int64_t> epoch) {
  std::lock_guard lock(mu_);
  if (declared_ && !counts_.count(phase)) {
    throw ScheduleError("unknown phase '" + phase + "': the declared phases are " + common::join(order_, "(none)"));
  }
  const bool have_current = current_.has_value();
  int64_t new_epoch = have_current ? current_->epoch : 0;
  // A phase whose loader ended and starts again is a new run of it, not more
  // batches of the same one (a single-phase loop's only sign of a new epoch).
  const bool same_phase = have_current && current_->phase == phase && !phase_ended_;
  if (epoch) {
    if (*epoch < 0) throw ScheduleError("epoch must not be negative, got " + std::to_string(*epoch));
    new_epoch = *epoch;
  } else if (!same_phase &&
             std::find(seen_this_epoch_.begin(), seen_this_epoch_.end(), phase) != seen_this_epoch_.end()) {
    // A phase that already ran this epoch starts again: a new epoch began.
    new_epoch = have_current ? current_->epoch + 1 : 0;
  }
  const bool new_epoch_started = !have_current || new_epoch != current_->epoch;
  if (new_epoch_started) {
    if (have_current && !seen_this_epoch_.empty()) order_complete_ = true;
    seen_this_epoch_.clear();
  }
  if (new_epoch_started || !same_phase) {
    next_batch_ = 0;
    if (std::find(seen_this_epoch_.begin(), seen_this_epoch_.end(), phase) == seen_this_epoch_.end()) {
      seen_this_epoch_.push_back(phase);
    }
  }
  if (std::find(order_.begin(), order_.end(), phase) == order_.end()) order_.push_back(phase);
  if (declared_ && next_batch_ >= counts_[phase]) {
    throw ScheduleError("phase '" + phase + "' was declared with " + std::to_string(counts_[phase]) +
                        " batches, but batch " + std::to_string(next_batch_ + 1) + " arrived in epoch " +
                        std::to_string(new_epoch));
  }
  BatchPosition pos;
  pos.phase = phase;
  pos.epoch = new_epoch;
  pos.batch_idx = next_batch_++;
  phase_ended_ = false;
  current_ = flags_locked(pos);
  return *current_;
}

void Schedule::restore(std::optional<int64_t> epochs, const std::vector<std::string>& order,
                       const std::map<std::string, int64_t>& counts, const BatchPosition& at) {
  std::lock_guard lock(mu_);
  // Declared or not as set() left it (load_moment declares a declared one first).
  epochs_ = epochs;
  order_ = order;
  counts_ = counts;
  order_complete_ = true;
  seen_this_epoch_.clear();
  for (const auto& phase : order_) {
    seen_this_epoch_.push_back(phase);
    if (phase == at.phase) break;
  }
  BatchPosition before = at;
  before.batch_idx = at.batch_idx - 1;
  current_ = before;
  next_batch_ = at.batch_idx;
  phase_ended_ = false;
}

void Schedule::end_phase(const std::string& phase, int64_t count) {
  std::lock_guard lock(mu_);
  if (current_ && current_->phase == phase) phase_ended_ = true;
  if (std::find(order_.begin(), order_.end(), phase) == order_.end()) {
    if (declared_) return;
    order_.push_back(phase);
  }
  if (!declared_ && count > 0) counts_[phase] = count;
}

std::optional<int64_t> Schedule::epochs() const {
  std::lock_guard lock(mu_);
  return epochs_;
}

bool Schedule::declared() const {
  std::lock_guard lock(mu_);
  return declared_;
}

PhaseCounts Schedule::phases() const {
  std::lock_guard lock(mu_);
  PhaseCounts out;
  for (const auto& name : order_) {
    auto it = counts_.find(name);
    if (it != counts_.end()) out.emplace_back(name, it->second);
  }
  return out;
}

std::vector<std::string> Schedule::phase_order() const {
  std::lock_guard lock(mu_);
  return order_;
}

std::optional<int64_t> Schedule::phase_count(const std::string& phase) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(phase);
  if (it == counts_.end()) return std::nullopt;
  return it->second;
}

std::optional<size_t> Schedule::phase_index(const std::string& phase) const {
  std::lock_guard lock(mu_);
  return index_locked(phase);
}

std::optional<size_t> Schedule::index_locked(const std::string& phase) const {
  auto it = std::find(order_.begin(), order_.end(), phase);
  if (it == order_.end()) return std::nullopt;
  return static_cast<size_t>(it - order_.begin());
}

std::optional<BatchPosition> Schedule::current() const {
  std::lock_guard lock(mu_);
  if (!current_) return std::nullopt;
  return flags_locked(*current_);
}

BatchPosition Schedule::with_flags(BatchPosition pos) const {
  std::lock_guard lock(mu_);
  return flags_locked(std::move(pos));
}

BatchPosition Schedule::flags_locked(BatchPosition pos) const {
  pos.is_last_in_phase = pos.is_last_in_epoch = pos.is_last_in_run = false;
  auto it = counts_.find(pos.phase);
  if (it == counts_.end() || pos.batch_idx != it->second - 1) return pos;
  pos.is_last_in_phase = true;
  if (!order_complete_ || order_.empty() || order_.back() != pos.phase) return pos;
  pos.is_last_in_epoch = true;
  pos.is_last_in_run = epochs_.has_value() && pos.epoch == *epochs_ - 1;
  return pos;
}

bool Schedule::before(const BatchPosition& a, const BatchPosition& b) const {
  if (a.epoch != b.epoch) return a.epoch < b.epoch;
  std::lock_guard lock(mu_);
  auto ia = index_locked(a.phase), ib = index_locked(b.phase);
  if (a.phase != b.phase) {
    if (!ia || !ib) return false;
    return *ia < *ib;
  }
  return a.batch_idx < b.batch_idx;
}

}  // namespace nansense
