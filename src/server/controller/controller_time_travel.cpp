// The time-travel queries: what the Time Travel button and dialog show.
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

TimeTravelSummary RunArea::time_travel_summary() const {
  const auto s = session_.time_travel_status();
  TimeTravelSummary out;
  out.available = s.available;
  if (!s.available) out.reason = s.reason;
  out.cached_epochs = s.cached_epochs;
  out.total_epochs = s.total_epochs;
  out.current_epoch = s.current_epoch;
  out.pending_epoch = s.pending_epoch;
  return out;
}

TimeTravelReport RunArea::get_time_travel_status() const {
  const auto s = session_.time_travel_status();
  TimeTravelReport out;
  static_cast<TimeTravelSummary&>(out) = time_travel_summary();
  for (int64_t e = 0, i = 0; e < s.total_epochs; ++e) {
    while (i < static_cast<int64_t>(s.cached_epochs.size()) && s.cached_epochs[static_cast<size_t>(i)] < e) ++i;
    if (i >= static_cast<int64_t>(s.cached_epochs.size()) || s.cached_epochs[static_cast<size_t>(i)] != e) {
      out.uncached_epochs.push_back(e);
    }
  }
  for (const auto& [epoch, bytes] : session_.checkpoint_sizes()) {
    if (epoch < s.total_epochs) out.checkpoints.push_back({epoch, bytes});
  }
  if (!s.cache_dir.empty()) out.cache_dir = s.cache_dir;
  out.budget_bytes = s.budget_bytes;
  out.bytes_used = s.bytes_used;
  out.jumps = s.jumps;
  if (!s.last_error.empty()) out.last_error = s.last_error;
  out.hint = s.available ? "an epoch becomes a jump target once training has passed its start; a jump pauses on "
                           "the target epoch's first batch"
                         : s.reason;
  return out;
}

}  // namespace nansense::server
