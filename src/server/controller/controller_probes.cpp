// Probes on the paused model: the controller's side of experiments::Probes
// (validation is the probes'; its refusals pass through; this file
// names inputs and shows the state as JSON).
#include "experiments/probe.h"
#include "experiments/visitor_probes.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

using experiments::Probes;
using experiments::ProbeSettings;

bool active_without_pin(const ProbeSettings& s) {
  return s.mode != experiments::ProbeMode::kUnchanged || !s.perturbations.empty();
}

// The model's input names, in input-layer order.
std::vector<std::string> input_names(const detail::RunPort& session) {
  auto arch = session.architecture();
  return arch ? arch->inputs : std::vector<std::string>{};
}

std::string input_name(const std::vector<std::string>& names, int64_t index) {
  return index >= 0 && index < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(index)]
                                                                  : "input_" + std::to_string(index);
}

}  // namespace

ProbeArea::ProbeArea(detail::SessionPort& session) : session_(session) {}

std::shared_ptr<Probes> ProbeArea::caller_probes() const {
  if (!session_.locked()) {
    // Aliasing: the session owns its one shared probe state.
    return std::shared_ptr<Probes>(std::shared_ptr<Probes>{}, &session_.probes());
  }
  const std::string& visitor = VisitorScope::current();
  return visitor.empty() ? nullptr : session_.visitor_probes().find(visitor);
}

std::shared_ptr<Probes> ProbeArea::change_probes(const std::function<bool(const ProbeSettings&)>& starts_run,
                                                 const std::function<void(Probes&)>& change) {
  if (!session_.locked()) {
    change(session_.probes());
    return caller_probes();
  }
  const std::string& visitor = VisitorScope::current();
  if (visitor.empty()) {
    throw Refusal(Refusal::Kind::kConflict,
                  "this session is locked (a shared demo): probes belong to a visitor, and this call names none "
                  "(the web server's nansense_visitor cookie or an MCP session does)");
  }
  return session_.visitor_probes().change(visitor, starts_run, change);
}

json ProbeArea::get_probe_status() const {
  auto own = caller_probes();
  const Probes& probes = own ? *own : session_.visitor_probes().idle();
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
  if (session_.locked()) {
    hint += " This session is locked: the probe is yours alone (other visitors never see it), at most " +
            std::to_string(session_.visitor_probes().limits().runs_in_flight) +
            " visitors' probe runs are in flight at once, and a probe runs on this paused moment only.";
  }
  out["hint"] = hint;
  return out;
}

json ProbeArea::probe_reply(const Probes& probes, Wait wait) const {
  // A run already under way when the change came does not answer it.
  if (wait.count() > 0) probes.wait_for_settings(probes.settings_generation(), wait);
  return get_probe_status();
}

json ProbeArea::pin_batch(Wait wait) {
  auto probes = change_probes([](const ProbeSettings&) { return true; }, [](Probes& p) { p.pin(); });
  return probe_reply(*probes, wait);
}

json ProbeArea::unpin_batch(Wait wait) {
  const auto refuse = [] { return Refusal(Refusal::Kind::kConflict, "no batch is pinned"); };
  // A visitor with no probe state has nothing pinned (and gets no slot for it).
  if (session_.locked() && !caller_probes()) throw refuse();
  bool unpinned = false;
  auto probes = change_probes(active_without_pin, [&](Probes& p) { unpinned = p.unpin(); });
  if (!unpinned) throw refuse();
  return probe_reply(*probes, wait);
}

json ProbeArea::set_probe_mode(const std::string& mode, Wait wait) {
  auto parsed = experiments::parse_probe_mode(mode);
  if (!parsed)
    throw std::logic_error("set_probe_mode: undeclared mode \"" + mode + "\"");  // the declaration admits no other
  const experiments::ProbeMode to = *parsed;
  // Back to unchanged without a probe state of its own: nothing to change.
  if (to == experiments::ProbeMode::kUnchanged && session_.locked() && !caller_probes()) return get_probe_status();
  std::shared_ptr<Probes> probes;
  try {
    probes = change_probes(
        [to](const ProbeSettings& s) {
          return s.mode != to && (to != experiments::ProbeMode::kUnchanged || s.pinned || !s.perturbations.empty());
        },
        [to](Probes& p) { p.set_mode(to); });
  } catch (const Refusal& e) {
    throw e.about("mode");
  }
  return probe_reply(*probes, wait);
}

json ProbeArea::add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
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
  auto probes =
      change_probes([](const ProbeSettings&) { return true; }, [&](Probes& probe) { probe.add_perturbation(p); });
  return probe_reply(*probes, wait);
}

json ProbeArea::clear_perturbations(Wait wait) {
  int64_t cleared = 0;
  json out;
  if (session_.locked() && !caller_probes()) {
    out = get_probe_status();  // nothing of its own to clear
  } else {
    auto probes =
        change_probes([](const ProbeSettings& s) { return s.pinned || s.mode != experiments::ProbeMode::kUnchanged; },
                      [&](Probes& p) { cleared = p.clear_perturbations(); });
    out = probe_reply(*probes, wait);
  }
  out["cleared"] = cleared;
  return out;
}

}  // namespace nansense::server
