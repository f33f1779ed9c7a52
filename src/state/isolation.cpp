#include "state/isolation.h"

#include <iostream>

namespace nansense::state {

namespace {

torch::Tensor copy_of(const torch::Tensor& t) { return t.detach().clone(at::MemoryFormat::Preserve); }

}  // namespace

ModelIsolation::ModelIsolation(torch::nn::Module& model)
    : model_(model), rng_(RngState::capture()), grad_mode_(torch::GradMode::is_enabled()) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    SavedParameter s;
    s.value = {p, copy_of(p)};
    if (p.grad().defined()) s.grad = {p.grad(), copy_of(p.grad())};
    s.requires_grad = p.requires_grad();
    parameters_.push_back(std::move(s));
  }
  for (auto& b : model.buffers()) {
    if (b.defined()) buffers_.push_back({b, copy_of(b)});
  }
  root_training_ = model.is_training();
  for (const auto& m : model.modules(/*include_self=*/false)) training_.emplace_back(m, m->is_training());
  model.eval();
}

void ModelIsolation::reapply_training_flags() {
  // train() recurses: the root first, then every module in pre-order sets
  // its own flag after its parent's.
  model_.train(root_training_);
  for (auto& [m, training] : training_) m->train(training);
}

ModelIsolation::~ModelIsolation() {
  try {
    torch::NoGradGuard no_grad;
    for (auto& s : parameters_) {
      auto& p = s.value.tensor;
      p.detach().copy_(s.value.value);
      if (p.requires_grad() != s.requires_grad) p.requires_grad_(s.requires_grad);
      if (s.grad.tensor.defined()) {
        s.grad.tensor.detach().copy_(s.grad.value);
        p.mutable_grad() = s.grad.tensor;
      } else {
        p.mutable_grad().reset();
      }
    }
    for (auto& b : buffers_) b.tensor.detach().copy_(b.value);
    reapply_training_flags();
    rng_.apply();
    torch::GradMode::set_enabled(grad_mode_);
  } catch (const std::exception& e) {
    // A destructor must not throw; this cannot happen short of memory running out.
    std::cerr << "[nansense] restoring the model after isolated work failed: " << e.what() << "\n";
  }
}

torch::Device device_of(torch::nn::Module& model) {
  for (const auto& p : model.parameters()) return p.device();
  for (const auto& b : model.buffers()) return b.device();
  return torch::kCPU;
}

}  // namespace nansense::state
