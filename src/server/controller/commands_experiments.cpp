// The commands of experiments on the paused model
// (controller_experiments.cpp), declared once (commands.h says what a
// declaration holds).
#include "server/controller/command_parts.h"

namespace nansense::server::command_parts {

std::vector<Command> experiment_commands() {
  std::vector<Command> t;
  // --- experiments on the paused model (controller_experiments.cpp) ---
  const Arg seq = integer_arg("seq", "The experiment's number, as run_experiment returned it.").at_least(1);
  t.push_back({
      .name = "list_experiments",
      .title = "Experiment kinds, layers and parameters",
      .description = "The interpretability experiments that run on the paused model: per kind (deep_dream, gradcam, "
                     "neuron_gradient, neuron_ig, occlusion) its title, one-line summary, description, the layers it "
                     "accepts (and the others with the reason), its parameters (key, type, default as the session sets "
                     "it, minimum, maximum, options, description); the time limit per run in seconds and whether "
                     "auto-run is on.",
      .args = {},
      .rest = Route{"GET", "/api/experiments"},
      .mcp = true,
      .read_only = true,
      .reply = "ExperimentList",
      .run = [](Controller& c, const Args&) { return json_reply(c.experiments().list_experiments()); },
  });
  t.push_back({
      .name = "run_experiment",
      .title = "Run an experiment on the paused model",
      .description =
          "Queue an experiment on a layer of the paused model and wait up to timeout_seconds for it: Deep Dream "
          "(synthesise what each channel responds to), Grad-CAM (where the layer saw evidence for a class), Neuron "
          "Gradient, Neuron Integrated Gradients and Occlusion (how the input drives a layer-channel's mean "
          "activation). params are layered: the kind's defaults, then the session's, then these; unknown keys are "
          "listed in ignored_params. The training loop must be paused unless auto-run is on (then it runs at the next "
          "live update). Requests run one at a time in order; the model, its gradients, buffers, training flags and "
          "RNG are left bit for bit as they were. Returns the result: seq (for get_experiment_result, "
          "render_experiment, cancel_experiment), stage (queued, running, done, stopped, failed), step/total, "
          "objective, per-sample target values and attribution sums, and notes.",
      .args = {string_arg("kind", "Which experiment.")
                   .one_of({"deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"})
                   .mandatory(),
               kLayer
                   .described("A layer from get_architecture (list_experiments says which each kind accepts), e.g. "
                              "\"features.3\" or \"relu_1\".")
                   .mandatory(),
               object_arg("params", "Parameters by key, e.g. {\"channel\": 3, \"batch\": 4}; see list_experiments."),
               kTimeout
                   .described("How long to wait for the experiment to finish, in seconds (0 returns at once with "
                              "the queued result). The experiment goes on after a timeout.")
                   .or_else(120),
               boolean_arg("video",
                           "deep_dream only: also draw the dream's published steps (about 20 evenly spaced, every "
                           "step with params.all_steps) as an H.264 MP4 in the recordings folder (list_recordings); "
                           "the reply adds video {path, frames, error}. Needs timeout_seconds > 0.")
                   .or_else(false)},
      .rest = Route{"POST", "/api/experiments/run"},
      .mcp = true,
      .read_only = false,
      // Visitors of a locked session run experiments: clamped, the queue capped
      // (experiments/engine.h kLockedLimits); nothing another visitor sees changes.
      .locked = WhenLocked::kAllowed,
      .reply = "ExperimentResult",
      .run =
          [](Controller& c, const Args& a) {
            if (a.boolean("video")) {
              return json_reply(c.recordings().run_experiment_video(a.string("kind"), a.string("layer"),
                                                                    a.object("params"), wait_of(a)));
            }
            return json_reply(
                c.experiments().run_experiment(a.string("kind"), a.string("layer"), a.object("params"), wait_of(a)));
          },
  });
  t.push_back({
      .name = "get_experiment_result",
      .title = "An experiment's progress or outcome",
      .description =
          "The experiment's state: stage (queued with queued_ahead, running, done, stopped with stop_reason, "
          "failed with error), step/total, objective (Deep Dream's mean target activation, and its "
          "history), per-sample target values, attribution sums and ranges. Only the 8 most recent "
          "experiments are kept.",
      .args = {seq.mandatory()},
      .rest = Route{"GET", "/api/experiments/result"},
      .mcp = true,
      .read_only = true,
      .reply = "ExperimentResult",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.experiments().get_experiment_result(static_cast<uint64_t>(a.integer("seq"))));
          },
  });
  t.push_back({
      .name = "cancel_experiment",
      .title = "Cancel experiments",
      .description = "Stop one experiment (queued or running), or every one when seq is left out. A stopped run keeps "
                     "what it had produced. Returns how many were cancelled.",
      .args = {seq},
      .rest = Route{"POST", "/api/experiments/cancel"},
      .mcp = true,
      .read_only = false,
      .reply = "ExperimentCancel",
      .run =
          [](Controller& c, const Args& a) {
            auto s = a.optional_integer("seq");
            return json_reply(c.experiments().cancel_experiment(s ? std::optional<uint64_t>(static_cast<uint64_t>(*s))
                                                                  : std::nullopt));
          },
  });
  t.push_back({
      .name = "render_experiment",
      .title = "Picture an experiment's result",
      .description =
          "A PNG of an experiment's result (as far as it got): Deep Dream's dreamed image per channel (after "
          "the starting sample when it started from one); for the attribution kinds one row per sample, the "
          "attribution map beside the input, or over it with overlay=true. Maps are drawn at the input's "
          "size.",
      .args = {seq.mandatory(), boolean_arg("overlay", "Draw attributions over the input.").or_else(false)},
      .rest = Route{"GET", "/api/render/experiment"},
      .mcp = true,
      .read_only = true,
      .reply = "ExperimentPictureInfo",
      .run =
          [](Controller& c, const Args& a) {
            Reply r;
            r.experiment =
                c.experiments().render_experiment(static_cast<uint64_t>(a.integer("seq")), a.boolean("overlay"));
            return r;
          },
  });
  t.push_back({
      .name = "set_auto_run_experiments",
      .title = "Run experiments while training runs",
      .description = "On: run_experiment is accepted while the loop runs, and the request runs at the next live update "
                     "(a captured batch), holding training for its duration. Off (the default): experiments need the "
                     "loop paused.",
      .args = {boolean_arg("enabled", "Auto-run on or off.").mandatory()},
      .rest = Route{"POST", "/api/experiments/auto_run"},
      .mcp = true,
      .read_only = false,
      .reply = "ExperimentAutoRun",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.experiments().set_auto_run_experiments(a.boolean("enabled"))); },
  });
  t.push_back({
      .name = "set_experiment_defaults",
      .title = "Set the session's experiment defaults",
      .description =
          "Replace one experiment kind's session defaults: the parameter values run_experiment (and every "
          "page) starts from, layered between the kind's own defaults and the caller's params (kind defaults "
          "-> session defaults -> caller). Values are checked as run_experiment checks them; an empty params "
          "object clears the kind's defaults. list_experiments shows the effective defaults. Returns the "
          "settings (experiment_defaults among them) and ignored_params: unknown keys, not kept.",
      .args = {string_arg("kind", "Which experiment kind the defaults are for.")
                   .one_of({"deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"})
                   .mandatory(),
               object_arg("params",
                          "Parameter values by key, e.g. {\"steps\": 150, \"channels\": 4}; see "
                          "list_experiments.")
                   .mandatory()},
      .rest = Route{"POST", "/api/experiments/defaults"},
      .mcp = true,
      .read_only = false,
      .reply = "ExperimentDefaults",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.experiments().set_experiment_defaults(a.string("kind"), a.object("params")));
          },
  });
  // A page's registration lives only while the page renews it (a heartbeat
  // every second); an agent has no page to renew it, so these are not MCP tools.
  const Arg tab =
      string_arg("tab", "A name for the page (browser tab) that owns the auto experiment.").not_empty().mandatory();
  t.push_back({
      .name = "set_auto_experiment",
      .title = "Register a page's auto experiment",
      .description =
          "Register, or renew, the experiment a page shows so it re-runs at every snapshot (every pause and "
          "live update) while auto-run is on. Keyed per tab: tabs never replace or cancel each other's runs; "
          "a tab's own queued run gives way to its newer one. A new or changed experiment runs at once when "
          "the loop is paused. The registration expires 5 s after its last renewal (the page renews it every "
          "second). Checked like run_experiment.",
      .args = {tab,
               string_arg("kind", "Which experiment.")
                   .one_of({"deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"})
                   .mandatory(),
               kLayer.mandatory(), object_arg("params", "Parameters by key, as run_experiment takes them.")},
      .rest = Route{"POST", "/api/experiments/auto"},
      .mcp = false,
      .read_only = false,
      .reply = "AutoExperiment",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.experiments().set_auto_experiment(a.string("tab"), a.string("kind"), a.string("layer"),
                                                                  a.object("params")));
          },
  });
  t.push_back({
      .name = "clear_auto_experiment",
      .title = "Forget a page's auto experiment",
      .description = "Forget a tab's auto experiment (the page closed or auto-run went off); runs already queued or "
                     "running go on.",
      .args = {tab},
      .rest = Route{"POST", "/api/experiments/auto/clear"},
      .mcp = false,
      .read_only = false,
      .reply = "AutoExperimentCleared",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.experiments().clear_auto_experiment(a.string("tab"))); },
  });
  return t;
}

}  // namespace nansense::server::command_parts
