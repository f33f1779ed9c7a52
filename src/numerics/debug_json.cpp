#include "numerics/debug_json.h"

#include <set>

#include "common/dtype.h"
#include "common/json_read.h"
#include "common/json_values.h"
#include "common/tensor_stats.h"
#include "numerics/bands.h"

namespace nansense::numerics {

json to_json(const DebugSettings& s) {
  return {{"enabled", s.enabled()},
          {"interval_batches", s.interval_batches()},
          {"check_nan_inf", s.check_nan_inf()},
          {"check_under_over", s.check_under_over()},
          {"threshold_fraction", s.threshold_fraction()},
          {"trace_interval_batches", s.trace_interval_batches()},
          {"rerun_to_trace", s.rerun_to_trace()},
          {"allow", s.allow()},
          {"capsule_dir", s.capsule_dir()}};
}

DebugSettings settings_from_json(const json& j) {
  DebugSettings s;
  s.enabled(j.value("enabled", s.enabled()));
  s.interval_batches(common::integer_value(j, "interval_batches", s.interval_batches(), 1));
  s.check_nan_inf(j.value("check_nan_inf", s.check_nan_inf()));
  s.check_under_over(j.value("check_under_over", s.check_under_over()));
  s.threshold_fraction(j.value("threshold_fraction", s.threshold_fraction()));
  s.trace_interval_batches(common::integer_value(j, "trace_interval_batches", s.trace_interval_batches(), 0));
  s.rerun_to_trace(j.value("rerun_to_trace", s.rerun_to_trace()));
  s.allow(j.value("allow", s.allow()));
  s.capsule_dir(j.value("capsule_dir", s.capsule_dir()));
  return s;
}

json to_json(const OpReport& op) {
  json inputs = json::array(), outputs = json::array();
  for (const auto& s : op.inputs) inputs.push_back(common::to_json(s));
  for (const auto& s : op.outputs) outputs.push_back(common::to_json(s));
  return {{"op", op.op},
          {"pass", op.pass},
          {"backward_node", op.backward_node.empty() ? json(nullptr) : json(op.backward_node)},
          {"forward_op", op.forward_op.empty() ? json(nullptr) : json(op.forward_op)},
          {"layer", op.layer ? json(*op.layer) : json(nullptr)},
          {"index", op.index},
          {"inputs", inputs},
          {"outputs", outputs}};
}

json to_json(const RootCause& cause) {
  json propagators = json::array();
  for (const auto& p : cause.propagators) propagators.push_back(to_json(p));
  return {{"status", std::string(to_string(cause.status))},
          {"summary", cause.summary},
          {"producer", cause.producer ? to_json(*cause.producer) : json(nullptr)},
          {"propagators", propagators},
          {"propagator_count", cause.propagator_count},
          {"other_producer_count", cause.other_producer_count}};
}

json to_json(const LayerReport& row) {
  return {{"layer", row.layer},       {"nan", row.nan},
          {"inf", row.inf},           {"underflow", row.underflow},
          {"overflow", row.overflow}, {"dtype", row.dtype ? json(*row.dtype) : json(nullptr)},
          {"sources", row.sources}};
}

std::string reason_label(const std::string& reason) {
  if (reason == "nan") return "NaN";
  if (reason == "inf") return "±Inf";
  if (reason == "underflow") return "subnormal";
  return reason;
}

std::string headline(const DebugError& error) {
  std::string reasons;
  for (const auto& r : error.reasons) reasons += (reasons.empty() ? "" : ", ") + reason_label(r);
  std::string out = "Numerical issue detected — " + reasons + " — at " + error.position.to_string();
  if (const auto& step = error.trainer_step) {
    // The layers of micro-batch k carry "#k" from the second on: ordinals, as here.
    out += " (global step " + std::to_string(step->global_step);
    if (step->micro_batches > 1 && step->micro_batch >= 0) {
      out += ", micro-batch " + std::to_string(step->micro_batch + 1) + " of " + std::to_string(step->micro_batches);
    }
    out += ")";
  }
  if (!error.loss_scale.empty()) out += " — the loss scale collapsed: " + error.loss_scale;
  return out;
}

json bands_json(const DebugError& error) {
  std::set<std::string> seen;
  json out = json::array();
  for (const auto& row : error.layers) {
    if (!row.dtype || !seen.insert(*row.dtype).second) continue;
    auto dtype = common::dtype_of_name(*row.dtype);
    if (!dtype || !c10::isFloatingType(*dtype)) continue;
    auto band = band_of(*dtype);
    out.push_back({{"dtype", *row.dtype}, {"tiny", band->tiny}, {"overflow", band->overflow}});
  }
  return out;
}

json to_json(const DebugError& error) {
  json layers = json::array();
  for (const auto& row : error.layers) layers.push_back(to_json(row));
  json labels = json::array();
  for (const auto& r : error.reasons) labels.push_back(reason_label(r));
  return {{"position", common::to_json(error.position)},
          {"reasons", error.reasons},
          {"reason_labels", labels},
          {"checks_used", error.checks_used},
          {"layers", layers},
          {"bands", bands_json(error)},
          {"root_cause", error.root_cause ? to_json(*error.root_cause) : json(nullptr)},
          {"capsule", error.capsule.empty() ? json(nullptr) : json(error.capsule)},
          {"hits", error.hits},
          {"update", error.update.empty() ? json(nullptr) : json(error.update)},
          {"rerun", error.rerun},
          {"loss_scale", error.loss_scale.empty() ? json(nullptr) : json(error.loss_scale)},
          {"trainer_step", common::to_json(error.trainer_step)},
          {"text", headline(error)}};
}

json to_json(const LossScaleStatus& s) {
  return {{"in_use", s.in_use},
          {"scale", s.scale ? json(*s.scale) : json(nullptr)},
          {"skipped_steps", s.skipped_steps},
          {"skips_in_row", s.skips_in_row},
          {"last_skipped", s.last_skipped ? common::to_json(*s.last_skipped) : json(nullptr)},
          {"collapse_skips", kLossScaleCollapseSkips},
          {"floor", kLossScaleFloor}};
}

}  // namespace nansense::numerics

namespace nansense {

std::string_view to_string(RootCause::Status status) {
  switch (status) {
    case RootCause::Status::kFound:
      return "found";
    case RootCause::Status::kFromOutside:
      return "from_outside";
    case RootCause::Status::kNotReproduced:
      return "not_reproduced";
    case RootCause::Status::kPending:
      return "pending";
    case RootCause::Status::kNotTraced:
      return "not_traced";
    case RootCause::Status::kCompiledOnly:
      return "compiled_only";
  }
  return "not_traced";
}

}  // namespace nansense
