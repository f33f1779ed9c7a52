// Every LibTorch call whose spelling or meaning differs between the PyTorch
// versions nansense supports (2.2 and later; tested on 2.15) sits here, and
// only here. What differs is said at each function. Nothing else in src/
// tests TORCH_VERSION_*.
#pragma once

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/record_function.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/version.h>

#include <mutex>
#include <string>

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 2)
#error "nansense needs PyTorch (LibTorch) 2.2 or later"
#endif

namespace nansense::compat {

// The version nansense was compiled against, "2.15.0".
inline std::string torch_version() { return TORCH_VERSION; }

// Optimizer::state() is keyed by the parameter's TensorImpl: since LibTorch
// 2.2 (pytorch#108480) the address itself, a void* (before, its text).
inline torch::optim::OptimizerParamState* optimizer_state(torch::optim::Optimizer& optimizer,
                                                          const torch::Tensor& parameter) {
  auto& states = optimizer.state();
  auto it = states.find(static_cast<void*>(parameter.unsafeGetTensorImpl()));
  return it == states.end() ? nullptr : it->second.get();
}

// LRScheduler keeps its step count in a protected `unsigned step_count_`
// and offers no state dict; a pointer to member formed
// inside a derived class reaches it legally.
inline unsigned& lr_scheduler_step_count(torch::optim::LRScheduler& scheduler) {
  struct Access : torch::optim::LRScheduler {
    static unsigned& of(torch::optim::LRScheduler& s) { return s.*(&Access::step_count_); }
  };
  return Access::of(scheduler);
}

// The RecordFunction callback nansense's observer installs on the training
// thread: inputs and outputs recorded, ops and autograd nodes
// (at::addThreadLocalCallback, RecordFunctionCallback's needsInputs/
// needsOutputs/scopes; kwinputs() is not needed). RecordFunction's layout
// depends on NDEBUG (inputs_valid_), hence the library's own NDEBUG
// (src/CMakeLists.txt).
inline at::CallbackHandle add_thread_local_observer(at::RecordFunctionCallback::StartCallback start,
                                                    at::RecordFunctionCallback::EndCallback end) {
  return at::addThreadLocalCallback(at::RecordFunctionCallback(start, end)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

// Generator state: get_state/set_state under the generator's mutex (the
// graph-safe variants for CUDA graphs are not used).
inline torch::Tensor generator_state(at::Generator generator) {
  std::lock_guard lock(generator.mutex());
  return generator.get_state();
}
inline void set_generator_state(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard lock(generator.mutex());
  generator.set_state(state);
}
inline at::Generator default_cpu_generator() { return at::detail::getDefaultCPUGenerator(); }
inline at::Generator default_cuda_generator(int64_t device) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

}  // namespace nansense::compat
