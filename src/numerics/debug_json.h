// JSON views of the debugger's values: one shape for REST, MCP, the push
// channel and the capsule's metadata.
#pragma once

#include <nlohmann/json.hpp>

#include "nansense/debug.h"

namespace nansense::numerics {

using json = nlohmann::json;

json to_json(const DebugSettings& settings);
// Reads what to_json(DebugSettings) wrote (a capsule's settings).
DebugSettings settings_from_json(const json& j);
json to_json(const OpReport& op);
json to_json(const RootCause& cause);
json to_json(const LayerReport& row);
json to_json(const DebugError& error);
json to_json(const LossScaleStatus& status);
// "NaN", "±Inf", "subnormal", "overflow".
std::string reason_label(const std::string& reason);
// "Numerical issue detected — NaN, ±Inf — at epoch 0 | train batch 3"
std::string headline(const DebugError& error);
// The band edges of each gradient dtype the error's layers name.
json bands_json(const DebugError& error);

}  // namespace nansense::numerics
