// The commands about where the run is (status, architecture, snapshot, layer
// statistics), run control (controller.cpp), the numerical checks
// (controller_debug.cpp) and time travel (controller_time_travel.cpp),
// declared once (commands.h says what a declaration holds).
#include <map>
#include <string>

#include "server/controller/command_parts.h"

namespace nansense::server::command_parts {

namespace {

// The architecture's graph as Mermaid flowchart source (the get_architecture
// of the original NaNsense 0.4.0, Python on PyPI, returns one): a node per layer labelled with its name and
// kind, an arrow per edge.
std::string mermaid(const ArchitectureView& architecture) {
  std::map<std::string, std::string> ids;
  std::string out = "flowchart TD\n";
  for (const auto& layer : architecture.layers) {
    const std::string id = "n" + std::to_string(ids.size());
    ids[layer.name] = id;
    std::string label = layer.name;
    if (!layer.kind.empty() && layer.kind != layer.name) label += " (" + layer.kind + ")";
    std::string escaped;
    for (char ch : label) escaped += ch == '"' ? std::string("#quot;") : std::string(1, ch);
    out += "  " + id + "[\"" + escaped + "\"]\n";
  }
  for (const auto& edge : architecture.edges ? *architecture.edges : std::vector<ArchitectureEdge>()) {
    const auto from = ids.find(edge.from), to = ids.find(edge.to);
    if (from != ids.end() && to != ids.end()) out += "  " + from->second + " --> " + to->second + "\n";
  }
  return out;
}

}  // namespace

std::vector<Command> run_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "get_status",
      .title = "Run status",
      .description =
          "Where the training run is and what it is doing. Returns state (\"running\", \"paused\", \"finished\" "
          "or \"lost\"), mode (the last run-control command: step_batch, step_phase, step_epoch, run_until, "
          "run, detach), live_position (the batch the loop is at), snapshot_position and snapshot_sequence "
          "(the last captured batch, which every stats tool and picture describes), the schedule (epochs, "
          "phases with batch counts; null until the loop has run them once), a hint saying what to do next, "
          "the numerical checks' summary, and lost_reason or internal_errors when something broke. Call it "
          "first and whenever you are unsure what the loop is doing.",
      .args = {},
      .rest = Route{"GET", "/api/status"},
      .mcp = true,
      .read_only = true,
      .reply = "Status",
      .run = [](Controller& c, const Args&) { return json_reply(to_json(c.run_control().get_status())); },
  });
  t.push_back({
      .name = "get_architecture",
      .title = "Network architecture",
      .description =
          "The network as traced from its forward pass: layers in execution order, each with name (the name "
          "every layer argument takes), role (input, module or op), kind (Conv2d, Linear, relu, ...), module "
          "path, the aten ops it ran, output_shape, dtype, the parameters it used and whether it is a pure "
          "shape op; the input layers; and the graph: edges from producer to consumer and the same graph as "
          "Mermaid flowchart source (mermaid). Before the first captured batch, captured is false with a reason.",
      .args = {boolean_arg("include_graph",
                           "Include the graph (edges and mermaid); false leaves both out, for a shorter reply that "
                           "lists the layers only.")
                   .or_else(true)},
      .rest = Route{"GET", "/api/architecture"},
      .mcp = true,
      .read_only = true,
      .reply = "Architecture",
      .run =
          [](Controller& c, const Args& a) {
            ArchitectureView architecture = c.views().get_architecture();
            if (!a.boolean("include_graph")) {
              architecture.edges.reset();
            } else {
              architecture.mermaid = mermaid(architecture);
            }
            return json_reply(architecture);
          },
  });
  t.push_back({
      .name = "get_snapshot",
      .title = "Snapshot summary",
      .description =
          "The last captured batch in brief: per layer its activation's and gradient's tensor statistics, per "
          "parameter its weight's, gradient's and optimizer state's, and the model inputs. The statistics "
          "cover the whole batch; pictures exist for samples 0..samples_kept-1 only, as the snapshot budget "
          "(budget) may keep fewer than batch_size samples of a big model's tensors.",
      .args = {},
      .rest = Route{"GET", "/api/snapshot"},
      .mcp = false,
      .read_only = true,
      .reply = "Snapshot",
      .run = [](Controller& c, const Args&) { return json_reply(c.views().get_snapshot()); },
  });
  t.push_back({
      .name = "get_layer_stats",
      .title = "Layer activation and gradient statistics",
      .description =
          "Statistics of layers in the last captured batch (snapshot_position in get_status), for the activation each "
          "layer produced and the gradient that flowed back into it: shape, dtype, counts of finite, NaN, +Inf and "
          "-Inf values, then over the finite values min, max, mean, population std, median and zero_fraction, and "
          "dead_channels (channels along dim 1 that are exactly zero over the whole batch, e.g. dead ReLUs). "
          "gradient is null with a gradient_note in eval phases and for inputs. Optionally a histogram of the finite "
          "values as [bin centre, count] pairs of the non-empty bins, and the same statistics for one channel. Where "
          "the snapshot budget kept only the batch's first samples (the reply's samples), counts, min, max and mean "
          "still cover the whole batch; the other figures cover the kept samples.",
      .args = {kLayers.described("Layer names from get_architecture (e.g. \"features.0\", \"relu_1\", \"input\"); omit "
                                 "for every layer."),
               boolean_arg("include_histogram", "Add a histogram of each activation's and gradient's finite values.")
                   .or_else(false),
               integer_arg("bins", "Histogram bins, equal width over the finite min..max.")
                   .at_least(2)
                   .at_most(512)
                   .or_else(32),
               integer_arg("channel",
                           "Also report this channel (an index along dim 1, e.g. a conv output channel or a Linear "
                           "feature); its histogram uses the layer's range. Refused for layers without dim 1 or with "
                           "fewer channels.")
                   .at_least(0)},
      .rest = Route{"GET", "/api/stats/layers"},
      .old_routes = {Route{"GET", "/api/layer_stats"}},
      .mcp = true,
      .read_only = true,
      .reply = "LayerStats",
      .run =
          [](Controller& c, const Args& a) {
            ViewArea::LayerStatsOptions o;
            o.include_histogram = a.boolean("include_histogram");
            o.bins = a.integer("bins");
            o.channel = a.optional_integer("channel");
            return json_reply(c.views().get_layer_stats(a.strings("layers"), o));
          },
  });
  t.push_back({
      .name = "get_weight_stats",
      .title = "Layer parameters, gradients and optimizer state",
      .description =
          "A layer's parameters in the last captured batch, read after the optimizer step: for each parameter "
          "the value's and gradient's statistics (shape, non-finite counts, min, max, mean, std, median, L2 "
          "norm), the optimizer's state (e.g. Adam's step, exp_avg, exp_avg_sq; momentum buffers) and its "
          "param group's hyperparameters (lr, betas, weight_decay, ...). Notes say why a gradient or optimizer "
          "state is missing. Layers without parameters are refused with the list of those that have some.",
      .args =
          {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
           strings_arg("parameters",
                       "Only these parameters, qualified (\"features.0.weight\") or short (\"weight\", "
                       "\"bias\"); omit for all.")
               .not_empty()
               .items(1, 64)},
      .rest = Route{"GET", "/api/weight_stats"},
      .mcp = true,
      .read_only = true,
      .reply = "WeightStats",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.weights().get_weight_stats(a.string("layer"), a.strings("parameters")));
          },
  });
  return t;
}

// Stepping, running, pausing and refreshing the loop.
std::vector<Command> run_control_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "step",
      .title = "Step the training loop",
      .description = "Resume the paused loop for one unit and wait for it to pause again: \"batch\" runs one batch, "
                     "\"phase\" runs to the first batch of the next phase (e.g. train -> val), \"epoch\" to the first "
                     "batch of the next epoch. A new snapshot is captured where it pauses. Returns the status; refused "
                     "when training has finished or the loop is lost.",
      .args = {string_arg("unit", "How far to run.").one_of({"batch", "phase", "epoch"}).or_else("batch"), kTimeout},
      .rest = Route{"POST", "/api/step"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run = [](Controller& c,
                const Args& a) { return status_reply(c.run_control().step(a.string("unit"), wait_of(a)), a); },
  });
  t.push_back({
      .name = "run",
      .title = "Run the training loop",
      .description = "Let the loop run. Attached (detach=false): run to the last batch of training and pause there, so "
                     "the final state stays inspectable; waits up to timeout_seconds, and pause stops it earlier. "
                     "Detached (detach=true): train on without pausing or capturing and return at once; pause still "
                     "stops it at the next batch. Returns the status.",
      .args = {boolean_arg("detach", "Run without pausing and return at once.").or_else(false), kTimeout},
      .rest = Route{"POST", "/api/run"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run =
          [](Controller& c, const Args& a) {
            const bool detach = a.boolean("detach");
            Reply r = status_reply(c.run_control().run(detach, wait_of(a)), a);
            if (detach) r.state.reset();  // nothing was waited for
            return r;
          },
  });
  t.push_back({
      .name = "run_until",
      .title = "Run to a position",
      .description =
          "Run until the loop reaches the given batch and pause there (capturing it). The target must lie after "
          "the current position and inside the schedule; phase names and batch counts are in get_status's "
          "schedule. Refusals say which part is out of range.",
      .args = {string_arg("phase", "Phase name, e.g. \"train\" or \"val\".").not_empty().mandatory(),
               integer_arg("epoch", "Epoch index, from 0.").at_least(0).mandatory(),
               integer_arg("batch", "Batch index within the phase, from 0.").at_least(0).mandatory(), kTimeout},
      .rest = Route{"POST", "/api/run_until"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run =
          [](Controller& c, const Args& a) {
            return status_reply(
                c.run_control().run_until(a.string("phase"), a.integer("epoch"), a.integer("batch"), wait_of(a)), a);
          },
  });
  t.push_back({
      .name = "pause",
      .title = "Pause the training loop",
      .description =
          "Pause the running loop at the end of the batch it is in, capture that batch and wait for the pause. "
          "Does nothing when already paused. Returns the status.",
      .args = {kTimeout},
      .rest = Route{"POST", "/api/pause"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run = [](Controller& c, const Args& a) { return status_reply(c.run_control().pause(wait_of(a)), a); },
  });
  t.push_back({
      .name = "refresh",
      .title = "Capture a fresh batch while running",
      .description =
          "While the loop runs, capture its next batch without pausing, so the stats tools and pictures show "
          "current data; waits up to timeout_seconds for it. Returns the status with refreshed=true when the "
          "new snapshot arrived. When paused the snapshot is already current (refreshed=false).",
      .args = {kTimeout.or_else(10)},
      .rest = Route{"POST", "/api/refresh"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run = [](Controller& c, const Args& a) { return json_reply(to_json(c.run_control().refresh(wait_of(a)))); },
  });
  return t;
}

// The numerical checks and their held error (controller_debug.cpp).
std::vector<Command> debug_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "get_debug_report",
      .title = "Numerical issues: NaN/Inf and gradient under/overflow",
      .description =
          "The numerical checks' settings and the standing error, if any: where it was first seen (position), "
          "its reasons (nan, inf, underflow = subnormal gradients, overflow), the checks that ran, one row per "
          "affected layer with the fraction of its values that are NaN / Inf and the fraction of its summed "
          "|grad| in the subnormal / overflow band, the gradient dtype and its band edges, and the root cause: "
          "the producer op (the first op, forward or backward, whose inputs were finite and whose output was "
          "not; with its layer and the statistics of its inputs and outputs) told apart from the ops that "
          "only propagated it, plus the NaN capsule file that replays the batch bit for bit. error is null "
          "when nothing tripped. A trip pauses the run before the optimizer step, so the weights are still "
          "the pre-step ones: inspect with get_weight_stats / render_layer.",
      .args = {},
      .rest = Route{"GET", "/api/debug"},
      .mcp = true,
      .read_only = true,
      .reply = "DebugReport",
      .run = [](Controller& c, const Args&) { return json_reply(c.debug().get_debug_report()); },
  });
  t.push_back({
      .name = "configure_debug_checks",
      .title = "Configure the numerical checks",
      .description =
          "Change the numerical checks; arguments left out keep their value (the names are DebugSettings' own). "
          "Returns get_debug_report.",
      .args = {boolean_arg("enabled", "Master switch for every check (default true)."),
               integer_arg("interval_batches", "Check every n-th batch (1 = every batch, the default).").at_least(1),
               boolean_arg(
                   "check_nan_inf",
                   "Trip on any NaN or +-Inf in activations, their gradients or weight gradients (default true)."),
               boolean_arg(
                   "check_under_over",
                   "Trip on gradients in the subnormal (0 < |g| < finfo.tiny) or overflow (|g| >= finfo.max/16) "
                   "band of their dtype (default true)."),
               number_arg("threshold_fraction",
                          "Under/overflow trips when the band holds at least this fraction of a layer's summed finite "
                          "|grad| (default 0.1).")
                   .above(0)
                   .at_most(1),
               integer_arg("trace_interval_batches",
                           "Also trace every n-th batch at op level (0 = never, the default; about 10% of the traced "
                           "batch's time). Tripped batches are traced anyway.")
                   .at_least(0),
               boolean_arg("rerun_to_trace",
                           "Re-run a tripped batch that was not traced from its recorded state, traced, to name the "
                           "producer op (default true)."),
               strings_arg("allow",
                           "Intended non-finite values that must not trip: op names (\"masked_fill\") or layer names; "
                           "replaces the list, [] clears it.")
                   .not_empty()
                   .items(0, 256)},
      .rest = Route{"POST", "/api/debug/settings"},
      .mcp = true,
      .read_only = false,
      .reply = "DebugReport",
      .run =
          [](Controller& c, const Args& a) {
            DebugArea::DebugChecksUpdate u;
            u.enabled = a.optional_boolean("enabled");
            u.interval_batches = a.optional_integer("interval_batches");
            u.check_nan_inf = a.optional_boolean("check_nan_inf");
            u.check_under_over = a.optional_boolean("check_under_over");
            u.threshold_fraction = a.optional_number("threshold_fraction");
            u.trace_interval_batches = a.optional_integer("trace_interval_batches");
            u.rerun_to_trace = a.optional_boolean("rerun_to_trace");
            u.allow = a.optional_strings("allow");
            return json_reply(c.debug().configure_debug_checks(u));
          },
  });
  t.push_back({
      .name = "silence_debug_check",
      .title = "Silence a numerical check",
      .description = "Turn a check category off and clear it from the standing error: \"nan_inf\" or \"under_over\"; "
                     "without a category, every category of the standing error. Use it when the values are intended; "
                     "configure_debug_checks turns a check back on. Returns get_debug_report.",
      .args = {string_arg("category", "The category to silence; omit for those of the standing error.")
                   .one_of({"nan_inf", "under_over"})},
      .rest = Route{"POST", "/api/debug/silence"},
      .mcp = true,
      .read_only = false,
      .reply = "DebugReport",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.debug().silence_debug_check(a.optional_string("category"))); },
  });
  t.push_back({
      .name = "clear_debug_error",
      .title = "Dismiss the numerical error",
      .description = "Dismiss the standing error; the checks stay on and the next problem is reported afresh. Returns "
                     "get_debug_report.",
      .args = {},
      .rest = Route{"POST", "/api/debug/clear"},
      .mcp = false,
      .read_only = false,
      .reply = "DebugReport",
      .run = [](Controller& c, const Args&) { return json_reply(c.debug().clear_debug_error()); },
  });
  t.push_back({
      .name = "choose_update",
      .title = "Skip or apply the poisoned optimizer update",
      .description = "While the loop is paused before the optimizer step of the batch that tripped (get_debug_report's "
                     "error.update is \"held\"): \"skip\" clears every parameter's gradient when the loop resumes, so "
                     "the loop's optimizer.step() leaves weights, optimizer state and step counts unchanged for that "
                     "batch; \"apply\" lets the update through (the default). Refused when no update is held. Returns "
                     "get_debug_report.",
      .args = {string_arg("action", "skip or apply the held update.").one_of({"skip", "apply"}).mandatory()},
      .rest = Route{"POST", "/api/debug/choose_update"},
      .mcp = true,
      .read_only = false,
      .reply = "DebugReport",
      .run = [](Controller& c, const Args& a) { return json_reply(c.debug().choose_update(a.string("action"))); },
  });
  return t;
}

// Time travel (controller_time_travel.cpp).
std::vector<Command> time_travel_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "get_time_travel_status",
      .title = "Time travel: cached epochs",
      .description =
          "Whether the loop can be rewound and to where: available (false with a reason outside "
          "session.epochs()), cached_epochs (jump targets: epochs whose start is checkpointed), "
          "uncached_epochs, total_epochs, current_epoch, pending_epoch (a jump not carried out yet), the cache "
          "folder with budget_bytes and bytes_used, jumps done and last_error (a failed write or a damaged "
          "file).",
      .args = {},
      .rest = Route{"GET", "/api/time_travel"},
      .mcp = true,
      .read_only = true,
      .reply = "TimeTravelReport",
      .run = [](Controller& c, const Args&) { return json_reply(c.run_control().get_time_travel_status()); },
  });
  t.push_back({
      .name = "time_travel",
      .title = "Rewind to an epoch",
      .description =
          "Jump to the start of a cached epoch (get_time_travel_status lists them), paused or running: the "
          "rest of the current epoch is abandoned, the model, optimizer, LR schedule and RNG are restored "
          "from that epoch's checkpoint, and the loop pauses on its first batch; waits up to timeout_seconds "
          "for that pause. Replays are exact on CPU. Refused with the reason when no epoch loop runs, the "
          "epoch is out of range or not cached, or its checkpoint is damaged. Returns the status.",
      .args = {integer_arg("epoch", "Epoch to jump to, from 0.").at_least(0).mandatory(), kTimeout},
      .rest = Route{"POST", "/api/time_travel"},
      .mcp = true,
      .read_only = false,
      .reply = "Status",
      .run = [](Controller& c,
                const Args& a) { return status_reply(c.run_control().time_travel(a.integer("epoch"), wait_of(a)), a); },
  });
  return t;
}

}  // namespace nansense::server::command_parts
