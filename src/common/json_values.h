// The JSON conventions every reply, message and file metadata shares: numbers
// rounded to 6 significant digits, non-finite numbers as strings, positions.
// The lowest internal layer: capture, numerics and the server all write these,
// so none of them has to include another's views.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "nansense/position.h"

namespace nansense::common {

using json = nlohmann::json;

// A finite number rounded to 6 significant digits; non-finite numbers as the
// strings "nan", "inf", "-inf" (JSON has no literal for them).
json number(double v);
// null when absent.
json number(const std::optional<double>& v);

// {"phase","epoch","batch_idx","is_last_in_phase","is_last_in_epoch",
//  "is_last_in_run","text"}; null when absent.
json to_json(const BatchPosition& pos);
json to_json(const std::optional<BatchPosition>& pos);
json to_json(const std::optional<TrainerStep>& step);  // null when none

}  // namespace nansense::common
