// Reads LibTorch optimizers' per-parameter state and hyperparameters.
// The one place that knows the optimizer classes' internals (they change
// between LibTorch versions).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>

namespace nansense::capture {

class HostBuffers;

struct OptimizerView {
  // parameter name -> state key -> tensor, a CPU copy unless read live
  // (scalars as 0-dim tensors)
  std::map<std::string, std::map<std::string, torch::Tensor>> state;
  // parameter name -> hyperparameter -> value
  std::map<std::string, std::map<std::string, double>> hyperparams;
};

// Reads SGD, Adam, AdamW, RMSprop and Adagrad; for another optimizer the
// state is empty and only the learning rate is reported. `copy_to_cpu`
// false hands out the optimizer's own (live, on-device) state tensors, for
// the training thread's instruments only. The copies go into `buffers`'
// recycled memory where given.
OptimizerView read_optimizer(torch::optim::Optimizer& optimizer, const torch::nn::Module& model,
                             bool copy_to_cpu = true, HostBuffers* buffers = nullptr);

// The state of an optimizer that is not a torch::optim::Optimizer (a Python
// one, read by the Python package), keyed by the model's parameter names as
// OptimizerView is. Called on the training thread at each snapshot.
using OptimizerReader = std::function<OptimizerView()>;

}  // namespace nansense::capture
