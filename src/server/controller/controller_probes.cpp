// Probes on the paused model: the controller's side of experiments::Probes
// (validation is the probes'; this file maps refusals to Refusals,
// names inputs and shows the state as JSON).
#include "experiments/probe.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

using experiments::Probes;

Refusal refused(const common::Refusal& e, const std::string& argument = "") {
  using Why = common::Refusal::Why;
  switch (e.why()) {
    case Why::kNotFound:
      return Refusal(Refusal::Kind::kNotFound, e.what(), argument);
    case Why::kConflict:
      return Refusal(Refusal::Kind::kConflict, e.what());
    case Why::kInvalid:
      break;
  }
  return Refusal(Refusal::Kind::kInvalidArgument, e.what(), argument);
}

// The model's input names, in input-layer order.
std::vector<std::string> input_names(const detail::SessionPort& session) {
  auto arch = session.architecture();
  return arch ? arch->inputs : std::vector<std::string>{};
}

std::string input_name(const std::vector<std::string>& names, int64_t index) {
  return index >= 0 && index < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(index)]
                                                                  : "input_" + std::to_string(index);
}

}  // namespace

json Controller::get_probe_status() const {
  Probes& probes = session_.probes();
  const auto settings = probes.settings();
  const auto names = input_names(session_);
  json perturbations = json::array();
  for (const auto& p : settings.perturbations) {
    json values = json::array();
    for (double v : p.values) values.push_back(common::number(v));
    perturbations.push_back(
        {{"input", input_name(names, p.input)}, {"sample", p.sample}, {"index", p.index}, {"values", values}});
  }
  json out = {{"active", settings.active()},
              {"pinned", settings.pinned},
              {"pinned_position", settings.pinned_position ? to_json(*settings.pinned_position) : json(nullptr)},
              {"mode", experiments::probe_mode_name(settings.mode)},
              {"perturbations", perturbations},
              {"runs_completed", probes.runs_completed()},
              {"pending", probes.pending()},
              {"result", nullptr}};
  auto result = probes.result();
  if (result) {
    json r = {{"run", result->run},
              {"position", to_json(result->position)},
              {"diff", result->diff},
              {"perturbations_applied", result->perturbations_applied},
              {"snapshot_sequence", result->view ? result->view->sequence : 0}};
    if (result->view) {
      r["layers"] = static_cast<int64_t>(result->view->activations.size());
    }
    out["result"] = std::move(r);
    if (!result->error.empty()) out["error"] = result->error;
  }
  std::string hint;
  if (!settings.active()) {
    hint =
        "No probe is active. pin_batch re-runs the last captured batch at every later capture (across steps and "
        "time travel); set_probe_mode(\"eval\" or \"train\") re-runs it in that mode; add_perturbation changes "
        "input values. Probes run forward only on the paused model and never change training.";
  } else if (result && result->error.empty()) {
    hint = std::string(
               "render_layer and get_layer_stats now show the probe's result in place of the last "
               "captured batch") +
           (result->diff ? " as the difference perturbed - original" : "") +
           " (no gradients: probes run no backward). clear_perturbations, unpin_batch and "
           "set_probe_mode(\"unchanged\") end it.";
  } else if (result) {
    hint = "The last probe run failed (see error); the last captured batch is shown.";
  } else {
    hint = "The probe runs when the loop pauses.";
  }
  out["hint"] = hint;
  return out;
}

json Controller::probe_reply(Wait wait) const {
  // A run already under way when the change came does not answer it.
  if (wait.count() > 0) session_.probes().wait_for_settings(session_.probes().settings_generation(), wait);
  return get_probe_status();
}

json Controller::pin_batch(Wait wait) {
  try {
    session_.probes().pin();
  } catch (const common::Refusal& e) {
    throw refused(e);
  }
  return probe_reply(wait);
}

json Controller::unpin_batch(Wait wait) {
  if (!session_.probes().unpin()) {
    throw Refusal(Refusal::Kind::kConflict, "no batch is pinned");
  }
  return probe_reply(wait);
}

json Controller::set_probe_mode(const std::string& mode, Wait wait) {
  auto parsed = experiments::parse_probe_mode(mode);
  if (!parsed)
    throw std::logic_error("set_probe_mode: undeclared mode \"" + mode + "\"");  // the declaration admits no other
  try {
    session_.probes().set_mode(*parsed);
  } catch (const common::Refusal& e) {
    throw refused(e, "mode");
  }
  return probe_reply(wait);
}

json Controller::add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
                                  const std::optional<std::string>& input, Wait wait) {
  experiments::Perturbation p;
  p.index = index;
  p.values = values;
  p.sample = sample;
  if (input) {
    const auto names = input_names(session_);
    auto it = std::find(names.begin(), names.end(), *input);
    if (it == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Refusal(
          Refusal::Kind::kNotFound,
          "unknown input \"" + *input + "\"; the model's inputs: " + (known.empty() ? "none captured yet" : known),
          "input_name");
    }
    p.input = it - names.begin();
  }
  try {
    session_.probes().add_perturbation(p);
  } catch (const common::Refusal& e) {
    // Name the argument the refusal is about (check_perturbation's wording).
    const std::string why = e.what();
    const auto starts = [&](const char* prefix) { return why.rfind(prefix, 0) == 0; };
    const char* argument = starts("sample ") ? "sample"
                           : starts("perturbation values") || why.find(" values do not fit") != std::string::npos
                               ? "values"
                           : starts("index ") ? "index"
                                              : "input_name";
    throw refused(e, argument);
  }
  return probe_reply(wait);
}

json Controller::clear_perturbations(Wait wait) {
  const int64_t cleared = session_.probes().clear_perturbations();
  json out = probe_reply(wait);
  out["cleared"] = cleared;
  return out;
}

}  // namespace nansense::server
