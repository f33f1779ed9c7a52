#include "capture/snapshot_builder.h"

#include <ATen/record_function.h>

#include "capture/optimizer_state.h"

namespace nansense::capture {

std::shared_ptr<const BatchSnapshot> build_snapshot(const BatchPosition& position, uint64_t sequence,
                                                    TraceResult& trace, const torch::nn::Module& model,
                                                    const std::vector<torch::optim::Optimizer*>& optimizers) {
  at::DisableRecordFunctionGuard no_record;
  torch::NoGradGuard no_grad;
  auto snap = std::make_shared<BatchSnapshot>();
  snap->position = position;
  snap->sequence = sequence;
  snap->architecture = trace.architecture;
  snap->activations = trace.activations;
  {
    std::lock_guard lock(trace.grad_mu);
    snap->activation_gradients = trace.gradients;
  }
  for (const auto& p : model.named_parameters()) {
    const auto& w = p.value();
    snap->weights[p.key()] = w.detach().to(torch::kCPU, false, true);
    if (w.grad().defined()) snap->weight_gradients[p.key()] = w.grad().detach().to(torch::kCPU, false, true);
  }
  // Each parameter shows the optimizer that holds it (several: a GAN's two).
  for (auto* optimizer : optimizers) {
    auto view = read_optimizer(*optimizer, model);
    snap->optimizer_state.merge(view.state);
    snap->optimizer_hyperparams.merge(view.hyperparams);
  }
  snap->inputs = trace.inputs;
  return snap;
}

}  // namespace nansense::capture
