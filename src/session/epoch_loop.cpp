// The time-travel epoch loop: Session::epochs() and the session's side of a
// jump (unwind at a batch boundary, restore, rewind the schedule, pause).
#include <algorithm>
#include <iostream>

#include "nansense/errors.h"
#include "nansense/session.h"
#include "session/session_core.h"

namespace nansense {

namespace detail {

std::unique_ptr<time_travel::TrainingRestorer> SessionCore::make_restorer(torch::optim::LRScheduler* scheduler) {
  time_travel::TrainingRestorer::Host host;
  host.interrupt = [this] { control_.interrupt(); };
  host.clear_interrupt = [this] { control_.clear_interrupt(); };
  host.changed = [this] { control_.notify_changed(); };
  return std::make_unique<time_travel::TrainingRestorer>(*model_, optimizers_, scheduler, std::move(host));
}

void SessionCore::throw_if_jump_due() {
  if (!loop_epoch_) return;
  if (auto target = restorer_->take_jump()) throw TimeTravelJump(*target);
}

void SessionCore::jump_to(int64_t epoch) {
  decision_ = {};
  repeat_batch_ = false;
  try {
    restorer_->restore_jump();
  } catch (const TimeTravelError& e) {
    mark_lost(std::string("time travel failed: ") + e.what());
    throw;
  }
  schedule_.rewind_to_epoch(epoch);
  loop_epoch_ = epoch;
  // Statistics of the abandoned timeline's epochs go with it.
  stats_->rewind(epoch);
  // The standing numerical error belongs to the abandoned timeline.
  debug().clear();
  // Pause on the target epoch's first batch, whatever the mode was.
  control_.pause();
  restorer_->complete_jump();
}

int64_t SessionCore::open_epochs(int64_t n, const EpochOptions& options) {
  if (closed_) throw UsageError("epochs() was called after session.close()");
  if (n < 1) throw UsageError("epochs(n) needs n >= 1, got " + std::to_string(n));
  if (restorer_->active()) throw UsageError("epochs() is already running: epoch loops do not nest");
  schedule_.set_epochs(n);
  loop_epochs_ = n;
  // In a distributed run each rank checkpoints to its own rank_<r> folder.
  return restorer_->open(n, options_for_rank(options));
}

void SessionCore::start_epoch(int64_t epoch) {
  loop_epoch_ = epoch;
  restorer_->save_epoch_start(epoch);
}

std::optional<int64_t> SessionCore::end_epoch(int64_t epoch, std::optional<int64_t> target) {
  if (!target && !jumps_held_ && restorer_->jump_armed()) {
    if (restorer_->jump_in_flight()) {
      std::cerr << "[nansense] a catch (...) in the epoch body swallowed a time-travel jump; it is carried "
                   "out now (rethrow nansense::TimeTravelJump to leave the body at once)\n";
    }
    // Requested after the epoch's last batch boundary: nothing of it is left to abandon.
    target = restorer_->take_jump();
  }
  int64_t next = epoch + 1;
  if (target) {
    jump_to(*target);
    next = *target;
  }
  while (next >= loop_epochs_) {
    if (restorer_->finish()) {
      loop_epoch_.reset();
      return std::nullopt;
    }
    // A jump arrived as the last epoch ended.
    next = restorer_->take_jump().value_or(loop_epochs_);
    if (next < loop_epochs_) jump_to(next);
  }
  return next;
}

void SessionCore::raise_armed_jump() {
  if (restorer_->jump_armed()) throw_if_jump_due();
}

bool SessionCore::runs_through_next_boundary() const {
  if (decision_.pause_after || numerics_->can_stop_batch() || restorer_->jump_armed()) return false;
  if (replaying_ || moment_now_ || repeat_batch_) return false;
  // A jump that comes in an epoch's last batch is carried out at end_epoch:
  // in the last epoch it would have no next batch boundary to wait for.
  if (loop_epoch_ && *loop_epoch_ + 1 >= loop_epochs_) return false;
  return control_.state() == RunState::kRunning;
}

bool SessionCore::checks_can_pause() const { return numerics_->can_pause_batches(); }

void SessionCore::abort_epochs() {
  loop_epoch_.reset();
  restorer_->close();
}

void SessionCore::run_epochs(int64_t n, const std::function<void(int64_t)>& body, const EpochOptions& options) {
  if (!body) throw UsageError("epochs(n, body) needs a body");
  std::optional<int64_t> epoch = open_epochs(n, options);
  try {
    while (epoch) {
      start_epoch(*epoch);
      std::optional<int64_t> target;
      try {
        body(*epoch);
      } catch (const TimeTravelJump& jump) {
        target = jump.epoch();
      }
      epoch = end_epoch(*epoch, target);
    }
  } catch (...) {
    abort_epochs();
    throw;
  }
}

void SessionCore::request_time_travel(int64_t epoch) {
  const auto state = control_.state();
  if (state == RunState::kFinished) {
    throw TimeTravelError("training has finished: there is no loop left to rewind");
  }
  if (state == RunState::kLost) {
    throw TimeTravelError("the training loop was lost (" + control_.lost_reason() + "): there is no loop to rewind");
  }
  {
    std::lock_guard lock(peers_mu_);
    for (const auto& [rank, has] : peer_checkpoints_) {
      const auto& [epochs, where] = has;
      if (std::find(epochs.begin(), epochs.end(), epoch) != epochs.end()) continue;
      std::string held;
      for (auto e : epochs) held += (held.empty() ? "" : ", ") + std::to_string(e);
      throw TimeTravelError("rank " + std::to_string(rank) + " has no checkpoint of epoch " + std::to_string(epoch) +
                            " in " + where + " (it has " + (held.empty() ? std::string("none") : "epochs " + held) +
                            "): every rank rewinds together, so the jump is refused for all");
    }
  }
  restorer_->request_jump(epoch);
}

void SessionCore::set_peer_checkpoints(int rank, std::vector<int64_t> epochs, std::string where) {
  std::lock_guard lock(peers_mu_);
  peer_checkpoints_[rank] = {std::move(epochs), std::move(where)};
}

}  // namespace detail

void Session::epochs(int64_t n, std::function<void(int64_t epoch)> body, EpochOptions options) {
  if (core_) {
    core_->run_epochs(n, body, options);
    return;
  }
  for (int64_t epoch = 0; epoch < n; ++epoch) body(epoch);
}

TimeTravelStatus Session::time_travel_status() const {
  if (core_) return core_->restorer().status();
  TimeTravelStatus status;
  status.reason = "nansense is disabled in this session";
  return status;
}

void Session::request_time_travel(int64_t epoch) {
  if (!core_) throw TimeTravelError("nansense is disabled in this session: there is nothing to rewind");
  if (core_->locked()) {
    throw TimeTravelError("this session is locked (a shared demo): time travel is refused");
  }
  core_->request_time_travel(epoch);
}

}  // namespace nansense
