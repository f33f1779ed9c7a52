// Assembles a BatchSnapshot at the end of a capture batch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "capture/optimizer_state.h"
#include "capture/tracer.h"
#include "nansense/snapshot.h"

namespace nansense::capture {

// Copies weights, weight gradients and the optimizers' state to CPU and
// combines them with the trace. Runs on the training thread; the snapshot is
// still the caller's to complete (instrument outputs) before it publishes it.
std::shared_ptr<BatchSnapshot> build_snapshot(const BatchPosition& position, uint64_t sequence, TraceResult& trace,
                                              const torch::nn::Module& model,
                                              const std::vector<torch::optim::Optimizer*>& optimizers,
                                              const OptimizerReader& other_optimizers = {});

}  // namespace nansense::capture
