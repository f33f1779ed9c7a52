// Where a batch sits in the run, and how training proceeds after a resume.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nansense {

// The position record carried by snapshots and Session::live_position().
// epoch and batch_idx are 0-indexed. The is_last_* flags mark boundaries; they
// are best effort: in a lazy schedule they stay false until the phase's batch
// count has been learned (at the end of epoch 0).
struct BatchPosition {
  std::string phase;
  int64_t epoch = 0;
  int64_t batch_idx = 0;
  bool is_last_in_phase = false;
  bool is_last_in_epoch = false;
  bool is_last_in_run = false;

  // "epoch 1 | train batch 5" — the form used in error messages and logs.
  std::string to_string() const;
  // Same phase, epoch and batch index (the flags are derived, not compared).
  bool same_batch(const BatchPosition& other) const {
    return phase == other.phase && epoch == other.epoch && batch_idx == other.batch_idx;
  }
};

// A batch in a trainer's own words, where a trainer adapter drives the
// session (the Hugging Face Trainer's callback): one debugger batch is one
// optimizer step, which accumulates the gradients of micro_batches
// micro-batches (gradient accumulation). Plain loops have none.
struct TrainerStep {
  int64_t global_step = 0;    // its number, as the trainer's log counts it (state.global_step once it is done)
  int64_t micro_batches = 1;  // micro-batches the step accumulates
  int64_t micro_batch = -1;   // the one running, 0-based; -1 before the first and after the last
};

// How training proceeds after a resume. Each mode is named after the Session
// command that sets it, and maps to a UI control.
enum class Mode {
  kStepBatch,  // pause after every batch (Step Batch; the initial mode)
  kStepPhase,  // run to the first batch of the next phase (Step phase)
  kStepEpoch,  // run to the first batch of the next epoch (Step epoch)
  kRunUntil,   // run to an exact position (Step custom…)
  kRun,        // run to the last batch of the run (Run)
  kDetach,     // never pause again; capture cost drops to a flag check

  // The reference API's names for the same modes (its Mode.STEP, ...).
  kStep = kStepBatch,
  kUntilPhaseChange = kStepPhase,
  kUntilEpochChange = kStepEpoch,
  kUntilPosition = kRunUntil,
  kUntilEnd = kRun,
};

// "step_batch", "step_phase", "step_epoch", "run_until", "run", "detach".
std::string_view to_string(Mode mode);

}  // namespace nansense
