// The controller's numerical-debugging commands and queries: every transport
// (REST, MCP, the push channel's status) goes through these.
#include <stdexcept>

#include "numerics/debug_json.h"
#include "numerics/debug_state.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

json skip_refused(const detail::SessionPort& session) {
  auto why = session.skip_refused();
  return why.empty() ? json(nullptr) : json(std::move(why));
}

}  // namespace

DebugArea::DebugArea(detail::SessionPort& session) : session_(session) {}

json DebugArea::summary() const {
  const auto settings = session_.debug_settings();
  json checks = json::array();
  if (settings.enabled() && settings.check_nan_inf()) checks.push_back(numerics::kNanInf);
  if (settings.enabled() && settings.check_under_over()) checks.push_back(numerics::kUnderOver);
  json summary = {{"enabled", settings.enabled()},
                  {"checks", checks},
                  {"loss_scale", numerics::to_json(session_.loss_scale())},
                  {"error", nullptr}};
  if (auto error = session_.debug_error()) {
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
                        {"root_cause_status",
                         error->root_cause ? json(std::string(to_string(error->root_cause->status))) : json(nullptr)},
                        {"producer", producer},
                        {"capsule", error->capsule.empty() ? json(nullptr) : json(error->capsule)},
                        {"hits", error->hits},
                        {"update", error->update.empty() ? json(nullptr) : json(error->update)},
                        {"rerun", error->rerun},
                        {"ran_twice", error->rerun ? json(session_.rerun_note().ran_twice) : json(nullptr)},
                        {"skip_update", session_.skip_update_chosen()},
                        {"trainer_step", to_json(error->trainer_step)},
                        {"skip_refused", skip_refused(session_)}};
  }
  return summary;
}

DebugReport DebugArea::get_debug_report() const {
  auto error = session_.debug_error();
  const auto settings = session_.debug_settings();
  DebugReport out;
  out.settings = numerics::to_json(settings);
  out.error = error ? numerics::to_json(*error) : json(nullptr);
  out.checked_batches = session_.checked_batches();
  out.loss_scale = numerics::to_json(session_.loss_scale());
  out.skip_update = session_.skip_update_chosen();
  if (auto why = session_.skip_refused(); !why.empty()) out.skip_refused = std::move(why);
  for (const auto& u : session_.unchecked_tensors()) {
    out.unchecked_tensors.push_back({u.source, u.tensor, u.layer, u.checks, u.error, to_json(u.position)});
  }
  // The traced re-run's contract (docs/guide/nans.md), for whoever reads a
  // "not reproduced" root cause, in the front end's words: a plain loop's,
  // or the Lightning callback's.
  const auto note = session_.rerun_note();
  out.rerun = {settings.rerun_to_trace(), note.ran_twice, note.restored, note.seen_twice, note.detect};
  return out;
}

DebugReport DebugArea::choose_update(const std::string& action) {
  // The declaration admits no other action.
  if (action != "skip" && action != "apply") throw std::logic_error("choose_update: undeclared action " + action);
  try {
    session_.choose_update(action == "skip");
  } catch (const std::logic_error& e) {
    throw Refusal(Refusal::Kind::kConflict, e.what());
  }
  return get_debug_report();
}

DebugReport DebugArea::configure_debug_checks(const DebugChecksUpdate& u) {
  auto s = session_.debug_settings();
  if (u.enabled) s.enabled(*u.enabled);
  if (u.interval_batches) s.interval_batches(*u.interval_batches);
  if (u.check_nan_inf) s.check_nan_inf(*u.check_nan_inf);
  if (u.check_under_over) s.check_under_over(*u.check_under_over);
  if (u.threshold_fraction) s.threshold_fraction(*u.threshold_fraction);
  if (u.trace_interval_batches) s.trace_interval_batches(*u.trace_interval_batches);
  if (u.rerun_to_trace) s.rerun_to_trace(*u.rerun_to_trace);
  if (u.allow) s.allow(*u.allow);
  try {
    session_.set_debug_settings(s);
  } catch (const ArgumentError& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  }
  return get_debug_report();
}

DebugReport DebugArea::silence_debug_check(const std::optional<std::string>& category) {
  try {
    session_.disable_debug_check(category.value_or(""));
  } catch (const ArgumentError& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  }
  return get_debug_report();
}

DebugReport DebugArea::clear_debug_error() {
  session_.clear_debug_error();
  return get_debug_report();
}

}  // namespace nansense::server
