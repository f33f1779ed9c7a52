#include "numerics/guard.h"

#include <torch/csrc/autograd/engine.h>

namespace nansense::numerics {

GradientGuard::GradientGuard(const torch::nn::Module& model, std::function<void()> on_backward_end)
    : link_(std::make_shared<Link>()) {
  link_->callback = std::move(on_backward_end);
  for (const auto& p : model.parameters()) {
    // A frozen parameter gets no gradient and accepts no hook.
    if (!p.requires_grad()) continue;
    std::weak_ptr<Link> weak = link_;
    unsigned handle = p.register_hook([weak](const torch::Tensor&) {
      auto link = weak.lock();
      if (!link || !link->armed || link->queued.exchange(true)) return;
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
      }
    });
    hooks_.emplace_back(p, handle);
  }
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
