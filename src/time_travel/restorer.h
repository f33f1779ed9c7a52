// The session's time-travel engine: opens the cache for an epochs() loop,
// checkpoints each epoch start, validates and arms jumps requested from any
// thread, and restores the state on the training thread.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "nansense/time_travel.h"
#include "state/live_state.h"
#include "state/state_file.h"
#include "time_travel/checkpoint_store.h"

namespace torch::optim {
class LRScheduler;
}

namespace nansense::time_travel {

class TrainingRestorer {
 public:
  // Callbacks into run control. interrupt(): leave the current pause (and
  // skip new ones) so the training thread reaches the jump; called under the
  // restorer's lock, so it must not call back. clear_interrupt() undoes it.
  struct Host {
    std::function<void()> interrupt;
    std::function<void()> clear_interrupt;
    std::function<void()> changed;  // the status changed (push it)
  };

  // `optimizers`: every optimizer of the session, saved and restored in this
  // order. `scheduler` (may be null) is adapted unless an epochs() loop is
  // given its own adapter.
  TrainingRestorer(torch::nn::Module& model, std::vector<torch::optim::Optimizer*> optimizers,
                   torch::optim::LRScheduler* scheduler, Host host);
  // Waits for checkpoints still being put in place.
  ~TrainingRestorer();

  // --- training thread ---
  // Opens the cache for a loop of `epochs` and, when options.start_epoch > 0,
  // restores that checkpoint. Returns the first epoch to run. Throws
  // TimeTravelError when resuming is impossible (no such checkpoint, a
  // corrupted file, a cache for another model...). A folder that cannot be
  // created only disables time travel (see status()).
  int64_t open(int64_t epochs, const EpochOptions& options);
  // Checkpoints the state at the start of `epoch`. Failures (a full disk...)
  // are reported in the status and on stderr, never thrown.
  void save_epoch_start(int64_t epoch);
  // Fast check for the batch boundary: is a jump requested or under way?
  bool jump_armed() const { return armed_.load(std::memory_order_acquire); }
  // The jump to unwind with now, if any: a requested jump becomes the one in
  // flight (it stays in flight until complete_jump()).
  std::optional<int64_t> take_jump();
  bool jump_in_flight() const;
  // Restores the in-flight jump's checkpoint. Throws TimeTravelError.
  void restore_jump();
  // The in-flight jump is done: the loop is at its target.
  void complete_jump();
  // The loop ran its last epoch: returns false (and stays open) when a jump
  // arrived meanwhile, which the loop must carry out first.
  bool finish();
  // The loop left with an exception: no more jumps.
  void close();

  // --- any thread ---
  // Validates `epoch` (loop running, in range, cached, file intact and made
  // for this model) and arms the jump. Throws TimeTravelError.
  void request_jump(int64_t epoch);
  // Whether a loop is open.
  bool active() const;
  TimeTravelStatus status() const;
  // Per cached epoch, the checkpoint's size (GET /api/time_travel).
  std::map<int64_t, uint64_t> checkpoint_sizes() const;
  // Tests: the store of the open loop (null when none).
  CheckpointStore* store();

  // Training thread: the state a checkpoint holds (the model, every
  // optimizer, the schedule adapter in use).
  state::LiveState live() const;
  // Training thread: the schedule adapter in use (the epochs() loop's, else
  // the session scheduler's), null when there is none.
  SchedulerAdapter* scheduler() const { return adapter_.get(); }
  // Training thread, before an epochs() loop opens: the adapter used when
  // no loop gives its own (the Python optimizer's and scheduler's
  // state_dict(), which NaN capsules then hold too).
  void set_default_adapter(std::shared_ptr<SchedulerAdapter> adapter);

 private:
  struct Jump {
    int64_t epoch = 0;
    std::shared_ptr<const state::StateFile> file;  // validated when requested
  };
  // Reads and validates a checkpoint (checksums, kind, epoch, fingerprint).
  std::shared_ptr<const state::StateFile> load_validated(int64_t epoch);
  void restore_file(const state::StateFile& file, int64_t epoch);
  void report(const std::string& problem);
  // Expects mu_ held.
  void update_armed_locked();

  torch::nn::Module& model_;
  std::vector<torch::optim::Optimizer*> optimizers_;
  std::shared_ptr<SchedulerAdapter> default_adapter_;  // of the session's scheduler
  std::shared_ptr<SchedulerAdapter> adapter_;          // in use
  Host host_;

  mutable std::mutex mu_;
  bool active_ = false;
  bool ended_ = false;       // an epochs() loop opened and returned
  std::string unavailable_;  // why no jump is possible in an open loop
  int64_t epochs_ = 0;
  std::optional<int64_t> current_;
  std::string cache_dir_;
  std::optional<uint64_t> budget_;
  nlohmann::json fingerprint_;
  std::shared_ptr<CheckpointStore> store_;
  std::optional<Jump> pending_;
  std::optional<Jump> in_flight_;
  std::optional<int64_t> restored_epoch_;  // the state equals this epoch's file
  int64_t jumps_ = 0;
  std::string last_error_;
  std::atomic<bool> armed_{false};
};

}  // namespace nansense::time_travel
