// The controller's numerical-debugging commands and queries
// (controller_debug.cpp): the checks' settings, the standing error and the
// held update.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"
#include "server/controller/replies.h"
#include "server/controller/replies_status.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

class DebugArea {
 public:
  explicit DebugArea(detail::SessionPort& session);

  // The checks' settings, the standing error (null when none: reasons,
  // position, per-layer fractions, band edges, root cause, capsule) and how
  // many batches were checked.
  DebugReport get_debug_report() const;
  // A partial update of the checks (DebugSettings' fields, same names);
  // absent fields keep their value. Returns get_debug_report().
  struct DebugChecksUpdate {
    std::optional<bool> enabled;
    std::optional<int64_t> interval_batches;
    std::optional<bool> check_nan_inf;
    std::optional<bool> check_under_over;
    std::optional<double> threshold_fraction;
    std::optional<int64_t> trace_interval_batches;
    std::optional<bool> rerun_to_trace;
    std::optional<std::vector<std::string>> allow;
  };
  DebugReport configure_debug_checks(const DebugChecksUpdate& update);
  // Turns a check category off ("nan_inf" or "under_over"; none = every
  // category of the standing error) and clears it from the standing error.
  DebugReport silence_debug_check(const std::optional<std::string>& category);
  // Dismisses the standing error, leaving the checks on.
  DebugReport clear_debug_error();
  // While the loop is paused before the optimizer step of a batch that
  // tripped: "skip" clears every parameter's gradient when the loop resumes
  // (its optimizer.step() then changes nothing), "apply" lets the update
  // through (the default). Conflict when no update is held.
  DebugReport choose_update(const std::string& action);
  // The `debug` field of the status: what a banner shows.
  DebugSummary summary() const;

 private:
  detail::SessionPort& session_;
};

}  // namespace nansense::server
