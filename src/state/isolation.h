// A guard that leaves the model exactly as it found it: work on the paused
// model (experiments, probes) runs inside one, and training, replays and
// time travel cannot tell it ran.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "state/rng_state.h"

namespace nansense::state {

// The device the model's first parameter (else buffer) lives on; the CPU for
// a model with neither.
torch::Device device_of(torch::nn::Module& model);

// On construction: saves every parameter's value, its gradient (or its
// absence), every buffer, every module's training flag and every RNG, then
// switches the model to eval mode. On destruction: puts each back bit for
// bit, into the same tensors (an optimizer's references stay valid), even
// when the guarded work threw. Costs one copy of the parameters, gradients
// and buffers.
class ModelIsolation {
 public:
  explicit ModelIsolation(torch::nn::Module& model);
  ~ModelIsolation();
  ModelIsolation(const ModelIsolation&) = delete;
  // Inside the guard: every module's training flag as it was saved (the
  // model as training left it, instead of eval mode).
  void reapply_training_flags();
  ModelIsolation& operator=(const ModelIsolation&) = delete;

 private:
  struct Saved {
    torch::Tensor tensor;  // the live tensor itself (same TensorImpl)
    torch::Tensor value;   // its contents when saved
  };
  struct SavedParameter {
    Saved value;
    Saved grad;  // tensor undefined: the parameter had no gradient
    bool requires_grad = false;
  };
  torch::nn::Module& model_;
  std::vector<SavedParameter> parameters_;
  std::vector<Saved> buffers_;
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> training_;  // pre-order
  bool root_training_ = false;
  RngState rng_;
  bool grad_mode_ = false;
};

}  // namespace nansense::state
