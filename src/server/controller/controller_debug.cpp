// The controller's numerical-debugging commands and queries: every transport
// (REST, MCP, the push channel's status) goes through these.
#include <stdexcept>

#include "numerics/debug_json.h"
#include "numerics/debug_state.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

DebugArea::DebugArea(detail::SessionPort& session) : session_(session) {}

DebugSummary DebugArea::summary() const {
  const auto settings = session_.debug_settings();
  DebugSummary out;
  out.enabled = settings.enabled();
  if (settings.enabled() && settings.check_nan_inf()) out.checks.push_back(numerics::kNanInf);
  if (settings.enabled() && settings.check_under_over()) out.checks.push_back(numerics::kUnderOver);
  out.loss_scale = numerics::to_json(session_.loss_scale());
  auto error = session_.debug_error();
  if (!error) return out;
  DebugErrorSummary e;
  e.reasons = error->reasons;
  for (const auto& r : error->reasons) e.reason_labels.push_back(numerics::reason_label(r));
  e.position = error->position;
  e.text = numerics::headline(*error);
  for (const auto& row : error->layers) e.layers.push_back(row.layer);
  if (error->root_cause) {
    e.root_cause_status = std::string(to_string(error->root_cause->status));
    if (const auto& p = error->root_cause->producer) e.producer = ProducerBrief{p->op, p->pass, p->layer};
  }
  if (!error->capsule.empty()) e.capsule = error->capsule;
  e.hits = error->hits;
  if (!error->update.empty()) e.update = error->update;
  e.rerun = error->rerun;
  if (error->rerun) e.ran_twice = session_.rerun_note().ran_twice;
  e.skip_update = session_.skip_update_chosen();
  e.trainer_step = error->trainer_step;
  if (auto why = session_.skip_refused(); !why.empty()) e.skip_refused = std::move(why);
  out.error = std::move(e);
  return out;
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
