// JSON views of the engine's values that only the transports show (the
// conventions every part shares are in common/json_values.h).
#pragma once

#include "common/json_values.h"
#include "nansense/architecture.h"
#include "nansense/schedule.h"

namespace nansense::server {

using common::json;
using common::number;
using common::to_json;

json to_json(const Schedule& schedule);
json to_json(const Architecture& arch);

}  // namespace nansense::server
