// The time-travel queries: what the Time Travel button and dialog show.
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

json optional_number(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json RunArea::time_travel_summary() const {
  const auto s = session_.time_travel_status();
  json out = {{"available", s.available},
              {"cached_epochs", s.cached_epochs},
              {"total_epochs", s.total_epochs},
              {"current_epoch", optional_number(s.current_epoch)},
              {"pending_epoch", optional_number(s.pending_epoch)}};
  if (!s.available) out["reason"] = s.reason;
  return out;
}

json RunArea::get_time_travel_status() const {
  const auto s = session_.time_travel_status();
  json out = time_travel_summary();
  json uncached = json::array();
  for (int64_t e = 0, i = 0; e < s.total_epochs; ++e) {
    while (i < static_cast<int64_t>(s.cached_epochs.size()) && s.cached_epochs[static_cast<size_t>(i)] < e) ++i;
    if (i >= static_cast<int64_t>(s.cached_epochs.size()) || s.cached_epochs[static_cast<size_t>(i)] != e) {
      uncached.push_back(e);
    }
  }
  json checkpoints = json::array();
  for (const auto& [epoch, bytes] : session_.checkpoint_sizes()) {
    if (epoch < s.total_epochs) checkpoints.push_back({{"epoch", epoch}, {"bytes", bytes}});
  }
  out["uncached_epochs"] = uncached;
  out["checkpoints"] = checkpoints;
  out["cache_dir"] = s.cache_dir.empty() ? json(nullptr) : json(s.cache_dir);
  out["budget_bytes"] = s.budget_bytes ? json(*s.budget_bytes) : json(nullptr);
  out["bytes_used"] = s.bytes_used;
  out["jumps"] = s.jumps;
  out["last_error"] = s.last_error.empty() ? json(nullptr) : json(s.last_error);
  out["hint"] = s.available ? "an epoch becomes a jump target once training has passed its start; a jump pauses on "
                              "the target epoch's first batch"
                            : s.reason;
  return out;
}

}  // namespace nansense::server
