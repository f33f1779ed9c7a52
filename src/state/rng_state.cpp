#include "state/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/record_function.h>

#include <mutex>
#include <string>

#include "common/own_ops.h"
#include "common/torch_compat.h"
#include "state/state_error.h"

namespace nansense::state {

namespace {

using compat::default_cpu_generator;
using compat::default_cuda_generator;
using compat::generator_state;
using compat::set_generator_state;

}  // namespace

int64_t cuda_generator_count() { return at::hasCUDA() ? static_cast<int64_t>(at::getNumGPUs()) : 0; }

RngState RngState::capture() {
  // Reading a state clones a tensor: not an op of the user's batch.
  common::OwnOps own_ops;
  RngState s;
  s.cpu = generator_state(default_cpu_generator());
  const int64_t devices = cuda_generator_count();
  for (int64_t i = 0; i < devices; ++i) s.cuda.push_back(generator_state(default_cuda_generator(i)));
  return s;
}

void RngState::apply() const {
  const auto devices = static_cast<int64_t>(cuda.size());
  if (devices != cuda_generator_count()) {
    throw StateError("the state holds " + std::to_string(devices) + " CUDA generator states, this process has " +
                     std::to_string(cuda_generator_count()) + " CUDA devices");
  }
  common::OwnOps own_ops;
  set_generator_state(default_cpu_generator(), cpu);
  for (int64_t i = 0; i < devices; ++i) set_generator_state(default_cuda_generator(i), cuda[static_cast<size_t>(i)]);
}

void RngState::save(torch::serialize::OutputArchive& archive) const {
  archive.write("cpu", cpu);
  archive.write("cuda_count", torch::tensor(static_cast<int64_t>(cuda.size())));
  for (size_t i = 0; i < cuda.size(); ++i) archive.write("cuda_" + std::to_string(i), cuda[i]);
}

RngState RngState::load(torch::serialize::InputArchive& archive) {
  RngState s;
  torch::Tensor count;
  archive.read("cpu", s.cpu);
  archive.read("cuda_count", count);
  s.cuda.resize(static_cast<size_t>(count.item<int64_t>()));
  for (size_t i = 0; i < s.cuda.size(); ++i) archive.read("cuda_" + std::to_string(i), s.cuda[i]);
  return s;
}

}  // namespace nansense::state
