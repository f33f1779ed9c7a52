// The controller's numerical-debugging commands and queries: every transport
// (REST, MCP, the push channel's status) goes through these.
#include <stdexcept>

#include "numerics/debug_json.h"
#include "server/controller.h"
#include "session/session_core.h"

namespace nansense::server {

json Controller::debug_summary() const {
  const auto& debug = core_.debug();
  const auto settings = debug.settings();
  json checks = json::array();
  if (settings.enabled() && settings.check_nan_inf()) checks.push_back(numerics::kNanInf);
  if (settings.enabled() && settings.check_under_over()) checks.push_back(numerics::kUnderOver);
  json summary = {{"enabled", settings.enabled()}, {"checks", checks}, {"error", nullptr}};
  if (auto error = debug.error()) {
    json producer = nullptr;
    if (error->root_cause && error->root_cause->producer) {
      const auto& p = *error->root_cause->producer;
      producer = {{"op", p.op}, {"pass", p.pass}, {"layer", p.layer ? json(*p.layer) : json(nullptr)}};
    }
    json layers = json::array();
    for (const auto& row : error->layers) layers.push_back(row.layer);
    json labels = json::array();
    for (const auto& r : error->reasons) labels.push_back(numerics::reason_label(r));
    summary["error"] = {{"reasons", error->reasons},
                        {"reason_labels", labels},
                        {"position", to_json(error->position)},
                        {"text", numerics::headline(*error)},
                        {"layers", layers},
                        {"root_cause_status", error->root_cause
                                                  ? json(std::string(to_string(error->root_cause->status)))
                                                  : json(nullptr)},
                        {"producer", producer},
                        {"capsule", error->capsule.empty() ? json(nullptr) : json(error->capsule)},
                        {"hits", error->hits},
                        {"update", error->update.empty() ? json(nullptr) : json(error->update)},
                        {"skip_update", debug.skip_chosen()}};
  }
  return summary;
}

json Controller::get_debug_report() const {
  const auto& debug = core_.debug();
  auto error = debug.error();
  return {{"settings", numerics::to_json(debug.settings())},
          {"error", error ? numerics::to_json(*error) : json(nullptr)},
          {"checked_batches", debug.checked_batches()},
          {"skip_update", debug.skip_chosen()}};
}

json Controller::choose_update(const std::string& action) {
  if (action != "skip" && action != "apply") {
    throw ControllerError(ControllerError::Kind::kInvalidArgument,
                          "action must be \"skip\" or \"apply\", got \"" + action + "\"");
  }
  try {
    core_.debug().choose_update(action == "skip");
  } catch (const std::logic_error& e) {
    throw ControllerError(ControllerError::Kind::kConflict, e.what());
  }
  return get_debug_report();
}

json Controller::configure_debug_checks(const DebugChecksUpdate& u) {
  auto& debug = core_.debug();
  auto s = debug.settings();
  if (u.enabled) s.enabled(*u.enabled);
  if (u.interval_batches) s.interval(*u.interval_batches);
  if (u.check_nan_inf) s.check_nan_inf(*u.check_nan_inf);
  if (u.check_under_over) s.check_under_over(*u.check_under_over);
  if (u.threshold_fraction) s.threshold(*u.threshold_fraction);
  if (u.trace_interval_batches) s.trace_interval(*u.trace_interval_batches);
  if (u.rerun_to_trace) s.rerun_to_trace(*u.rerun_to_trace);
  if (u.allow) s.allow(*u.allow);
  try {
    debug.set_settings(s);
  } catch (const std::invalid_argument& e) {
    // The settings' own names, as the request spells them.
    std::string message = e.what();
    for (const auto& [from, to] : {std::pair{"interval ", "interval_batches "},
                                   std::pair{"threshold ", "threshold_fraction "},
                                   std::pair{"trace_interval ", "trace_interval_batches "}}) {
      if (message.rfind(from, 0) == 0) message = to + message.substr(std::string(from).size());
    }
    throw ControllerError(ControllerError::Kind::kInvalidArgument, message);
  }
  return get_debug_report();
}

json Controller::silence_debug_check(const std::optional<std::string>& category) {
  try {
    core_.debug().silence(category.value_or(""));
  } catch (const std::invalid_argument& e) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
  }
  return get_debug_report();
}

json Controller::clear_debug_error() {
  core_.debug().clear();
  return get_debug_report();
}

}  // namespace nansense::server
