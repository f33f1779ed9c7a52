// Every LibTorch call whose spelling or meaning differs between the LibTorch
// versions nansense supports (1.13 and 2.x) sits here, and only here. Checked
// against PyTorch's sources; what differs is said at each function. Nothing
// else in src/ tests TORCH_VERSION_*.
#pragma once

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/record_function.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/version.h>

#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

#if TORCH_VERSION_MAJOR < 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR < 13)
#error "nansense needs LibTorch 1.13 or later"
#endif

namespace nansense::compat {

// The version nansense was compiled against, "1.13.0".
inline std::string torch_version() { return TORCH_VERSION; }

// Optimizer::state() is keyed by the parameter's TensorImpl. Up to LibTorch
// 2.1 the key is that address as text (c10::guts::to_string of the pointer,
// i.e. what an ostream prints for it); from 2.2 (pytorch#108480, which also
// removed c10::guts::to_string) it is the address itself, a void*.
inline torch::optim::OptimizerParamState* optimizer_state(torch::optim::Optimizer& optimizer,
                                                          const torch::Tensor& parameter) {
  auto& states = optimizer.state();
  using Key = typename std::decay_t<decltype(states)>::key_type;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  static_assert(std::is_same_v<Key, void*>, "LibTorch >= 2.2 keys optimizer state by void*");
  auto it = states.find(static_cast<void*>(parameter.unsafeGetTensorImpl()));
#else
  static_assert(std::is_same_v<Key, std::string>, "LibTorch < 2.2 keys optimizer state by a string");
  std::ostringstream key;
  key << static_cast<const void*>(parameter.unsafeGetTensorImpl());
  auto it = states.find(key.str());
#endif
  return it == states.end() ? nullptr : it->second.get();
}

// LRScheduler keeps its step count in a protected `unsigned step_count_`
// (1.13 through 2.x) and offers no state dict; a pointer to member formed
// inside a derived class reaches it legally.
inline unsigned& lr_scheduler_step_count(torch::optim::LRScheduler& scheduler) {
  struct Access : torch::optim::LRScheduler {
    static unsigned& of(torch::optim::LRScheduler& s) { return s.*(&Access::step_count_); }
  };
  return Access::of(scheduler);
}

// The RecordFunction callback nansense's observer installs on the training
// thread: inputs and outputs recorded, ops and autograd nodes. The same API
// in 1.13 and 2.x (at::addThreadLocalCallback, RecordFunctionCallback's
// needsInputs/needsOutputs/scopes); 2.x adds kwinputs(), which nansense does
// not need. RecordFunction's layout depends on NDEBUG in both (inputs_valid_),
// hence the library's own NDEBUG (src/CMakeLists.txt).
inline at::CallbackHandle add_thread_local_observer(at::RecordFunctionCallback::StartCallback start,
                                                    at::RecordFunctionCallback::EndCallback end) {
  return at::addThreadLocalCallback(at::RecordFunctionCallback(start, end)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

// Generator state: get_state/set_state under the generator's mutex, the same
// in 1.13 and 2.x (2.x adds graph-safe variants for CUDA graphs, not used).
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
