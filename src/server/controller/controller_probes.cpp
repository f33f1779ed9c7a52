// Probes on the paused model: the controller's side of experiments::Probes
// (validation is the probes'; its refusals pass through; this file
// names inputs and shows the state as JSON).
#include "experiments/probe.h"
#include "server/controller/controller.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

// The model's input names, in input-layer order.
std::vector<std::string> input_names(const detail::RunPort& session) {
  auto arch = session.architecture();
  return arch ? arch->inputs : std::vector<std::string>{};
}

std::string input_name(const std::vector<std::string>& names, int64_t index) {
  return index >= 0 && index < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(index)]
                                                                  : "input_" + std::to_string(index);
}

// A probe change of `kind` (and, for kSetMode, the mode it sets).
detail::ProbeChange probe_change(detail::ProbeChange::Kind kind,
                                 experiments::ProbeMode mode = experiments::ProbeMode::kUnchanged) {
  detail::ProbeChange c;
  c.kind = kind;
  c.mode = mode;
  return c;
}

}  // namespace

ProbeArea::ProbeArea(detail::SessionPort& session) : session_(session) {}

detail::ProbeOwner ProbeArea::caller() const {
  if (!session_.locked()) return std::nullopt;
  return VisitorScope::current();
}

std::optional<detail::ProbeView> ProbeArea::caller_view() const {
  const auto owner = caller();
  if (owner && owner->empty()) return std::nullopt;
  return session_.probe_view(owner);
}

uint64_t ProbeArea::change(const detail::ProbeChange& change, detail::ProbeChanged* changed) {
  const auto owner = caller();
  if (owner && owner->empty()) {
    throw Refusal(Refusal::Kind::kConflict,
                  "this session is locked (a shared demo): probes belong to a visitor, and this call names none "
                  "(the web server's nansense_visitor cookie or an MCP session does)");
  }
  const auto out = session_.change_probe(owner, change);
  if (changed) *changed = out;
  return out.settings_generation;
}

ProbeStatus ProbeArea::get_probe_status() const {
  // A visitor without a probe state of its own sees an idle probe.
  const auto probes = caller_view().value_or(detail::ProbeView{});
  const auto& settings = probes.settings;
  const auto names = input_names(session_);
  ProbeStatus out;
  for (const auto& p : settings.perturbations) {
    std::vector<json> values;
    for (double v : p.values) values.push_back(common::number(v));
    out.perturbations.push_back({input_name(names, p.input), p.sample, p.index, std::move(values)});
  }
  out.active = settings.active();
  out.pinned = settings.pinned;
  out.pinned_position = settings.pinned_position ? to_json(*settings.pinned_position) : json(nullptr);
  out.mode = experiments::probe_mode_name(settings.mode);
  out.runs_completed = probes.runs_completed;
  out.pending = probes.pending;
  const auto& result = probes.result;
  if (result) {
    ProbeResultSummary r;
    r.run = result->run;
    r.position = to_json(result->position);
    r.diff = result->diff;
    r.perturbations_applied = result->perturbations_applied;
    r.snapshot_sequence = result->view ? result->view->sequence : 0;
    if (result->view) r.layers = static_cast<int64_t>(result->view->activations.size());
    out.result = std::move(r);
    if (!result->error.empty()) out.error = result->error;
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
            std::to_string(session_.probe_runs_in_flight_limit()) +
            " visitors' probe runs are in flight at once, and a probe runs on this paused moment only.";
  }
  out.hint = hint;
  return out;
}

ProbeStatus ProbeArea::probe_reply(uint64_t generation, Wait wait) const {
  // A run already under way when the change came does not answer it.
  if (wait.count() > 0) session_.wait_for_probe(caller(), generation, wait);
  return get_probe_status();
}

ProbeStatus ProbeArea::pin_batch(Wait wait) {
  return probe_reply(change(probe_change(detail::ProbeChange::Kind::kPin)), wait);
}

ProbeStatus ProbeArea::unpin_batch(Wait wait) {
  const auto refuse = [] { return Refusal(Refusal::Kind::kConflict, "no batch is pinned"); };
  // A visitor with no probe state has nothing pinned (and gets no slot for it).
  if (session_.locked() && !caller_view()) throw refuse();
  detail::ProbeChanged changed;
  const uint64_t generation = change(probe_change(detail::ProbeChange::Kind::kUnpin), &changed);
  if (!changed.unpinned) throw refuse();
  return probe_reply(generation, wait);
}

ProbeStatus ProbeArea::set_probe_mode(const std::string& mode, Wait wait) {
  auto parsed = experiments::parse_probe_mode(mode);
  if (!parsed)
    throw std::logic_error("set_probe_mode: undeclared mode \"" + mode + "\"");  // the declaration admits no other
  const experiments::ProbeMode to = *parsed;
  // Back to unchanged without a probe state of its own: nothing to change.
  if (to == experiments::ProbeMode::kUnchanged && session_.locked() && !caller_view()) return get_probe_status();
  uint64_t generation = 0;
  try {
    generation = change(probe_change(detail::ProbeChange::Kind::kSetMode, to));
  } catch (const Refusal& e) {
    throw e.about("mode");
  }
  return probe_reply(generation, wait);
}

ProbeStatus ProbeArea::add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values,
                                        int64_t sample, const std::optional<std::string>& input, Wait wait) {
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
  auto add = probe_change(detail::ProbeChange::Kind::kAddPerturbation);
  add.perturbation = std::move(p);
  return probe_reply(change(add), wait);
}

ProbeStatus ProbeArea::clear_perturbations(Wait wait) {
  detail::ProbeChanged changed;
  ProbeStatus out;
  if (session_.locked() && !caller_view()) {
    out = get_probe_status();  // nothing of its own to clear
  } else {
    out = probe_reply(change(probe_change(detail::ProbeChange::Kind::kClearPerturbations), &changed), wait);
  }
  out.cleared = changed.cleared;
  return out;
}

}  // namespace nansense::server
