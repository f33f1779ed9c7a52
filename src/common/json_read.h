// Reading values out of descriptions that come from files (a capsule's or a
// checkpoint's meta): a file may hold anything, so a value is checked before
// it is converted (nlohmann's get<int64_t> of 1e300 is undefined behaviour).
// Defined in json_values.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace nansense::common {

// The integer `object[key]`: `fallback` when `object` has no `key`;
// std::invalid_argument naming the key when `object` is not an object or the
// value is not a whole number from `min` to `max`.
int64_t integer_value(const nlohmann::json& object, const std::string& key, int64_t fallback,
                      int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max());

}  // namespace nansense::common
