// Probes: the paused model re-run on chosen inputs, forward only, so a user
// can ask "what if" without touching training. Three settings, shared by
// every visitor: a pinned batch (its inputs re-run at every later capture,
// across steps and time travel), a forward mode (the model's own training
// flags, eval or train) and perturbations of input values. While any is set
// the probe is active: it runs on the training thread in the pause loop and
// again after every captured batch, each run isolated (state/isolation.h),
// so training, replays and time travel cannot tell it ran. With
// perturbations a run makes two forwards from the same RNG state, and its
// result holds the difference perturbed - unperturbed.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/engine.h"
#include "nansense/position.h"
#include "nansense/snapshot.h"

namespace nansense::experiments {

enum class ProbeMode {
  kUnchanged,  // each module's training flag as training left it
  kEval,       // the whole model in eval mode
  kTrain,      // the whole model in train mode (BatchNorm's batch statistics, dropout)
};
const char* probe_mode_name(ProbeMode mode);  // "unchanged", "eval", "train"
std::optional<ProbeMode> parse_probe_mode(std::string_view name);

// One input value changed before the forward.
struct Perturbation {
  int64_t input = 0;   // which model input, in input-layer order
  int64_t sample = 0;  // which sample of the batch
  // [y, x] of an image input ([N,C,H,W] or [N,H,W]); [feature] of a flat
  // input ([N,F]).
  std::vector<int64_t> index;
  // The new values, in the input's own units (after any normalisation): one
  // per channel at [y, x] of an [N,C,H,W] input, or one for every channel;
  // one for an [N,H,W] or flat input.
  std::vector<double> values;
};

struct ProbeSettings {
  bool pinned = false;
  std::optional<BatchPosition> pinned_position;
  ProbeMode mode = ProbeMode::kUnchanged;
  std::vector<Perturbation> perturbations;

  bool active() const { return pinned || mode != ProbeMode::kUnchanged || !perturbations.empty(); }
};

// One completed run, immutable once published.
struct ProbeResult {
  uint64_t run = 0;                // 1, 2, ...: runs completed when it was published
  ProbeSettings settings;          // what it ran with
  BatchPosition position;          // the batch whose inputs it re-ran (pinned or current)
  uint64_t snapshot_sequence = 0;  // the live snapshot current when it ran
  // Activations are perturbed - unperturbed (perturbations were set).
  bool diff = false;
  int64_t perturbations_applied = 0;
  // Activations (or their differences) per layer, the inputs it ran on
  // (perturbed, not differences) and the live snapshot's weights; no
  // gradients (a probe runs no backward). Null when the run failed.
  std::shared_ptr<const BatchSnapshot> view;
  std::string error;  // why the run failed ("" when it did not)
};

class Probes {
 public:
  struct Host {
    std::function<std::shared_ptr<const BatchSnapshot>()> snapshot;
    // Paused in the pause loop now.
    std::function<bool()> paused;
    // Paused inside a traced batch (see Engine::Host::in_batch_pause).
    std::function<bool()> in_batch_pause;
    // Training finished or lost ("" while live).
    std::function<std::string()> ended;
    // Queues work for the training thread's pause loop.
    std::function<void(std::function<void()>)> post;
    // The settings or the result changed (wakes the push channel's watchers).
    std::function<void()> changed;
    // The model's forward (Session::set_forward); empty when none is set.
    std::function<ForwardFn()> forward;
    // A fresh snapshot sequence number (shared with the captures).
    std::function<uint64_t()> next_sequence;
    // Shows `view` where the live snapshot is shown; null: the live snapshot
    // again. Called with the probes' lock held, in the order of the changes.
    std::function<void(std::shared_ptr<const BatchSnapshot>)> show;
  };

  Probes(torch::nn::Module& model, Host host);

  // --- any thread. A change that leaves the probe active queues a run in
  // the pause loop. Refused(kConflict): the loop runs, or has ended, or
  // nothing was captured yet; Refused(kInvalid): the change does not fit. ---

  // Pins the last captured batch's inputs; returns its position.
  BatchPosition pin();
  // False when nothing was pinned.
  bool unpin();
  void set_mode(ProbeMode mode);
  // Checked against the inputs the probe runs on (the pinned batch, else the
  // last captured one); a perturbation of the same value replaces it.
  void add_perturbation(const Perturbation& p);
  // How many were cleared.
  int64_t clear_perturbations();

  ProbeSettings settings() const;
  // The newest run's result while the probe is active; null otherwise (or
  // before its first run).
  std::shared_ptr<const ProbeResult> result() const;
  uint64_t runs_completed() const;
  // Whether a run is queued or running.
  bool pending() const;
  // Blocks until a run newer than `run` is published or the timeout passes;
  // the newest result then (null if none).
  std::shared_ptr<const ProbeResult> wait_for_run_after(uint64_t run, std::chrono::milliseconds timeout) const;
  // Each settings change asks for a run and numbers it: the generation after
  // a change. wait_for_settings returns once a run that began with those
  // settings (or later ones) has finished, the probe is inactive, or
  // `timeout` passed: a run already under way when the change came does not
  // count.
  uint64_t settings_generation() const;
  std::shared_ptr<const ProbeResult> wait_for_settings(uint64_t generation, std::chrono::milliseconds timeout) const;
  // Counts every change of settings or result (for a change feed).
  uint64_t version() const;

  // --- training thread ---
  // After a captured batch's snapshot is published (no batch traced now):
  // re-runs an active probe on it.
  void snapshot_published();
  // Runs the probe now when active (the pause loop's work).
  void run_now();
  // The session closed: waiters wake.
  void close();

 private:
  // mu_ held: the inputs a run would use (pinned, else the snapshot's).
  std::vector<torch::Tensor> base_inputs_locked(const BatchSnapshot* snap) const;
  // Refuses a change while the loop is not paused between batches.
  void require_pause(const char* what) const;
  // mu_ held: a run queued for the pause loop (unless one already is).
  void request_run_locked();
  // `generation`: the settings generation the run copied.
  void publish(std::shared_ptr<const ProbeResult> result, uint64_t generation);
  void mark_changed_locked();
  // mu_ held: the probe became inactive; the live snapshot is shown again.
  void deactivated_locked();

  torch::nn::Module& model_;
  Host host_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  ProbeSettings settings_;
  std::vector<torch::Tensor> pinned_inputs_;
  uint64_t pinned_sequence_ = 0;
  std::shared_ptr<const ProbeResult> result_;
  uint64_t runs_ = 0;
  uint64_t version_ = 0;
  bool queued_ = false;
  bool running_ = false;
  uint64_t settings_generation_ = 0;  // one per requested run
  uint64_t done_generation_ = 0;      // the newest a finished run began with
  bool showing_ = false;              // a probe view is shown instead of the live snapshot
  bool closed_ = false;
};

// Throws std::invalid_argument saying what of `p` does not fit `inputs`.
void check_perturbation(const Perturbation& p, const std::vector<torch::Tensor>& inputs);
// `inputs` with the perturbations that fit them applied (copies of the
// tensors they change). One that does not fit (a sample the ragged last
// batch lacks) is skipped, not an error; `applied` counts those applied.
std::vector<torch::Tensor> perturbed(const std::vector<torch::Tensor>& inputs,
                                     const std::vector<Perturbation>& perturbations, int64_t* applied = nullptr);

}  // namespace nansense::experiments
