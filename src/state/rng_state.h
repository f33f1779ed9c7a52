// The random number generators a replay depends on: the default CPU
// generator (dropout, torch::randperm in RandomSampler, torch::rand...) and
// each CUDA device's default generator when CUDA is present. The one place
// that touches generator internals (they differ across LibTorch versions).
#pragma once

#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace nansense::state {

struct RngState {
  torch::Tensor cpu;
  std::vector<torch::Tensor> cuda;  // one per device, in device order

  // The generators' states now. About 5 KB on CPU; the flight recorder
  // takes one per batch.
  static RngState capture();
  // Sets every generator to this state. Throws StateError when the CUDA
  // device count differs from the one it was captured with.
  void apply() const;

  void save(torch::serialize::OutputArchive& archive) const;
  static RngState load(torch::serialize::InputArchive& archive);
};

// How many CUDA generators capture() records (for the fingerprint).
int64_t cuda_generator_count();

}  // namespace nansense::state
