// Saving and restoring one training state: the model's parameters, buffers
// and train/eval mode; every optimizer's state and each param group's options
// (the learning rate a scheduler changed included), through LibTorch's own
// Optimizer::save/load, so SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS and any
// optimizer that implements them are covered; the LR schedule (through its
// SchedulerAdapter); and the CPU and CUDA RNG states. Both the epoch
// checkpoint and the NaN capsule are this state plus what is theirs.
//
// In a state file the state takes the sections "model", "optimizers",
// "scheduler" (only when there is one) and "rng", each a torch archive, and
// meta["fingerprint"] (see fingerprint.h).
#pragma once

#include <torch/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "state/live_state.h"
#include "state/rng_state.h"
#include "state/state_file.h"

namespace nansense::state {

// Values recorded earlier that a save takes instead of the live ones: the
// flight recorder keeps the buffers and RNG states of the batch start, so a
// NaN capsule holds the state its batch began from.
struct Recorded {
  // In model.named_buffers() order; an undefined tensor (or a missing one)
  // means the live value.
  std::vector<torch::Tensor> buffers;
  // Null: the generators' states now.
  const RngState* rng = nullptr;
};

// Training thread. Adds the state's sections and fingerprint to `file`. The
// tensors are serialised from the live objects straight into the sections'
// bytes, with no copy in between. Throws StateError (an optimizer or
// scheduler whose save fails, naming it).
void save_state(const LiveState& live, StateFile& file, const Recorded& recorded = {});

// The first mismatch between the state in `file` and `live` (see
// first_mismatch), or empty when it can be restored. `saved_in` names the
// file in the message ("the cache", "the capsule").
std::string check_state(const StateFile& file, const LiveState& live, std::string_view saved_in, Parts parts = {});

// Training thread. Checks `file` against `live`, reads every section, and
// only then writes into the live objects, so a mismatched or malformed state
// throws StateError with nothing changed. Parts left out are not touched.
void restore_state(const StateFile& file, const LiveState& live, Parts parts = {});

}  // namespace nansense::state
