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
#include "time_travel/checkpoint_store.h"
#include "time_travel/training_state.h"

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

  TrainingRestorer(torch::nn::Module& model, torch::optim::Optimizer* optimizer,
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

 private:
  struct Jump {
    int64_t epoch = 0;
    std::shared_ptr<const CheckpointFile> file;  // validated when requested
  };
  LiveState live() const;
  // Reads and validates a checkpoint (checksum, meta, fingerprint).
  std::shared_ptr<const CheckpointFile> load_validated(int64_t epoch);
  void restore_file(const CheckpointFile& file, int64_t epoch);
  void report(const std::string& problem);
  // Expects mu_ held.
  void update_armed_locked();

  torch::nn::Module& model_;
  torch::optim::Optimizer* optimizer_;
  torch::optim::LRScheduler* scheduler_;
  std::shared_ptr<SchedulerAdapter> adapter_;
  Host host_;

  mutable std::mutex mu_;
  bool active_ = false;
  bool ended_ = false;  // an epochs() loop opened and returned
  std::string unavailable_;  // why no jump is possible in an open loop
  int64_t epochs_ = 0;
  std::optional<int64_t> current_;
  std::string cache_dir_;
  std::optional<uint64_t> budget_;
  json fingerprint_;
  std::shared_ptr<CheckpointStore> store_;
  std::optional<Jump> pending_;
  std::optional<Jump> in_flight_;
  std::optional<int64_t> restored_epoch_;  // the state equals this epoch's file
  int64_t jumps_ = 0;
  std::string last_error_;
  std::atomic<bool> armed_{false};
};

}  // namespace nansense::time_travel
