// The random number generators a replay depends on: the default CPU
// generator (dropout, torch::randperm in RandomSampler, torch::rand...) and
// each CUDA device's default generator when CUDA is present. The one place
// that touches generator internals (they differ across LibTorch versions).
#pragma once

#include <torch/serialize/archive.h>

namespace nansense::time_travel {

void save_rng(torch::serialize::OutputArchive& archive);
// Throws std::runtime_error when the archive's CUDA generators do not match
// the devices present.
void restore_rng(torch::serialize::InputArchive& archive);
// How many CUDA generators save_rng() writes (for the cache fingerprint).
int64_t cuda_generator_count();

}  // namespace nansense::time_travel
