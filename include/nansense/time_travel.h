// Time travel: the epoch loop that checkpoints every epoch start, so the UI
// can rewind a running loop to any cached epoch and replay it exactly.
//
//   session.epochs(10, [&](int64_t epoch) {
//     for (auto& batch : session.batches(*train_loader, "train")) { ... }
//     for (auto& batch : session.batches(*val_loader, "val")) { ... }
//     scheduler.step();
//   }, nansense::EpochOptions().cache_dir("runs/latest"));
//
// A jump abandons the rest of the current epoch's body: it unwinds from the
// batches() loop (at a batch boundary, or out of a pause) as a TimeTravelJump,
// which epochs() catches. Then the model's parameters and buffers, every
// optimizer (state and every param group's options, learning rate included),
// the scheduler and the RNG states are restored from the target epoch's
// checkpoint, the schedule's counters rewind, and the loop pauses on the
// target epoch's first batch.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nansense/errors.h"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize
namespace torch::optim {
class LRScheduler;
}  // namespace torch::optim

namespace nansense {

// A time-travel request or resume that cannot be honoured: no epoch loop, an
// epoch out of range or not cached, a checkpoint that is corrupted or was
// written for a different model, optimizer or scheduler. The message names
// what is wrong (for a cache mismatch: the first one found).
class TimeTravelError : public Error {
 public:
  using Error::Error;
};

// What a jump unwinds the epoch's body with. Deliberately not derived from
// std::exception, so `catch (const std::exception&)` in the body lets it pass.
// A body that needs `catch (...)` should rethrow it:
//   catch (const nansense::TimeTravelJump&) { throw; }
// (a swallowed jump is still honoured when the body returns).
class TimeTravelJump final {
 public:
  explicit TimeTravelJump(int64_t epoch) : epoch_(epoch) {}
  // The epoch the loop restarts at.
  int64_t epoch() const { return epoch_; }

 private:
  int64_t epoch_;
};

// Lets time travel save and restore a learning-rate schedule. LibTorch's
// schedulers keep no state dict, so nansense checkpoints what a schedule is
// made of: the optimizer's param-group options (the current learning rates;
// always restored with the optimizer) plus the adapter's own state, such as
// a step counter. Implement it for a scheduler of your own and pass it as
// EpochOptions().scheduler(...).
class SchedulerAdapter {
 public:
  virtual ~SchedulerAdapter() = default;
  // The schedule's type, e.g. "cosine". A cache written with another kind is
  // refused on resume.
  virtual std::string kind() const = 0;
  // Write / read back the schedule's own state (counters, last epoch...).
  // load() receives exactly what save() wrote.
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  virtual void load(torch::serialize::InputArchive& archive) = 0;
};

// The adapter for LibTorch's own schedulers (StepLR and any class derived
// from torch::optim::LRScheduler): it restores the scheduler's step count,
// which with the restored learning rates is all of its state. Used
// automatically for StartOptions().scheduler(&s). Kind: the scheduler's C++
// type name. The scheduler must outlive the adapter.
std::shared_ptr<SchedulerAdapter> adapt_scheduler(torch::optim::LRScheduler& scheduler);

// How Session::epochs() checkpoints and resumes.
struct EpochOptions {
  // Folder of the checkpoints, one file per epoch start (epoch_<n>.ckpt),
  // created when missing. Default ".nansense_cache". Cost: one checkpoint
  // written per epoch on the training thread (the model, buffers, optimizer
  // state and RNG; one copy to the CPU and one fsynced file). Files are written atomically (temp file, fsync,
  // rename, fsync of the folder) with a checksum per section, in the state
  // file format NaN capsules share, and checked before use. They outlive the
  // process: a later run can resume from them (start_epoch); files of an
  // older nansense format are skipped and reported, never read. A folder that
  // cannot be written disables time travel with the reason in the status;
  // training goes on.
  TORCH_ARG(std::string, cache_dir) = ".nansense_cache";
  // Resume: restore cache_dir's checkpoint of this epoch before the first
  // batch and run start_epoch .. n-1. The folder may come from another
  // process; its checkpoint is validated up front against the live model,
  // optimizers and scheduler (parameter and buffer names, shapes and dtypes;
  // the number and order of the optimizers, each one's kind and param-group
  // sizes; the scheduler's kind), and a mismatch throws TimeTravelError naming
  // the first difference. Default 0: train from scratch.
  TORCH_ARG(int64_t, start_epoch) = 0;
  // Most bytes the checkpoints may take on disk. When a new checkpoint goes
  // over it, the oldest are deleted first (oldest written), never epoch 0.
  // Default nullopt: no limit. A checkpoint is about the size of the model
  // plus the optimizer state.
  TORCH_ARG(std::optional<uint64_t>, cache_budget_bytes) = std::nullopt;
  // Saves and restores the LR schedule. Default: adapt_scheduler() of
  // StartOptions().scheduler() when one was given, else no schedule state.
  TORCH_ARG(std::shared_ptr<SchedulerAdapter>, scheduler) = nullptr;
};

// What the UI needs to offer a jump (Session::time_travel_status()).
struct TimeTravelStatus {
  // False outside session.epochs() (and once it returned); `reason` says why.
  bool available = false;
  std::string reason;
  // Epochs with a checkpoint in the cache folder, in range, ascending. Files
  // from an abandoned timeline (later epochs before a rewind) stay until
  // overwritten, and remain jump targets.
  std::vector<int64_t> cached_epochs;
  // The loop's epoch count n (0 outside epochs()).
  int64_t total_epochs = 0;
  // The epoch the loop is in.
  std::optional<int64_t> current_epoch;
  // A requested jump the training thread has not carried out yet.
  std::optional<int64_t> pending_epoch;
  // The cache folder (absolute), its budget and what the checkpoints take.
  std::string cache_dir;
  std::optional<uint64_t> budget_bytes;
  uint64_t bytes_used = 0;
  // Jumps carried out so far.
  int64_t jumps = 0;
  // The latest problem with the cache (a write that failed, a corrupted or
  // foreign file found), empty when none.
  std::string last_error;
};

}  // namespace nansense
