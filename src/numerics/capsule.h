// The NaN capsule: everything needed to run the batch that went non-finite
// again, bit for bit. It is the training state the batch began from (the
// state layer's model, optimizers, scheduler and RNG sections, with the
// flight recorder's batch-start buffers and RNG) plus the batch, the
// gradients the guard saw, which parameters held a gradient, and the error,
// settings and position — a state file of kind "nan-capsule" (see
// state/state_file.h for the format, its checksums and old-format refusal).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "nansense/debug.h"
#include "state/live_state.h"
#include "state/rng_state.h"
#include "state/state_file.h"

namespace nansense::numerics {

// What the flight recorder and the monitor hand over at a trip, before the
// optimizer step.
struct CapsuleInput {
  state::LiveState live;
  BatchPosition position;
  DebugSettings settings;
  nlohmann::json error;                // the DebugError as JSON
  std::vector<torch::Tensor> buffers;  // batch-start values, model.named_buffers() order
  std::vector<bool> grad_defined;      // per parameter, at the start of the batch
  std::vector<torch::Tensor> batch;    // ItemTensors of the batch item
  state::RngState rng;                 // at the start of the batch
  std::vector<std::string> notes;
};

// Serialises the capsule (the parameters and optimizer state are read now).
// Throws state::StateError.
state::StateFile make_capsule(const CapsuleInput& input);

// "<dir>/nan-epoch0-train-batch57.capsule", creating `dir`.
std::string capsule_path(const std::string& dir, const BatchPosition& position);

// Reads and verifies the capsule at `path` (checksums, format, kind). Throws
// CapsuleError.
state::StateFile read_capsule(const std::string& path);

// Checks the capsule against `live` (the parts asked for), then restores its
// training state and each parameter's gradient presence. Throws CapsuleError
// naming the first mismatch; nothing is changed then.
void restore_capsule(const state::StateFile& capsule, const state::LiveState& live, state::Parts parts = {});

// nansense::replay_capsule over a whole live state: a host language's own
// optimizer state (Python's state_dict()) rides in `live.scheduler`, an
// adapter, restored when parts.scheduler says so.
Capsule replay_into(const std::string& path, const state::LiveState& live, state::Parts parts);

// The capsule's own parts, on the CPU. Throw CapsuleError.
std::vector<torch::Tensor> capsule_batch(const state::StateFile& capsule);
std::map<std::string, torch::Tensor> capsule_gradients(const state::StateFile& capsule);

}  // namespace nansense::numerics
