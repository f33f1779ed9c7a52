#include "time_travel/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <mutex>

namespace nansense::time_travel {

namespace {

torch::Tensor state_of(at::Generator gen) {
  std::lock_guard lock(gen.mutex());
  return gen.get_state();
}

void set_state_of(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

int64_t cuda_generator_count() {
  return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0;
}

void save_rng(torch::serialize::OutputArchive& archive) {
  archive.write("cpu", state_of(at::detail::getDefaultCPUGenerator()));
  const int64_t devices = cuda_generator_count();
  archive.write("cuda_count", torch::tensor(devices));
  for (int64_t i = 0; i < devices; ++i) {
    archive.write("cuda_" + std::to_string(i),
                  state_of(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)))));
  }
}

void restore_rng(torch::serialize::InputArchive& archive) {
  torch::Tensor cpu, count;
  archive.read("cpu", cpu);
  archive.read("cuda_count", count);
  const int64_t devices = count.item<int64_t>();
  if (devices != cuda_generator_count()) {
    throw std::runtime_error("the checkpoint holds " + std::to_string(devices) + " CUDA generator states, this process has " +
                             std::to_string(cuda_generator_count()) + " CUDA devices");
  }
  std::vector<torch::Tensor> cuda(static_cast<size_t>(devices));
  for (int64_t i = 0; i < devices; ++i) archive.read("cuda_" + std::to_string(i), cuda[static_cast<size_t>(i)]);
  set_state_of(at::detail::getDefaultCPUGenerator(), cpu);
  for (int64_t i = 0; i < devices; ++i) {
    set_state_of(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))),
                 cuda[static_cast<size_t>(i)]);
  }
}

}  // namespace nansense::time_travel
