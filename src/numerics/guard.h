// The guard's trigger: an autograd hook on every parameter; on an armed batch
// the first one to fire in a backward queues an engine callback that runs once
// that backward is complete — every .grad accumulated — and before the user's
// optimizer.step(). On CPU it runs on the thread that called backward(), so
// the session can pause right there with the weights still pre-step.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

namespace nansense::numerics {

class GradientGuard {
 public:
  // `on_backward_end` runs in the engine's final callback; it must not throw.
  // `after_others` runs where run_after_others() queues it; it must not throw.
  GradientGuard(const torch::nn::Module& model, std::function<void()> on_backward_end,
                std::function<void()> after_others = nullptr);
  // Removes the hooks; a callback already queued finds nothing to call.
  ~GradientGuard();
  GradientGuard(const GradientGuard&) = delete;
  GradientGuard& operator=(const GradientGuard&) = delete;

  // At the start of a batch: whether its backward is checked. Also forgets a
  // callback that a failed backward queued but never ran.
  void start_batch(bool armed) {
    link_->queued = false;
    link_->armed = armed;
  }
  // Mid-batch (while paused inside backward): a probe's backward must not check.
  void set_armed(bool armed) { link_->armed = armed; }
  bool armed() const { return link_->armed; }
  // From a hook that runs inside a backward before any parameter's: queues
  // this backward's check now, ahead of final callbacks queued after it
  // (DDP's first static-graph backward queues its gradient averaging from
  // the first node it runs). False when not armed, already queued, or no
  // backward is under way.
  bool queue_now();
  // From on_backward_end: runs `after_others` once every final callback
  // queued so far in this backward has run — DDP's, which waits for its
  // gradient all-reduces and writes the averaged gradients into .grad, is
  // queued when its last bucket is ready, after ours. False when no
  // backward is under way to queue it in.
  bool run_after_others();

 private:
  struct Link {
    std::atomic<bool> armed{false};
    std::atomic<bool> queued{false};
    std::atomic<bool> alive{true};
    std::function<void()> callback;
    std::function<void()> after_others;
  };
  static bool queue(const std::weak_ptr<Link>& weak);

  std::shared_ptr<Link> link_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace nansense::numerics
