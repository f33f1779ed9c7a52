// What a checkpoint holds and how it maps onto the live training objects:
// the model's parameters and buffers, the optimizer's state and param-group
// options, the schedule's state and the RNG states. Also the fingerprint
// (names, shapes, dtypes, kinds) a cache is validated against before use.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <string>

#include "nansense/time_travel.h"

namespace nansense::time_travel {

using json = nlohmann::json;

// The live objects; optimizer and scheduler may be null.
struct LiveState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  SchedulerAdapter* scheduler = nullptr;
};

// Names, shapes and dtypes of parameters and buffers; optimizer kind and
// param-group sizes; scheduler kind; CUDA generator count.
json fingerprint(const LiveState& live);

// The first difference between a checkpoint's fingerprint and the live one,
// said as a user would fix it; empty when they match.
std::string first_mismatch(const json& cached, const json& live);

// Training thread. Saving copies nothing: the archive references the tensors.
void save_state(const LiveState& live, torch::serialize::OutputArchive& archive);
// Reads everything first, then applies it, so a malformed archive throws
// (std::exception) before any live tensor changes.
void restore_state(const LiveState& live, torch::serialize::InputArchive& archive);

}  // namespace nansense::time_travel
