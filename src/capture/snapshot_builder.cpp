#include "capture/snapshot_builder.h"

#include <ATen/record_function.h>

#include "capture/optimizer_state.h"
#include "common/own_ops.h"

namespace nansense::capture {

std::shared_ptr<BatchSnapshot> build_snapshot(const BatchPosition& position, uint64_t sequence, TraceResult& trace,
                                              const torch::nn::Module& model,
                                              const std::vector<torch::optim::Optimizer*>& optimizers,
                                              const OptimizerReader& other_optimizers) {
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  auto snap = std::make_shared<BatchSnapshot>();
  snap->position = position;
  snap->sequence = sequence;
  snap->architecture = trace.architecture;
  {
    std::lock_guard lock(trace.grad_mu);
    snap->activations = trace.activations;
    snap->activation_gradients = trace.gradients;
    snap->inputs = trace.inputs;
    snap->activation_stats = trace.activation_stats;
    snap->activation_gradient_stats = trace.gradient_stats;
    snap->batch_size = trace.budget.batch_size;
    snap->samples_kept = trace.budget.kept;
    snap->budget_bytes = trace.budget.limit();
    snap->held_bytes = held_bytes(trace);
    snap->full_bytes = full_bytes(trace);
  }
  auto bytes = [](const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); };
  HostBuffers* buffers = trace.buffers.get();
  auto cpu = [&](const torch::Tensor& t) {
    return buffers ? buffers->copy(t) : t.detach().to(torch::kCPU, false, true);
  };
  for (const auto& p : model.named_parameters()) {
    const auto& w = p.value();
    snap->parameter_bytes += bytes(snap->weights[p.key()] = cpu(w));
    if (w.grad().defined()) snap->parameter_bytes += bytes(snap->weight_gradients[p.key()] = cpu(w.grad()));
  }
  // Each parameter shows the optimizer that holds it (several: a GAN's two).
  auto add = [&](OptimizerView view) {
    for (const auto& [_, state] : view.state) {
      for (const auto& [_, t] : state) snap->parameter_bytes += bytes(t);
    }
    snap->optimizer_state.merge(view.state);
    snap->optimizer_hyperparams.merge(view.hyperparams);
  };
  for (auto* optimizer : optimizers) add(read_optimizer(*optimizer, model, /*copy_to_cpu=*/true, buffers));
  if (other_optimizers) add(other_optimizers());
  return snap;
}

}  // namespace nansense::capture
