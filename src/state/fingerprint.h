// The one compatibility check between a saved training state and the live
// objects: a fingerprint (names, shapes and dtypes of parameters and buffers;
// each optimizer's kind and param-group sizes; the scheduler's kind; the CUDA
// generator count) saved with the state and compared before anything is
// restored, so a file for another model or optimizer is refused whole.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "state/live_state.h"

namespace nansense::state {

nlohmann::json fingerprint(const LiveState& live);

// The first difference between a saved fingerprint and the live one, said as
// a user would fix it ("parameter 'fc1.weight' has shape [16, 4] in the
// cache but [8, 4] in this model"), or empty when they match. `saved_in`
// names where the saved one comes from ("the cache", "the capsule").
// Parameters and buffers are matched by name (their order may differ);
// optimizers by position. A `saved` that is not an object (a file without
// one) is a mismatch too.
std::string first_mismatch(const nlohmann::json& saved, const nlohmann::json& live, std::string_view saved_in,
                           Parts parts = {});

// The optimizer's C++ type, e.g. "torch::optim::Adam".
std::string kind_of(const torch::optim::Optimizer& optimizer);

}  // namespace nansense::state
