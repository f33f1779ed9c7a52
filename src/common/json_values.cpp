#include "common/json_values.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "common/json_read.h"

namespace nansense::common {

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

json number(const std::optional<double>& v) { return v ? number(*v) : json(nullptr); }

json to_json(const BatchPosition& pos) {
  return {{"phase", pos.phase},
          {"epoch", pos.epoch},
          {"batch_idx", pos.batch_idx},
          {"is_last_in_phase", pos.is_last_in_phase},
          {"is_last_in_epoch", pos.is_last_in_epoch},
          {"is_last_in_run", pos.is_last_in_run},
          {"text", pos.to_string()}};
}

json to_json(const std::optional<BatchPosition>& pos) { return pos ? to_json(*pos) : json(nullptr); }

json to_json(const std::optional<TrainerStep>& step) {
  if (!step) return nullptr;
  return {{"global_step", step->global_step},
          {"micro_batches", step->micro_batches},
          {"micro_batch", step->micro_batch >= 0 ? json(step->micro_batch) : json(nullptr)}};
}

int64_t integer_value(const json& object, const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  if (!object.is_object()) throw std::invalid_argument("expected an object holding \"" + key + "\"");
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  const json& v = *it;
  bool ok = false;
  int64_t n = 0;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (ok) n = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    ok = true;
    n = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // 2^63 is the first double past int64_t's range.
    const double d = v.get<double>();
    ok = std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0;
    if (ok) n = static_cast<int64_t>(d);
  }
  if (!ok || n < min || n > max) {
    throw std::invalid_argument("\"" + key + "\" must be a whole number from " + std::to_string(min) + " to " +
                                std::to_string(max) + ", got " +
                                v.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return n;
}

}  // namespace nansense::common
