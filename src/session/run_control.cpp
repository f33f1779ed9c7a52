#include "session/run_control.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <iostream>
#include <sstream>

#include "nansense/errors.h"

namespace nansense::detail {

bool RunControl::pauses_at(const BatchPosition& pos) const {
  switch (mode_) {
    case Mode::kStepBatch:
      return true;
    case Mode::kStepPhase:
      return pos.phase != ref_.phase || pos.epoch != ref_.epoch;
    case Mode::kStepEpoch:
      return pos.epoch != ref_.epoch;
    case Mode::kRunUntil:
      // Also stop if the target was skipped (a phase shorter than expected).
      return !target_ || pos.same_batch(*target_) || schedule_.before(*target_, pos);
    case Mode::kRun:
      return pos.is_last_in_run;
    case Mode::kDetach:
      return false;
  }
  return false;
}

bool RunControl::update_due(const BatchPosition& pos, std::chrono::steady_clock::time_point now) {
  // A detached loop captures nothing: it trains as if nansense were not there.
  if (mode_ == Mode::kDetach) return false;
  const double n = frequency_.n();
  switch (frequency_.unit()) {
    case UpdateFrequency::Unit::kBatch:
      if (frequency_.phase() && *frequency_.phase() != pos.phase) return false;
      return ++batches_since_update_ >= static_cast<int64_t>(n);
    case UpdateFrequency::Unit::kEpoch:
      return pos.batch_idx == 0 && schedule_.phase_index(pos.phase) == std::optional<size_t>(0) &&
             pos.epoch % static_cast<int64_t>(n) == 0;
    case UpdateFrequency::Unit::kSeconds:
      if (!update_clock_) {
        update_clock_ = now;
        return false;
      }
      return std::chrono::duration<double>(now - *update_clock_).count() >= n;
  }
  return false;
}

BoundaryDecision RunControl::decide(const BatchPosition& pos, bool collect) {
  std::lock_guard lock(mu_);
  BoundaryDecision d;
  if (finished_ || lost_) return d;
  d.pause_after = pauses_at(pos);
  d.collect = collect;
  commands_at_decision_ = commands_;
  const auto now = std::chrono::steady_clock::now();
  d.capture = update_due(pos, now) || d.pause_after || snapshot_requested_;
  if (d.capture) {
    snapshot_requested_ = false;
    batches_since_update_ = 0;
    update_clock_ = now;
  }
  return d;
}

void RunControl::set_update_frequency(const UpdateFrequency& f) {
  using Unit = UpdateFrequency::Unit;
  const std::string unit(to_string(f.unit()));
  const bool seconds = f.unit() == Unit::kSeconds;
  const bool bad = !std::isfinite(f.n()) || (seconds ? !(f.n() > 0) : f.n() < 1 || f.n() != std::floor(f.n()));
  if (bad) {
    std::ostringstream shown;
    shown << f.n();
    throw UsageError("update frequency: every n " + (seconds ? unit : unit + (unit == "batch" ? "es" : "s")) +
                     " needs " + (seconds ? "a number n > 0" : "a whole number n >= 1") + ", got " + shown.str());
  }
  if (f.phase()) {
    if (f.unit() != Unit::kBatch) {
      throw UsageError(
          "update frequency: a phase applies only to the batch unit (count that phase's batches); "
          "leave phase out for unit " +
          unit);
    }
    const auto order = schedule_.phase_order();
    if (f.phase()->empty() || (!order.empty() && !schedule_.phase_index(*f.phase()))) {
      std::string known;
      for (const auto& p : order) known += (known.empty() ? "" : ", ") + p;
      throw UsageError("update frequency: unknown phase '" + *f.phase() +
                       "'; known phases: " + (known.empty() ? "(none yet)" : known));
    }
  }
  std::lock_guard lock(mu_);
  frequency_ = f;
  batches_since_update_ = 0;
  update_clock_.reset();
  changed();
}

UpdateFrequency RunControl::update_frequency() const {
  std::lock_guard lock(mu_);
  return frequency_;
}

void RunControl::pause_at(const BatchPosition& pos) {
  std::unique_lock lock(mu_);
  if (finished_ || lost_ || interrupted_) return;
  // A command given while this batch ran (run, detach, step phase...) decides
  // instead of the mode this batch started under.
  if (commands_ != commands_at_decision_ && !pauses_at(pos)) return;
  paused_at_ = pos;
  paused_since_ = std::chrono::system_clock::now();
  ++pauses_;
  mode_ = Mode::kStepBatch;
  target_.reset();
  resume_ = false;
  changed();
  const auto woken = [&] { return resume_ || finished_ || lost_ || interrupted_ || !work_.empty(); };
  while (true) {
    if (!pause_check_) {
      cv_.wait(lock, woken);
    } else if (!cv_.wait_for(lock, pause_check_slice_, woken)) {
      const auto check = pause_check_;
      lock.unlock();
      const bool leave = check();
      lock.lock();
      if (leave) break;
      continue;
    }
    if (!work_.empty() && !interrupted_) {
      auto work = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      try {
        work();
      } catch (const std::exception& e) {
        // Queued work reports its own results; a throw must not end training.
        std::cerr << "[nansense] work queued for the training thread failed: " << e.what() << "\n";
      } catch (...) {
        std::cerr << "[nansense] work queued for the training thread failed\n";
      }
      lock.lock();
      continue;
    }
    break;
  }
  paused_at_.reset();
  resume_ = false;
  // Time spent paused is not training time.
  if (update_clock_) update_clock_ = std::chrono::steady_clock::now();
  changed();
}

void RunControl::set_pause_check(std::function<bool()> check, std::chrono::milliseconds slice) {
  std::lock_guard lock(mu_);
  pause_check_ = std::move(check);
  pause_check_slice_ = std::max(slice, std::chrono::milliseconds(1));
}

void RunControl::require_live() const {
  if (lost_)
    throw ControlError("the training loop was lost (" + lost_reason_ + "); restart the program to train again");
  if (finished_) throw ControlError("training has finished; the last captured batch stays available for inspection");
}

BatchPosition RunControl::reference() const {
  if (paused_at_) return *paused_at_;
  if (auto cur = schedule_.current()) return *cur;
  return BatchPosition{};
}

void RunControl::resume_with(Mode mode, std::unique_lock<std::mutex>& lock) {
  require_live();
  ref_ = reference();
  mode_ = mode;
  ++commands_;
  if (paused_at_) {
    // Running from now on: a wait_until_stopped() after this command must
    // wait for the next pause, not return on this one.
    paused_at_.reset();
    resume_ = true;
  }
  changed();
}

void RunControl::step_batch() {
  std::unique_lock lock(mu_);
  resume_with(Mode::kStepBatch, lock);
}

void RunControl::step_phase() {
  std::unique_lock lock(mu_);
  resume_with(Mode::kStepPhase, lock);
}

void RunControl::step_epoch() {
  std::unique_lock lock(mu_);
  resume_with(Mode::kStepEpoch, lock);
}

void RunControl::run() {
  std::unique_lock lock(mu_);
  resume_with(Mode::kRun, lock);
}

void RunControl::detach() {
  std::unique_lock lock(mu_);
  resume_with(Mode::kDetach, lock);
}

void RunControl::run_until(const BatchPosition& target) {
  std::unique_lock lock(mu_);
  require_live();
  auto order = schedule_.phase_order();
  if (!schedule_.phase_index(target.phase)) {
    std::string known;
    for (const auto& p : order) known += (known.empty() ? "" : ", ") + p;
    throw ControlError("unknown phase '" + target.phase + "'; known phases: " + (known.empty() ? "(none yet)" : known));
  }
  if (target.epoch < 0 || target.batch_idx < 0) throw ControlError("epoch and batch must not be negative");
  if (auto epochs = schedule_.epochs(); epochs && target.epoch >= *epochs) {
    throw ControlError("epoch " + std::to_string(target.epoch) + " is out of range: the run has " +
                       std::to_string(*epochs) + " epochs (0.." + std::to_string(*epochs - 1) + ")");
  }
  if (auto count = schedule_.phase_count(target.phase); count && target.batch_idx >= *count) {
    throw ControlError("batch " + std::to_string(target.batch_idx) + " is out of range: phase '" + target.phase +
                       "' has " + std::to_string(*count) + " batches (0.." + std::to_string(*count - 1) + ")");
  }
  BatchPosition ref = reference();
  if (!ref.phase.empty() && !schedule_.before(ref, target)) {
    throw ControlError("target " + target.to_string() + " is not after the current position " + ref.to_string() +
                       "; choose a later batch (time travel rewinds)");
  }
  target_ = schedule_.with_flags(target);
  resume_with(Mode::kRunUntil, lock);
}

void RunControl::pause() {
  std::lock_guard lock(mu_);
  if (finished_ || lost_ || paused_at_) return;
  mode_ = Mode::kStepBatch;
  target_.reset();
  ++commands_;
  changed();
}

void RunControl::refresh() {
  std::lock_guard lock(mu_);
  if (!finished_ && !lost_ && !paused_at_) snapshot_requested_ = true;
}

void RunControl::close() {
  std::lock_guard lock(mu_);
  finished_ = true;
  changed();
}

void RunControl::mark_lost(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (finished_ || lost_) return;
  lost_ = true;
  lost_reason_ = reason;
  changed();
}

void RunControl::post(std::function<void()> work) {
  std::lock_guard lock(mu_);
  require_live();
  work_.push_back(std::move(work));
  cv_.notify_all();
}

void RunControl::interrupt() {
  std::lock_guard lock(mu_);
  interrupted_ = true;
  // Running from now on, like a resume: a wait after this must wait for the
  // pause at the jump's target, not return on this one.
  paused_at_.reset();
  changed();
}

void RunControl::clear_interrupt() {
  std::lock_guard lock(mu_);
  interrupted_ = false;
}

bool RunControl::leave_requested() const {
  std::lock_guard lock(mu_);
  return resume_ || finished_ || lost_ || interrupted_;
}

RunState RunControl::state() const {
  std::lock_guard lock(mu_);
  if (lost_) return RunState::kLost;
  if (finished_) return RunState::kFinished;
  if (paused_at_) return RunState::kPaused;
  return RunState::kRunning;
}

Mode RunControl::mode() const {
  std::lock_guard lock(mu_);
  return mode_;
}

std::optional<BatchPosition> RunControl::paused_at() const {
  std::lock_guard lock(mu_);
  return paused_at_;
}

std::string RunControl::lost_reason() const {
  std::lock_guard lock(mu_);
  return lost_reason_;
}

void RunControl::changed() {
  ++version_;
  cv_.notify_all();
}

void RunControl::notify_changed() {
  std::lock_guard lock(mu_);
  changed();
}

uint64_t RunControl::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return version_ > seen; });
  return version_;
}

std::optional<std::chrono::system_clock::time_point> RunControl::paused_since() const {
  std::lock_guard lock(mu_);
  if (!paused_at_) return std::nullopt;
  return paused_since_;
}

int64_t RunControl::pause_count() const {
  std::lock_guard lock(mu_);
  return pauses_;
}

bool RunControl::wait_for_pause(int64_t after, std::optional<std::chrono::milliseconds> timeout) const {
  std::unique_lock lock(mu_);
  const auto done = [&] { return pauses_ > after || finished_ || lost_; };
  if (!timeout) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_for(lock, *timeout, done);
}

RunState RunControl::wait_until_stopped(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return paused_at_.has_value() || finished_ || lost_; });
  if (lost_) return RunState::kLost;
  if (finished_) return RunState::kFinished;
  return paused_at_ ? RunState::kPaused : RunState::kRunning;
}

}  // namespace nansense::detail
