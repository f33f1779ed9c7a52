// JSON views of the engine's values, shared by every transport.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <optional>

#include "nansense/architecture.h"
#include "nansense/position.h"
#include "nansense/schedule.h"

namespace nansense::server {

using json = nlohmann::json;

// A finite number rounded to 6 significant digits; non-finite numbers as the
// strings "nan", "inf", "-inf" (JSON has no literal for them).
json number(double v);

json to_json(const BatchPosition& pos);
json to_json(const std::optional<BatchPosition>& pos);
json to_json(const Schedule& schedule);
json to_json(const Architecture& arch);
// shape, dtype, numel, min, max, mean over the finite values, non_finite count.
json tensor_summary(const torch::Tensor& t);

}  // namespace nansense::server
