// The live training objects a state is saved from and restored into.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <vector>

#include "nansense/time_travel.h"

namespace nansense::state {

struct LiveState {
  torch::nn::Module* model = nullptr;
  // Every optimizer of the session, in StartOptions().optimizers() order:
  // the order is part of the state (saved and checked by position).
  std::vector<torch::optim::Optimizer*> optimizers;
  // The LR schedule's adapter; null when the session has none.
  SchedulerAdapter* scheduler = nullptr;
};

// Which parts of a saved state a check or restore covers. The model, its
// buffers and the RNG states always are; a NaN capsule replayed without its
// optimizers (or scheduler) restores the rest and leaves those alone.
struct Parts {
  bool optimizers = true;
  bool scheduler = true;
};

}  // namespace nansense::state
