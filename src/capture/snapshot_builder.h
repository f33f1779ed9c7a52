// Assembles a BatchSnapshot at the end of a capture batch.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "capture/tracer.h"
#include "nansense/snapshot.h"

namespace nansense::capture {

// Copies weights, weight gradients and (when given) optimizer state to CPU and
// combines them with the trace. Runs on the training thread.
std::shared_ptr<const BatchSnapshot> build_snapshot(const BatchPosition& position, uint64_t sequence,
                                                    TraceResult& trace, const torch::nn::Module& model,
                                                    torch::optim::Optimizer* optimizer);

}  // namespace nansense::capture
