#include "server/controller/commands.h"

#include <stdexcept>

namespace nansense::server {

namespace {

// --- arguments several commands share, declared once ---

// The longest a command waits for the loop to pause; the wait never holds up
// training, so the bound only limits how long a request stays open.
const Arg kTimeout =
    number_arg("timeout_seconds",
               "How long to wait for the loop to pause again before returning, in seconds (0 returns at once). "
               "The wait never holds up training; on timeout the status says \"running\" and the command stays "
               "in effect.")
        .at_least(0)
        .at_most(300)
        .or_else(30);

const Arg kLayer = string_arg("layer", "A layer name from get_architecture, e.g. \"features.0\".").not_empty();
const Arg kLayers =
    strings_arg("layers", "Layer names from get_architecture (e.g. \"features.0\", \"relu_1\", \"input\").")
        .not_empty()
        .items(1, 64);
const Arg kKind = string_arg("kind",
                             "Which picture: the activation the layer produced, or the gradient that flowed back "
                             "into it.")
                      .one_of({"activation", "gradient"})
                      .or_else("activation");
const Arg kSample = integer_arg("sample",
                                "Index of the sample within the batch; one the snapshot budget left out "
                                "(past get_snapshot's samples_kept) is refused.")
                        .at_least(0)
                        .or_else(0);
const Arg kAverage = boolean_arg("average", "Average the channels into one tile.").or_else(false);
const Arg kValues = string_arg("values",
                               "Show the values as they are, or their magnitude (abs) or square, applied before "
                               "averaging.")
                        .one_of({"unchanged", "abs", "square"})
                        .or_else("unchanged");
// The snapshot a page shows, so that a picture the newer snapshot that
// replaced it cannot give is no refusal of the page's own.
const Arg kShown =
    integer_arg("sequence",
                "The snapshot the caller shows (get_status's snapshot_sequence). The picture is "
                "drawn from the latest snapshot; when that is another one and cannot give it (an eval "
                "batch has no gradient, a phase's last batch fewer samples), the reply says the "
                "snapshot was replaced instead of refusing (REST: 204 No Content; MCP: a conflict naming the latest "
                "sequence).")
        .at_least(0);

// How a parameter's tensor is laid out (render/weight_strip.h): each
// dimension is X, Y, Tile or Index.
const Arg kXDim = integer_arg("x_dim",
                              "The dimension drawn across each tile (X); -1 for none. Omit for the default (the "
                              "last dimension). A dimension given a role leaves its old one; the role's old holder "
                              "becomes an Index.")
                      .at_least(-1);
const Arg kYDim = integer_arg("y_dim",
                              "The dimension drawn down each tile (Y); -1 for none. Omit for the default (a "
                              "matrix's rows, a conv kernel's height).")
                      .at_least(-1);
const Arg kTileDim = integer_arg("tile_dim",
                                 "The dimension whose indices become tiles in a row (Tile); -1 for none. Omit for "
                                 "the default (a conv weight's input channels).")
                         .at_least(-1);
const Arg kIndex = integers_arg("index",
                                "Where each Index dimension (one not given X, Y or Tile) is held, one entry per "
                                "dimension in order (entries of X/Y/Tile dimensions are ignored; missing ones are "
                                "0), e.g. [3] shows a conv weight's output channel 3.")
                       .at_least(0)
                       .items(0, 16);

render::WeightLayoutRequest layout_of(const Args& a) {
  render::WeightLayoutRequest r;
  r.x_dim = a.optional_integer("x_dim");
  r.y_dim = a.optional_integer("y_dim");
  r.tile_dim = a.optional_integer("tile_dim");
  r.index = a.integers("index");
  return r;
}

std::optional<uint64_t> shown_of(const Args& a) {
  const auto shown = a.optional_integer("sequence");
  return shown ? std::optional<uint64_t>(static_cast<uint64_t>(*shown)) : std::nullopt;
}

// --- replies ---

Reply json_reply(json body) {
  Reply r;
  r.body = std::move(body);
  return r;
}

// A command's status, with where the loop was after waiting up to timeout_seconds.
Reply status_reply(const Status& status, const Args& args) {
  Reply r = json_reply(to_json(status));
  r.state = status.state;
  r.waited_seconds = args.number("timeout_seconds");
  return r;
}

Controller::Wait wait_of(const Args& args) {
  return Controller::Wait(static_cast<int64_t>(args.number("timeout_seconds") * 1000));
}

render::StripOptions strip_options(const Args& a) {
  render::StripOptions options;
  options.sample = a.integer("sample");
  options.average = a.boolean("average");
  options.values = render::parse_values(a.string("values"));
  return options;
}

// Every strip of every layer asked for; a strip that cannot be drawn is
// named with its reason, and only no strip at all is a refusal.
Reply render_layer(Controller& c, const Args& a) {
  const auto options = strip_options(a);
  const std::string kind = a.string("kind");
  std::vector<std::string> kinds;
  if (kind != "gradient") kinds.push_back("activation");
  if (kind != "activation") kinds.push_back("gradient");
  Reply r;
  std::string reasons;
  for (const auto& layer : a.strings("layers")) {
    for (const auto& k : kinds) {
      try {
        r.strips.push_back(c.render_strip(layer, k, options));
      } catch (const Refusal& e) {
        r.missing.push_back({layer, k, e.what()});
        reasons += (reasons.empty() ? "" : "; ") + std::string(e.what());
      }
    }
  }
  if (r.strips.empty()) throw Refusal(Refusal::Kind::kInvalidArgument, "no image rendered: " + reasons);
  return r;
}

std::vector<Command> table() {
  std::vector<Command> t;

  t.push_back({"get_status",
               "Run status",
               "Where the training run is and what it is doing. Returns state (\"running\", \"paused\", \"finished\" "
               "or \"lost\"), mode (the last run-control command: step_batch, step_phase, step_epoch, run_until, "
               "run, detach), live_position (the batch the loop is at), snapshot_position and snapshot_sequence "
               "(the last captured batch, which every stats tool and picture describes), the schedule (epochs, "
               "phases with batch counts; null until the loop has run them once), a hint saying what to do next, "
               "the numerical checks' summary, and lost_reason or internal_errors when something broke. Call it "
               "first and whenever you are unsure what the loop is doing.",
               {},
               Route{"GET", "/api/status"},
               true,
               true,
               "Status",
               [](Controller& c, const Args&) { return json_reply(to_json(c.get_status())); }});

  t.push_back({"get_architecture",
               "Network architecture",
               "The network as traced from its forward pass: layers in execution order, each with name (the name "
               "every layer argument takes), role (input, module or op), kind (Conv2d, Linear, relu, ...), module "
               "path, the aten ops it ran, output_shape, dtype, the parameters it used and whether it is a pure "
               "shape op; edges from producer to consumer; the input layers. Before the first captured batch, "
               "captured is false with a reason.",
               {},
               Route{"GET", "/api/architecture"},
               true,
               true,
               "Architecture",
               [](Controller& c, const Args&) { return json_reply(c.get_architecture()); }});

  t.push_back({"get_snapshot",
               "Snapshot summary",
               "The last captured batch in brief: per layer its activation's and gradient's tensor statistics, per "
               "parameter its weight's, gradient's and optimizer state's, and the model inputs. The statistics "
               "cover the whole batch; pictures exist for samples 0..samples_kept-1 only, as the snapshot budget "
               "(budget) may keep fewer than batch_size samples of a big model's tensors.",
               {},
               Route{"GET", "/api/snapshot"},
               false,
               true,
               "Snapshot",
               [](Controller& c, const Args&) { return json_reply(c.get_snapshot()); }});

  t.push_back(
      {"get_layer_stats",
       "Layer activation and gradient statistics",
       "Statistics of layers in the last captured batch (snapshot_position in get_status), for the activation each "
       "layer produced and the gradient that flowed back into it: shape, dtype, counts of finite, NaN, +Inf and "
       "-Inf values, then over the finite values min, max, mean, population std, median and zero_fraction, and "
       "dead_channels (channels along dim 1 that are exactly zero over the whole batch, e.g. dead ReLUs). "
       "gradient is null with a gradient_note in eval phases and for inputs. Optionally a histogram of the finite "
       "values as [bin centre, count] pairs of the non-empty bins, and the same statistics for one channel. Where "
       "the snapshot budget kept only the batch's first samples (the reply's samples), counts, min, max and mean "
       "still cover the whole batch; the other figures cover the kept samples.",
       {kLayers.described("Layer names from get_architecture (e.g. \"features.0\", \"relu_1\", \"input\"); omit "
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
       Route{"GET", "/api/layer_stats"},
       true,
       true,
       "LayerStats",
       [](Controller& c, const Args& a) {
         Controller::LayerStatsOptions o;
         o.include_histogram = a.boolean("include_histogram");
         o.bins = a.integer("bins");
         o.channel = a.optional_integer("channel");
         return json_reply(c.get_layer_stats(a.strings("layers"), o));
       }});

  t.push_back(
      {"get_weight_stats",
       "Layer parameters, gradients and optimizer state",
       "A layer's parameters in the last captured batch, read after the optimizer step: for each parameter "
       "the value's and gradient's statistics (shape, non-finite counts, min, max, mean, std, median, L2 "
       "norm), the optimizer's state (e.g. Adam's step, exp_avg, exp_avg_sq; momentum buffers) and its "
       "param group's hyperparameters (lr, betas, weight_decay, ...). Notes say why a gradient or optimizer "
       "state is missing. Layers without parameters are refused with the list of those that have some.",
       {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
        strings_arg("parameters",
                    "Only these parameters, qualified (\"features.0.weight\") or short (\"weight\", "
                    "\"bias\"); omit for all.")
            .not_empty()
            .items(1, 64)},
       Route{"GET", "/api/weight_stats"},
       true,
       true,
       "WeightStats",
       [](Controller& c, const Args& a) {
         return json_reply(c.get_weight_stats(a.string("layer"), a.strings("parameters")));
       }});

  t.push_back({"step",
               "Step the training loop",
               "Resume the paused loop for one unit and wait for it to pause again: \"batch\" runs one batch, "
               "\"phase\" runs to the first batch of the next phase (e.g. train -> val), \"epoch\" to the first "
               "batch of the next epoch. A new snapshot is captured where it pauses. Returns the status; refused "
               "when training has finished or the loop is lost.",
               {string_arg("unit", "How far to run.").one_of({"batch", "phase", "epoch"}).or_else("batch"), kTimeout},
               Route{"POST", "/api/step"},
               true,
               false,
               "Status",
               [](Controller& c, const Args& a) { return status_reply(c.step(a.string("unit"), wait_of(a)), a); }});

  t.push_back({"run",
               "Run the training loop",
               "Let the loop run. Attached (detach=false): run to the last batch of training and pause there, so "
               "the final state stays inspectable; waits up to timeout_seconds, and pause stops it earlier. "
               "Detached (detach=true): train on without pausing or capturing and return at once; pause still "
               "stops it at the next batch. Returns the status.",
               {boolean_arg("detach", "Run without pausing and return at once.").or_else(false), kTimeout},
               Route{"POST", "/api/run"},
               true,
               false,
               "Status",
               [](Controller& c, const Args& a) {
                 const bool detach = a.boolean("detach");
                 Reply r = status_reply(c.run(detach, wait_of(a)), a);
                 if (detach) r.state.reset();  // nothing was waited for
                 return r;
               }});

  t.push_back({"run_until",
               "Run to a position",
               "Run until the loop reaches the given batch and pause there (capturing it). The target must lie after "
               "the current position and inside the schedule; phase names and batch counts are in get_status's "
               "schedule. Refusals say which part is out of range.",
               {string_arg("phase", "Phase name, e.g. \"train\" or \"val\".").not_empty().mandatory(),
                integer_arg("epoch", "Epoch index, from 0.").at_least(0).mandatory(),
                integer_arg("batch", "Batch index within the phase, from 0.").at_least(0).mandatory(), kTimeout},
               Route{"POST", "/api/run_until"},
               true,
               false,
               "Status",
               [](Controller& c, const Args& a) {
                 return status_reply(c.run_until(a.string("phase"), a.integer("epoch"), a.integer("batch"), wait_of(a)),
                                     a);
               }});

  t.push_back({"pause",
               "Pause the training loop",
               "Pause the running loop at the end of the batch it is in, capture that batch and wait for the pause. "
               "Does nothing when already paused. Returns the status.",
               {kTimeout},
               Route{"POST", "/api/pause"},
               true,
               false,
               "Status",
               [](Controller& c, const Args& a) { return status_reply(c.pause(wait_of(a)), a); }});

  t.push_back({"refresh",
               "Capture a fresh batch while running",
               "While the loop runs, capture its next batch without pausing, so the stats tools and pictures show "
               "current data; waits up to timeout_seconds for it. Returns the status with refreshed=true when the "
               "new snapshot arrived. When paused the snapshot is already current (refreshed=false).",
               {kTimeout.or_else(10)},
               Route{"POST", "/api/refresh"},
               true,
               false,
               "Status",
               [](Controller& c, const Args& a) { return json_reply(to_json(c.refresh(wait_of(a)))); }});

  t.push_back({"get_debug_report",
               "Numerical issues: NaN/Inf and gradient under/overflow",
               "The numerical checks' settings and the standing error, if any: where it was first seen (position), "
               "its reasons (nan, inf, underflow = subnormal gradients, overflow), the checks that ran, one row per "
               "affected layer with the fraction of its values that are NaN / Inf and the fraction of its summed "
               "|grad| in the subnormal / overflow band, the gradient dtype and its band edges, and the root cause: "
               "the producer op (the first op, forward or backward, whose inputs were finite and whose output was "
               "not; with its layer and the statistics of its inputs and outputs) told apart from the ops that "
               "only propagated it, plus the NaN capsule file that replays the batch bit for bit. error is null "
               "when nothing tripped. A trip pauses the run before the optimizer step, so the weights are still "
               "the pre-step ones: inspect with get_weight_stats / render_layer.",
               {},
               Route{"GET", "/api/debug"},
               true,
               true,
               "DebugReport",
               [](Controller& c, const Args&) { return json_reply(c.get_debug_report()); }});

  t.push_back(
      {"configure_debug_checks",
       "Configure the numerical checks",
       "Change the numerical checks; arguments left out keep their value (the names are DebugSettings' own). "
       "Returns get_debug_report.",
       {boolean_arg("enabled", "Master switch for every check (default true)."),
        integer_arg("interval_batches", "Check every n-th batch (1 = every batch, the default).").at_least(1),
        boolean_arg("check_nan_inf",
                    "Trip on any NaN or +-Inf in activations, their gradients or weight gradients (default true)."),
        boolean_arg("check_under_over",
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
       Route{"POST", "/api/debug/settings"},
       true,
       false,
       "DebugReport",
       [](Controller& c, const Args& a) {
         Controller::DebugChecksUpdate u;
         u.enabled = a.optional_boolean("enabled");
         u.interval_batches = a.optional_integer("interval_batches");
         u.check_nan_inf = a.optional_boolean("check_nan_inf");
         u.check_under_over = a.optional_boolean("check_under_over");
         u.threshold_fraction = a.optional_number("threshold_fraction");
         u.trace_interval_batches = a.optional_integer("trace_interval_batches");
         u.rerun_to_trace = a.optional_boolean("rerun_to_trace");
         u.allow = a.optional_strings("allow");
         return json_reply(c.configure_debug_checks(u));
       }});

  t.push_back(
      {"silence_debug_check",
       "Silence a numerical check",
       "Turn a check category off and clear it from the standing error: \"nan_inf\" or \"under_over\"; "
       "without a category, every category of the standing error. Use it when the values are intended; "
       "configure_debug_checks turns a check back on. Returns get_debug_report.",
       {string_arg("category", "The category to silence; omit for those of the standing error.")
            .one_of({"nan_inf", "under_over"})},
       Route{"POST", "/api/debug/silence"},
       true,
       false,
       "DebugReport",
       [](Controller& c, const Args& a) { return json_reply(c.silence_debug_check(a.optional_string("category"))); }});

  t.push_back({"clear_debug_error",
               "Dismiss the numerical error",
               "Dismiss the standing error; the checks stay on and the next problem is reported afresh. Returns "
               "get_debug_report.",
               {},
               Route{"POST", "/api/debug/clear"},
               false,
               false,
               "DebugReport",
               [](Controller& c, const Args&) { return json_reply(c.clear_debug_error()); }});

  t.push_back({"choose_update",
               "Skip or apply the poisoned optimizer update",
               "While the loop is paused before the optimizer step of the batch that tripped (get_debug_report's "
               "error.update is \"held\"): \"skip\" clears every parameter's gradient when the loop resumes, so "
               "the loop's optimizer.step() leaves weights, optimizer state and step counts unchanged for that "
               "batch; \"apply\" lets the update through (the default). Refused when no update is held. Returns "
               "get_debug_report.",
               {string_arg("action", "skip or apply the held update.").one_of({"skip", "apply"}).mandatory()},
               Route{"POST", "/api/debug/choose_update"},
               true,
               false,
               "DebugReport",
               [](Controller& c, const Args& a) { return json_reply(c.choose_update(a.string("action"))); }});

  t.push_back({"get_time_travel_status",
               "Time travel: cached epochs",
               "Whether the loop can be rewound and to where: available (false with a reason outside "
               "session.epochs()), cached_epochs (jump targets: epochs whose start is checkpointed), "
               "uncached_epochs, total_epochs, current_epoch, pending_epoch (a jump not carried out yet), the cache "
               "folder with budget_bytes and bytes_used, jumps done and last_error (a failed write or a damaged "
               "file).",
               {},
               Route{"GET", "/api/time_travel"},
               true,
               true,
               "TimeTravelReport",
               [](Controller& c, const Args&) { return json_reply(c.get_time_travel_status()); }});

  t.push_back(
      {"time_travel",
       "Rewind to an epoch",
       "Jump to the start of a cached epoch (get_time_travel_status lists them), paused or running: the "
       "rest of the current epoch is abandoned, the model, optimizer, LR schedule and RNG are restored "
       "from that epoch's checkpoint, and the loop pauses on its first batch; waits up to timeout_seconds "
       "for that pause. Replays are exact on CPU. Refused with the reason when no epoch loop runs, the "
       "epoch is out of range or not cached, or its checkpoint is damaged. Returns the status.",
       {integer_arg("epoch", "Epoch to jump to, from 0.").at_least(0).mandatory(), kTimeout},
       Route{"POST", "/api/time_travel"},
       true,
       false,
       "Status",
       [](Controller& c, const Args& a) { return status_reply(c.time_travel(a.integer("epoch"), wait_of(a)), a); }});

  t.push_back({"render_strip",
               "Picture one strip",
               "A PNG of one sample's activation or gradient of one layer in the last captured batch (the UI's "
               "strips), with what it shows as JSON beside it.",
               {kLayer.mandatory(), kKind, kSample, kAverage, kValues, kShown},
               Route{"GET", "/api/render/strip"},
               false,
               true,
               "StripInfo",
               [](Controller& c, const Args& a) {
                 Reply r;
                 r.strips.push_back(c.render_strip(a.string("layer"), a.string("kind"), strip_options(a), shown_of(a)));
                 return r;
               }});

  t.push_back({"render_instrument_strip",
               "Picture one layer-tensor instrument's output",
               "A PNG of one sample of a watch_layer_tensor instrument's output for a layer in the last captured "
               "batch (the extra strips under a card), drawn like render_strip, with what it shows as JSON beside "
               "it (kind \"instrument:<name>\").",
               {kLayer.mandatory(),
                string_arg("instrument", "The instrument's name, as registered with watch_layer_tensor.")
                    .not_empty()
                    .mandatory(),
                kSample, kAverage, kValues, kShown},
               Route{"GET", "/api/render/instrument_strip"},
               false,
               true,
               "InstrumentStripInfo",
               [](Controller& c, const Args& a) {
                 Reply r;
                 r.strips.push_back(c.render_strip(a.string("layer"), "instrument:" + a.string("instrument"),
                                                   strip_options(a), shown_of(a)));
                 return r;
               }});

  t.push_back(
      {"render_weight_strip",
       "Picture one tensor of a parameter",
       "A PNG of one tensor of a layer's parameter in the last captured batch (the Weights page's strips): "
       "the weight, its gradient, a tensor-valued optimizer state entry or a weight-tensor instrument's "
       "output, laid out by dimension roles, with what it shows as JSON beside it.",
       {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
        string_arg("parameter", "The parameter, qualified (\"features.0.weight\") or short (\"weight\").")
            .not_empty()
            .mandatory(),
        string_arg("tensor",
                   "Which tensor: \"weight\", \"gradient\", \"state:<key>\" (an optimizer state entry, "
                   "e.g. \"state:exp_avg\") or \"instrument:<name>\" (a watch_weight_tensor instrument).")
            .not_empty()
            .or_else("weight"),
        kXDim, kYDim, kTileDim, kIndex, kShown},
       Route{"GET", "/api/render/weight_strip"},
       false,
       true,
       "WeightStripInfo",
       [](Controller& c, const Args& a) {
         Reply r;
         r.weights.push_back(
             c.render_weight(a.string("layer"), a.string("parameter"), a.string("tensor"), layout_of(a), shown_of(a)));
         return r;
       }});

  t.push_back(
      {"render_weights",
       "Picture a layer's weights, gradients and optimizer state",
       "PNG pictures of each parameter of a layer in the last captured batch (read after the optimizer step): the "
       "weight, its gradient, every tensor-valued optimizer state entry (SGD's momentum_buffer, Adam's exp_avg and "
       "exp_avg_sq, ...) and each weight-tensor instrument's output, one strip each on a diverging scale centred "
       "on zero (blue negative, red positive; NaN a magenta/black checker, +Inf yellow, -Inf green). Each "
       "dimension takes a role: X (across a tile), Y (down a tile), Tile (one tile per index, in a row) or Index "
       "(held at one index). Defaults: a conv weight [O,I,kH,kW] shows output channel index[0]'s kernels as tiles "
       "across the input channels; a matrix one image; a vector one row. x_dim/y_dim/tile_dim/index apply to the "
       "tensors shaped like their parameter; the others keep their defaults. The text adds per parameter the "
       "scalar optimizer state (Adam's step) and the param group's live hyperparameters (lr, momentum, ...).",
       {kLayer.described("A layer name from get_architecture that has parameters, e.g. \"features.0\".").mandatory(),
        strings_arg("parameters",
                    "Only these parameters, qualified (\"features.0.weight\") or short (\"weight\", \"bias\"); omit "
                    "for all.")
            .not_empty()
            .items(1, 64),
        kXDim, kYDim, kTileDim, kIndex},
       std::nullopt,
       true,
       true,
       "",
       [](Controller& c, const Args& a) {
         auto drawn = c.render_weights(a.string("layer"), a.strings("parameters"), layout_of(a));
         Reply r;
         r.weights = std::move(drawn.pictures);
         r.weights_missing = std::move(drawn.missing);
         r.body = {{"parameters", std::move(drawn.parameters)}};
         return r;
       }});

  t.push_back(
      {"render_layer",
       "Picture a layer's activations and gradients",
       "PNG pictures of layers in the last captured batch, drawn by the same renderer as the web UI: one sample's "
       "activation and/or gradient, one tile per channel in a row (a [N,F] layer is one row of F pixels). Colours: "
       "a diverging scale centred on zero (blue negative, white zero, red positive) shared by all tiles, or a "
       "sequential scale for values=abs|square; NaN is a magenta/black checker, +Inf yellow, -Inf green. Each "
       "image comes with a caption giving the scale's end value, the tile layout and non-finite counts. A missing "
       "picture (no gradient in an eval phase) is replaced by its reason.",
       {kLayers.mandatory(),
        kKind
            .described("Which pictures per layer: the activation, the gradient flowing back into it, or both (two "
                       "images).")
            .one_of({"activation", "gradient", "both"})
            .or_else("both"),
        kSample, kAverage, kValues},
       std::nullopt,
       true,
       true,
       "",
       render_layer});

  t.push_back(
      {"render_input",
       "Picture a model input",
       "A PNG of one sample of a model input in the last captured batch, as the image it was: undone "
       "normalisation (the session's input_mean/input_std) and the session's input transform where set; an "
       "input that is not an image ([N,F] features, tokens) is drawn as a colour strip, with a hint naming "
       "the option that would show it as an image. Use it beside render_layer to see what a layer responded "
       "to.",
       {integer_arg("input", "Index of the model input (get_architecture's inputs, in order).").at_least(0).or_else(0),
        kSample, kShown},
       Route{"GET", "/api/render/input"},
       true,
       true,
       "InputInfo",
       [](Controller& c, const Args& a) {
         Reply r;
         r.input = c.render_input(a.integer("input"), a.integer("sample"), shown_of(a));
         return r;
       }});

  // --- statistics over time (controller_history.cpp) ---
  const std::string settings_reply =
      " Returns the settings: update_frequency {unit, n, phase}, stats_scope, watched_layers, watch_performance "
      "{channel_limit_enabled, channel_limit, histogram_sample, samples_per_channel, average_galleries}, "
      "patch_layers (the layers Min/Max galleries collect for; null: the watched layers), stats_collecting "
      "(whether batches are collected now), "
      "auto_run_experiments, experiment_defaults (the session's parameter defaults per experiment kind) and "
      "experiment_time_limit_seconds.";

  t.push_back({"get_settings",
               "Statistics and live-update settings",
               "How often a running loop is captured and published without pausing (update_frequency), which "
               "layers collect statistics over time (stats_scope none/watched/all, watched_layers), how much "
               "per-channel detail is kept (watch_performance), whether collection is on (stats_collecting), and "
               "the experiments' settings: auto_run_experiments, experiment_defaults ({kind: {param: value}}, set "
               "by set_experiment_defaults) and experiment_time_limit_seconds.",
               {},
               Route{"GET", "/api/settings"},
               true,
               true,
               "Settings",
               [](Controller& c, const Args&) { return json_reply(c.get_settings()); }});

  t.push_back({"set_update_frequency",
               "Set the live-update cadence",
               "While the loop runs, capture and publish a batch without pausing every n batches (of one phase "
               "when phase is given), every n epochs (the epoch's first batch) or every n seconds of training, so "
               "get_status, the stats tools and pictures follow the run. A detached run publishes nothing. The "
               "default, every 2 seconds, costs about 1% on the demo; every batch costs what capture costs (about "
               "1.5x a batch)." +
                   settings_reply,
               {string_arg("unit", "What n counts.").one_of({"batch", "epoch", "seconds"}).mandatory(),
                number_arg("n", "How many: a whole number >= 1 for batch and epoch, any number > 0 for seconds.")
                    .above(0)
                    .at_most(1e6)
                    .mandatory(),
                string_arg("phase", "Unit batch only: count only this phase's batches, e.g. \"train\".").not_empty()},
               Route{"POST", "/api/settings/update_frequency"},
               true,
               false,
               "Settings",
               [](Controller& c, const Args& a) {
                 return json_reply(c.set_update_frequency(a.string("unit"), a.number("n"), a.optional_string("phase")));
               }});

  t.push_back({"set_stats_scope",
               "Choose which layers collect statistics",
               "none: collect nothing (what was collected stays); watched: the watched layers (watch_layers); all: "
               "every layer but pure shape ops. Narrowing to watched drops what the other layers collected. "
               "Collection runs on the batches' own device with no copy; its cost grows with the values folded "
               "(the demo CNN: 3 layers about 5x a plain batch, every layer about 10x)." +
                   settings_reply,
               {string_arg("scope", "Which layers collect.").one_of({"none", "watched", "all"}).mandatory()},
               Route{"POST", "/api/stats/scope"},
               true,
               false,
               "Settings",
               [](Controller& c, const Args& a) { return json_reply(c.set_stats_scope(a.string("scope"))); }});

  t.push_back({"watch_layers",
               "Watch layers",
               "Add layers to the watched set: with stats_scope watched (the default) they collect per-epoch "
               "statistics of their activations and gradients from the next batch on. Names come from "
               "get_architecture; unknown names are refused, naming each, and nothing changes." +
                   settings_reply,
               {kLayers.mandatory()},
               Route{"POST", "/api/stats/watch"},
               true,
               false,
               "Settings",
               [](Controller& c, const Args& a) { return json_reply(c.watch_layers(a.strings("layers"))); }});

  t.push_back({"unwatch_layers",
               "Stop watching layers",
               "Remove layers from the watched set; with stats_scope watched their collected statistics are "
               "dropped at the next batch." +
                   settings_reply,
               {kLayers.mandatory()},
               Route{"POST", "/api/stats/unwatch"},
               true,
               false,
               "Settings",
               [](Controller& c, const Args& a) { return json_reply(c.unwatch_layers(a.strings("layers"))); }});

  t.push_back(
      {"set_watch_performance",
       "Per-channel detail of the statistics",
       "How many channels (dim 1) keep their own histogram, and how many values of each tensor the CPU "
       "histograms count (count, mean, std, min, max, non-finite counts and dead channels stay exact). Any effective "
       "change flushes the layer statistics "
       "collected so far (statistics_flushed says whether it did); logged scalars, metrics and parameter "
       "samples stay. Arguments left out keep their value." +
           settings_reply,
       {boolean_arg("channel_limit_enabled",
                    "Keep per-channel histograms for only the first channel_limit "
                    "channels (default true)."),
        integer_arg("channel_limit", "Channels kept per layer when limited (default 16).").at_least(1).at_most(4096),
        integer_arg("histogram_sample",
                    "On the CPU, the most values of each tensor a histogram counts, "
                    "evenly spread (default 16384; 0 counts every value).")
            .at_least(0),
        integer_arg("samples_per_channel",
                    "Inputs a Min/Max gallery keeps per channel and ranking "
                    "(default 5; 0 turns galleries off).")
            .at_least(0)
            .at_most(64),
        boolean_arg("average_galleries",
                    "Also rank inputs by a channel's spatial mean (max_average, "
                    "min_average), keeping whole inputs (default false).")},
       Route{"POST", "/api/stats/performance"},
       true,
       false,
       "Settings",
       [](Controller& c, const Args& a) {
         Controller::PerformanceChange change;
         change.channel_limit_enabled = a.optional_boolean("channel_limit_enabled");
         change.channel_limit = a.optional_integer("channel_limit");
         change.histogram_sample = a.optional_integer("histogram_sample");
         change.samples_per_channel = a.optional_integer("samples_per_channel");
         change.average_galleries = a.optional_boolean("average_galleries");
         return json_reply(c.set_watch_performance(change));
       }});
  t.push_back(
      {"set_patch_layers",
       "Which layers keep Min/Max galleries",
       "Which collected layers keep Min/Max galleries (the inputs that drove each channel highest and "
       "lowest): these layers, or, with layers omitted, the watched ones (the default: scope all collects "
       "every layer's statistics but galleries only for the watched). Galleries cost the most time and "
       "memory of the statistics; histograms and graphs are unaffected, and galleries already collected "
       "stay." +
           settings_reply,
       {kLayers.described("Layer names from get_architecture; omit for the watched layers.")},
       Route{"POST", "/api/stats/patch_layers"},
       true,
       false,
       "Settings",
       [](Controller& c, const Args& a) { return json_reply(c.set_patch_layers(a.optional_strings("layers"))); }});

  t.push_back({"list_stats",
               "What statistics were collected",
               "The statistics collected over time: layers in graph order with their phases and the epochs each "
               "has, the parameters sampled per layer, the logged scalar and metric series (name, phase, layer), "
               "the 212 signed-log bin edges and the device memory held. sequence grows with every publish.",
               {},
               Route{"GET", "/api/stats"},
               true,
               true,
               "StatsList",
               [](Controller& c, const Args&) { return json_reply(c.list_stats()); }});

  t.push_back({"get_stats_history",
               "A layer's statistics per epoch",
               "Per phase and epoch, a layer's activation and gradient statistics over every collected batch: n, "
               "sum, sum_sq, mean, std, median, min, max over finite values, NaN/+Inf/-Inf counts, dead channels "
               "(every value in the zero band |x| < 1e-9) and, for the newest epoch, 211-bin signed-log "
               "histograms (edges given) for the layer and per channel; plus its parameters' samples at each "
               "epoch's first collected batch (norms, mean, std, min, max of value and gradient, update_ratio = "
               "||step change|| / ||weight||).",
               {kLayer.mandatory(), string_arg("phase", "Only this phase, e.g. \"train\".").not_empty()},
               Route{"GET", "/api/stats/history"},
               true,
               true,
               "StatsHistory",
               [](Controller& c, const Args& a) {
                 return json_reply(c.get_stats_history(a.string("layer"), a.optional_string("phase")));
               }});

  t.push_back({"get_current_stats",
               "A layer's statistics in the last captured batch",
               "The same statistics as get_stats_history (same bins and channel limit) over the last captured "
               "batch only, for any layer, watched or not.",
               {kLayer.mandatory()},
               Route{"GET", "/api/stats/current"},
               true,
               true,
               "CurrentStats",
               [](Controller& c, const Args& a) { return json_reply(c.get_current_stats(a.string("layer"))); }});

  t.push_back({"get_metrics",
               "Logged scalars and metric series",
               "Every series logged with session.log_scalar (loss, accuracy, ...) and every watch_metric "
               "instrument's series per layer and phase: points {epoch, batch (null for an epoch-reduced point), "
               "x = epoch + batch / batches in the phase, value}; failed lists instruments that threw and were "
               "disabled.",
               {kLayers.described("Only the metric series of these layers (logged scalars always come); omit for "
                                  "all.")},
               Route{"GET", "/api/metrics"},
               true,
               true,
               "Metrics",
               [](Controller& c, const Args& a) { return json_reply(c.get_metrics(a.strings("layers"))); }});

  t.push_back(
      {"render_histogram",
       "Picture a layer's value distribution",
       "A PNG chart of the newest epoch's histograms over the 211 signed-log bins (7 per decade over "
       "1e-9..1e6 each side, a zero band in the middle): per layer a panel for activations and one for "
       "gradients, a coloured series per phase, end bins that hold +-Inf marked as clipped. Drawn by the "
       "server with axes, labels and a legend, under 1568 px.",
       {kLayers.mandatory().items(1, 8), string_arg("phase", "Only this phase; omit for every phase.").not_empty(),
        boolean_arg("log_x",
                    "Symmetric log x axis: every bin the same width (default false: a linear "
                    "value axis over the occupied bins).")
            .or_else(false),
        boolean_arg("log_y", "Log count axis.").or_else(false),
        integer_arg("channel", "One channel's histogram (an index along dim 1) instead of the layer's.").at_least(0)},
       Route{"GET", "/api/render/histogram"},
       true,
       true,
       "HistogramInfo",
       [](Controller& c, const Args& a) {
         Controller::HistogramOptions o;
         o.layers = a.strings("layers");
         o.phase = a.optional_string("phase");
         o.log_x = a.boolean("log_x");
         o.log_y = a.boolean("log_y");
         o.channel = a.optional_integer("channel");
         Reply r;
         r.histogram = c.render_histogram(o);
         return r;
       }});

  // --- Min/Max galleries and bin samples (controller_galleries.cpp) ---
  const Arg gallery_phase =
      string_arg("phase", "The phase; omit for the training phase when it has galleries, else the first that does.")
          .not_empty();
  const Arg heatmap = boolean_arg("heatmap",
                                  "Overlay the channel's activation on each input, signed (red "
                                  "positive, blue negative; default false).")
                          .or_else(false);
  auto gallery_options = [](const Args& a) {
    Controller::GalleryOptions o;
    o.layer = a.string("layer");
    o.phase = a.optional_string("phase");
    o.heatmap = a.boolean("heatmap");
    return o;
  };
  t.push_back({"get_extremes",
               "A Min/Max gallery's cells",
               "One ranking of a layer's Min/Max gallery in the newest epoch of a phase: per channel (the first "
               "channel_limit) and slot, the input that drove the channel highest (max_*) or lowest (min_*), where "
               "it came from (batch, sample, the position in the activation, the crop's origin), its score and the "
               "crop as a base64 PNG.",
               {kLayer.mandatory(), gallery_phase,
                string_arg("ranking",
                           "max_pixel / min_pixel (input crops around the extreme position), or "
                           "max_average / min_average (whole inputs, with average_galleries on).")
                    .one_of({"max_pixel", "min_pixel", "max_average", "min_average"})
                    .or_else("max_pixel"),
                heatmap},
               Route{"GET", "/api/stats/extremes"},
               false,
               true,
               "Extremes",
               [=](Controller& c, const Args& a) {
                 auto o = gallery_options(a);
                 o.grids = {a.string("ranking")};
                 return json_reply(c.get_extremes(o));
               }});
  t.push_back({"render_extreme_patches",
               "Picture the inputs that drive each channel",
               "A PNG of a layer's Min/Max galleries for the newest epoch of a phase: per grid a table with a column "
               "per channel and a row per kept sample, each cell the input crop around where the channel was highest "
               "(max_pixel) or lowest (min_pixel), or the whole input ranked by the channel's mean (max_average, "
               "min_average: needs average_galleries in set_watch_performance). Collected for watched layers with "
               "an image-like model input.",
               {kLayer.mandatory(), gallery_phase,
                strings_arg("grids", "Rankings to draw (default max_pixel and min_pixel).")
                    .one_of({"max_pixel", "min_pixel", "max_average", "min_average"})
                    .items(1, 4),
                heatmap},
               Route{"GET", "/api/render/extremes"},
               true,
               true,
               "ExtremesPicture",
               [=](Controller& c, const Args& a) {
                 auto o = gallery_options(a);
                 o.grids = a.strings("grids");
                 Reply r;
                 r.picture = c.render_extreme_patches(o);
                 return r;
               }});
  auto bin_options = [](const Args& a) {
    Controller::BinSampleOptions o;
    o.layer = a.string("layer");
    o.kind = a.string("kind");
    o.channel = a.optional_integer("channel");
    o.bin = a.integer("bin");
    o.count = a.integer("count");
    return o;
  };
  const std::vector<Arg> bin_args = {
      kLayer.mandatory(),
      string_arg("kind", "Which tensor: the activation or its gradient.")
          .one_of({"activation", "gradient"})
          .or_else("activation"),
      integer_arg("channel", "A channel (dim 1); omit for the whole layer.").at_least(0),
      integer_arg("bin", "The histogram bin, 0..210 (105 is the zero band; list_stats gives the edges).")
          .mandatory()
          .at_least(0)
          .at_most(210),
      integer_arg("count", "How many elements to show (default 6).").at_least(1).at_most(32).or_else(6)};
  t.push_back({"get_bin_samples", "Elements in a histogram bin",
               "A few elements of the last captured batch whose value falls in a histogram bin (of one channel, or "
               "the whole layer), drawn at random (the same ones for the same snapshot): per element its sample, "
               "position and value, and the input crop around it as a base64 PNG.",
               bin_args, Route{"GET", "/api/stats/bin_samples"}, false, true, "BinSamples",
               [=](Controller& c, const Args& a) { return json_reply(c.get_bin_samples(bin_options(a))); }});
  t.push_back({"render_bin_samples", "Picture the inputs behind a histogram bar",
               "A PNG of a few elements of the last captured batch whose value falls in a histogram bin (of one "
               "channel or the whole layer): per element the input crop around it with its sample, position and "
               "value.",
               bin_args, Route{"GET", "/api/render/bin_samples"}, true, true, "BinSamplesPicture",
               [=](Controller& c, const Args& a) {
                 Reply r;
                 r.picture = c.render_bin_samples(bin_options(a));
                 return r;
               }});

  // --- experiments on the paused model (controller_experiments.cpp) ---
  const Arg seq = integer_arg("seq", "The experiment's number, as run_experiment returned it.").at_least(1);
  t.push_back({"list_experiments",
               "Experiment kinds, layers and parameters",
               "The interpretability experiments that run on the paused model: per kind (deep_dream, gradcam, "
               "neuron_gradient, neuron_ig, occlusion) its title, one-line summary, description, the layers it "
               "accepts (and the others with the reason), its parameters (key, type, default as the session sets "
               "it, minimum, maximum, options, description); the time limit per run in seconds and whether "
               "auto-run is on.",
               {},
               Route{"GET", "/api/experiments"},
               true,
               true,
               "ExperimentList",
               [](Controller& c, const Args&) { return json_reply(c.list_experiments()); }});
  t.push_back(
      {"run_experiment",
       "Run an experiment on the paused model",
       "Queue an experiment on a layer of the paused model and wait up to timeout_seconds for it: Deep Dream "
       "(synthesise what each channel responds to), Grad-CAM (where the layer saw evidence for a class), Neuron "
       "Gradient, Neuron Integrated Gradients and Occlusion (how the input drives a layer-channel's mean "
       "activation). params are layered: the kind's defaults, then the session's, then these; unknown keys are "
       "listed in ignored_params. The training loop must be paused unless auto-run is on (then it runs at the next "
       "live update). Requests run one at a time in order; the model, its gradients, buffers, training flags and "
       "RNG are left bit for bit as they were. Returns the result: seq (for get_experiment_result, "
       "render_experiment, cancel_experiment), stage (queued, running, done, stopped, failed), step/total, "
       "objective, per-sample target values and attribution sums, and notes.",
       {string_arg("kind", "Which experiment.")
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
            .or_else(120)},
       Route{"POST", "/api/experiments/run"},
       true,
       false,
       "ExperimentResult",
       [](Controller& c, const Args& a) {
         return json_reply(c.run_experiment(a.string("kind"), a.string("layer"), a.object("params"), wait_of(a)));
       }});
  t.push_back({"get_experiment_result",
               "An experiment's progress or outcome",
               "The experiment's state: stage (queued with queued_ahead, running, done, stopped with stop_reason, "
               "failed with error), step/total, objective (Deep Dream's mean target activation, and its "
               "history), per-sample target values, attribution sums and ranges. Only the 8 most recent "
               "experiments are kept.",
               {seq.mandatory()},
               Route{"GET", "/api/experiments/result"},
               true,
               true,
               "ExperimentResult",
               [](Controller& c, const Args& a) {
                 return json_reply(c.get_experiment_result(static_cast<uint64_t>(a.integer("seq"))));
               }});
  t.push_back({"cancel_experiment",
               "Cancel experiments",
               "Stop one experiment (queued or running), or every one when seq is left out. A stopped run keeps "
               "what it had produced. Returns how many were cancelled.",
               {seq},
               Route{"POST", "/api/experiments/cancel"},
               true,
               false,
               "ExperimentCancel",
               [](Controller& c, const Args& a) {
                 auto s = a.optional_integer("seq");
                 return json_reply(
                     c.cancel_experiment(s ? std::optional<uint64_t>(static_cast<uint64_t>(*s)) : std::nullopt));
               }});
  t.push_back({"render_experiment",
               "Picture an experiment's result",
               "A PNG of an experiment's result (as far as it got): Deep Dream's dreamed image per channel (after "
               "the starting sample when it started from one); for the attribution kinds one row per sample, the "
               "attribution map beside the input, or over it with overlay=true. Maps are drawn at the input's "
               "size.",
               {seq.mandatory(), boolean_arg("overlay", "Draw attributions over the input.").or_else(false)},
               Route{"GET", "/api/render/experiment"},
               true,
               true,
               "ExperimentPictureInfo",
               [](Controller& c, const Args& a) {
                 Reply r;
                 r.experiment = c.render_experiment(static_cast<uint64_t>(a.integer("seq")), a.boolean("overlay"));
                 return r;
               }});
  t.push_back(
      {"set_auto_run_experiments",
       "Run experiments while training runs",
       "On: run_experiment is accepted while the loop runs, and the request runs at the next live update "
       "(a captured batch), holding training for its duration. Off (the default): experiments need the "
       "loop paused.",
       {boolean_arg("enabled", "Auto-run on or off.").mandatory()},
       Route{"POST", "/api/experiments/auto_run"},
       true,
       false,
       "ExperimentAutoRun",
       [](Controller& c, const Args& a) { return json_reply(c.set_auto_run_experiments(a.boolean("enabled"))); }});
  t.push_back({"set_experiment_defaults",
               "Set the session's experiment defaults",
               "Replace one experiment kind's session defaults: the parameter values run_experiment (and every "
               "page) starts from, layered between the kind's own defaults and the caller's params (kind defaults "
               "-> session defaults -> caller). Values are checked as run_experiment checks them; an empty params "
               "object clears the kind's defaults. list_experiments shows the effective defaults. Returns the "
               "settings (experiment_defaults among them) and ignored_params: unknown keys, not kept.",
               {string_arg("kind", "Which experiment kind the defaults are for.")
                    .one_of({"deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"})
                    .mandatory(),
                object_arg("params",
                           "Parameter values by key, e.g. {\"steps\": 150, \"channels\": 4}; see "
                           "list_experiments.")
                    .mandatory()},
               Route{"POST", "/api/experiments/defaults"},
               true,
               false,
               "ExperimentDefaults",
               [](Controller& c, const Args& a) {
                 return json_reply(c.set_experiment_defaults(a.string("kind"), a.object("params")));
               }});
  // A page's registration lives only while the page renews it (a heartbeat
  // every second); an agent has no page to renew it, so these are not MCP tools.
  const Arg tab =
      string_arg("tab", "A name for the page (browser tab) that owns the auto experiment.").not_empty().mandatory();
  t.push_back({"set_auto_experiment",
               "Register a page's auto experiment",
               "Register, or renew, the experiment a page shows so it re-runs at every snapshot (every pause and "
               "live update) while auto-run is on. Keyed per tab: tabs never replace or cancel each other's runs; "
               "a tab's own queued run gives way to its newer one. A new or changed experiment runs at once when "
               "the loop is paused. The registration expires 5 s after its last renewal (the page renews it every "
               "second). Checked like run_experiment.",
               {tab,
                string_arg("kind", "Which experiment.")
                    .one_of({"deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"})
                    .mandatory(),
                kLayer.mandatory(), object_arg("params", "Parameters by key, as run_experiment takes them.")},
               Route{"POST", "/api/experiments/auto"},
               false,
               false,
               "AutoExperiment",
               [](Controller& c, const Args& a) {
                 return json_reply(
                     c.set_auto_experiment(a.string("tab"), a.string("kind"), a.string("layer"), a.object("params")));
               }});
  t.push_back({"clear_auto_experiment",
               "Forget a page's auto experiment",
               "Forget a tab's auto experiment (the page closed or auto-run went off); runs already queued or "
               "running go on.",
               {tab},
               Route{"POST", "/api/experiments/auto/clear"},
               false,
               false,
               "AutoExperimentCleared",
               [](Controller& c, const Args& a) { return json_reply(c.clear_auto_experiment(a.string("tab"))); }});

  // --- probes on the paused model (controller_probes.cpp) ---
  const Arg probe_wait =
      number_arg("timeout_seconds",
                 "How long to wait for the probe's run to finish, in seconds (0 returns at once; the run goes on).")
          .at_least(0)
          .at_most(300)
          .or_else(10);
  const std::string probe_returns =
      " Returns the probe status (as get_probe_status) once the probe ran or timeout_seconds passed.";
  t.push_back({"get_probe_status",
               "The probe's settings and last run",
               "The probe: whether one is active, the pinned batch and where it was captured, the forward mode "
               "(unchanged, eval, train), the perturbations (input, sample, index, values), runs completed, "
               "whether a run is pending, the newest result (its run, the batch it re-ran, whether the strips show "
               "perturbed - original) or its error, and a hint. While a probe is active every picture and "
               "statistic of the snapshot shows the probe's result in place of the last captured batch.",
               {},
               Route{"GET", "/api/probe"},
               true,
               true,
               "ProbeStatus",
               [](Controller& c, const Args&) { return json_reply(c.get_probe_status()); }});
  t.push_back({"pin_batch",
               "Pin the current batch",
               "Pin the inputs of the last captured batch: every later capture (each step, each live update, "
               "after time travel) re-runs them, forward only, on the model as it is then, so one batch can be "
               "watched as training moves. The loop must be paused. Probes never change training: the model's "
               "parameters, gradients, buffers, training flags and RNG are restored bit for bit." +
                   probe_returns,
               {probe_wait},
               Route{"POST", "/api/probe/pin"},
               true,
               false,
               "ProbeStatus",
               [](Controller& c, const Args& a) { return json_reply(c.pin_batch(wait_of(a))); }});
  t.push_back({"unpin_batch",
               "Unpin the batch",
               "Stop re-running the pinned batch; the last captured batch is shown again unless a forward mode or "
               "perturbations keep a probe active." +
                   probe_returns,
               {probe_wait},
               Route{"POST", "/api/probe/unpin"},
               true,
               false,
               "ProbeStatus",
               [](Controller& c, const Args& a) { return json_reply(c.unpin_batch(wait_of(a))); }});
  t.push_back(
      {"set_probe_mode",
       "Set the probe's forward mode",
       "Re-run the batch (pinned, else the last captured) with the model in eval mode (BatchNorm's running "
       "statistics, no dropout) or train mode (batch statistics, dropout), or as training left each "
       "module (unchanged, which ends the probe unless a pin or perturbations keep it). Training's own "
       "modes are restored after each run. The loop must be paused to turn a mode on." +
           probe_returns,
       {string_arg("mode", "The forward mode.").one_of({"unchanged", "eval", "train"}).mandatory(), probe_wait},
       Route{"POST", "/api/probe/mode"},
       true,
       false,
       "ProbeStatus",
       [](Controller& c, const Args& a) { return json_reply(c.set_probe_mode(a.string("mode"), wait_of(a))); }});
  t.push_back(
      {"add_perturbation",
       "Change input values and re-run",
       "Set input values of one sample of the batch (pinned, else the last captured) and re-run it: for "
       "an image input [N,C,H,W] the pixel at index [y, x] gets values (one per channel, or one for every "
       "channel); for [N,H,W] one value at [y, x]; for a flat input [N,F] index is [feature]. Values are "
       "in the input's own units (after normalisation). A perturbation of the same value replaces it. "
       "While any exists the layers show perturbed - original (the input shows the perturbed input). "
       "Checked against the actual input: a misfit says what fits. The loop must be paused." +
           probe_returns,
       {integers_arg("index", "[y, x] of an image input, or [feature] of a flat input.")
            .at_least(0)
            .items(1, 2)
            .mandatory(),
        numbers_arg("values", "The new value(s): one per channel, or one for every channel.")
            .items(1, 4096)
            .mandatory(),
        integer_arg("sample", "Which sample of the batch.").at_least(0).or_else(0),
        string_arg("input_name", "Which model input (get_architecture's inputs); the first when left out.").not_empty(),
        probe_wait},
       Route{"POST", "/api/probe/perturb"},
       true,
       false,
       "ProbeStatus",
       [](Controller& c, const Args& a) {
         return json_reply(c.add_perturbation(a.integers("index"), a.numbers("values"), a.integer("sample"),
                                              a.optional_string("input_name"), wait_of(a)));
       }});
  t.push_back({"clear_perturbations",
               "Clear the perturbations",
               "Remove every perturbation; the layers show the (pinned or captured) batch itself again. Returns "
               "the probe status with cleared: how many were removed.",
               {probe_wait},
               Route{"POST", "/api/probe/clear"},
               true,
               false,
               "ProbeStatus",
               [](Controller& c, const Args& a) { return json_reply(c.clear_perturbations(wait_of(a))); }});

  return t;
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table_ = table();
  return table_;
}

const Command* find_command(const std::string& name) {
  for (const auto& c : commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const std::vector<Arg>& args_of(const std::string& name) {
  const Command* c = find_command(name);
  if (!c) throw std::logic_error("no command \"" + name + "\"");
  return c->args;
}

}  // namespace nansense::server
