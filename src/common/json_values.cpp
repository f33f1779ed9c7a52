#include "common/json_values.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

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

}  // namespace nansense::common
