#include "numerics/guard.h"

#include <torch/csrc/autograd/engine.h>

namespace nansense::numerics {

GradientGuard::GradientGuard(const torch::nn::Module& model, std::function<void()> on_backward_end,
                             std::function<void()> after_others)
    : link_(std::make_shared<Link>()) {
  link_->callback = std::move(on_backward_end);
  link_->after_others = std::move(after_others);
  for (const auto& p : model.parameters()) {
    // A frozen parameter gets no gradient and accepts no hook.
    if (!p.requires_grad()) continue;
    std::weak_ptr<Link> weak = link_;
    unsigned handle = p.register_hook([weak](const torch::Tensor&) { queue(weak); });
    hooks_.emplace_back(p, handle);
  }
}

bool GradientGuard::queue(const std::weak_ptr<Link>& weak) {
  auto link = weak.lock();
  if (!link || !link->armed || link->queued.exchange(true)) return false;
  try {
    torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      auto link = weak.lock();
      if (!link) return;
      link->queued = false;
      if (link->alive && link->armed) link->callback();
    });
  } catch (...) {
    // Not inside an engine task (a hook run by hand): nothing to check.
    link->queued = false;
    return false;
  }
  return true;
}

bool GradientGuard::queue_now() { return queue(link_); }

bool GradientGuard::run_after_others() {
  if (!link_->after_others) return false;
  std::weak_ptr<Link> weak = link_;
  try {
    // Final callbacks may queue more: the engine runs them after the rest.
    torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      auto link = weak.lock();
      if (link && link->alive && link->armed) link->after_others();
    });
  } catch (...) {
    return false;
  }
  return true;
}

GradientGuard::~GradientGuard() {
  link_->alive = false;
  for (auto& [p, handle] : hooks_) {
    try {
      p.remove_hook(handle);
    } catch (...) {
    }
  }
}

}  // namespace nansense::numerics
