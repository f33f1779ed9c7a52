#include "server/mcp/mcp_tools.h"

#include <cstdio>

#include "render/downscale.h"
#include "server/mcp/jsonrpc.h"

namespace nansense::server::mcp {

const char* const kInstructions =
    "nansense debugs a LibTorch training loop while it runs. The loop pauses at its first batch and after every "
    "step. Start with get_status (state, where the loop is, the schedule, a hint), then get_architecture (the layer "
    "names every other tool takes). Inspect the last captured batch with get_layer_stats (NaN/Inf counts, ranges, "
    "mean/std, dead channels, histograms), get_weight_stats (a layer's parameters, gradients, optimizer state and "
    "learning rate) and render_layer / render_input (PNG pictures of activations, gradients and inputs). Move the "
    "run with step (batch, phase or epoch), run_until (a phase/epoch/batch position), run (to the end, or detached) "
    "and pause; each command waits for the next pause up to timeout_seconds and returns the status. Two positions "
    "matter: live_position is where the loop is now, snapshot_position is the batch every stats tool and picture "
    "describes; while the loop runs, refresh captures a newer batch without pausing. When a NaN, an Inf or a "
    "gradient under/overflow appears, the run pauses before the optimizer step and get_status's debug field says "
    "so: get_debug_report names the op that produced it and the layers affected; configure_debug_checks and "
    "silence_debug_check tune the checks. Numbers are rounded to 6 "
    "significant digits; non-finite values are the strings \"nan\", \"inf\", \"-inf\". A refusal (finished run, "
    "lost loop, unknown layer, bad argument) is a tool error whose message says what to do instead.";

namespace {

constexpr double kMaxWaitSeconds = 300;

json text(const std::string& s) { return {{"type", "text"}, {"text", s}}; }

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t n = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t n = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += '=';
  }
  return out;
}

// A JSON result: its text for every client, and structuredContent for those
// that read it.
ToolResult json_result(json value) {
  ToolResult r;
  r.content.push_back(text(dump(value)));
  r.structured = std::move(value);
  return r;
}

Controller::Wait wait_of(const Arguments& args) {
  return std::chrono::milliseconds(static_cast<int64_t>(args.number("timeout_seconds") * 1000));
}

json timeout_arg(double fallback) {
  return number_arg(
      "How long to wait for the loop to pause again before returning, in seconds. The wait never "
      "holds up training; on timeout the status says \"running\" and the command stays in effect.",
      0, kMaxWaitSeconds, fallback);
}

// A command's status, with a note when the loop did not pause within the wait.
ToolResult command_result(json status, const Arguments& args) {
  const bool running = status.value("state", "") == "running";
  const double waited = args.number("timeout_seconds");
  ToolResult r = json_result(std::move(status));
  if (running) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", waited);
    r.content.push_back(text(std::string("still running after ") + seconds +
                             " s: call get_status to follow it, or pause to stop at the next batch"));
  }
  return r;
}

std::string dims(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// One sentence an agent can read instead of decoding the picture's legend.
std::string describe_strip(const json& i) {
  std::string s = i.value("layer", "") + " " + i.value("kind", "") + ", sample " +
                  std::to_string(i.value("sample", 0)) + " of a batch of " + std::to_string(i.value("batch_size", 0)) +
                  " at " + i.value("position", json::object()).value("text", "") +
                  (i.value("average", false) ? " (channel average)" : "") + ": ";
  const int64_t tiles = i.value("tiles", 0);
  s += std::to_string(tiles) + " tile" + (tiles == 1 ? "" : "s") + " of " +
       dims(i.value("tile_width", 0), i.value("tile_height", 0)) + " px (layout " + i.value("layout", "") + ")" +
       (tiles > 1 ? " in one row with 1 px transparent gaps" : "") + "; ";
  const std::string scale_max = i.value("scale_max", json(0)).dump();
  if (i.value("scale", "") == "diverging") {
    s += "diverging scale -" + scale_max + " (blue) .. 0 (white) .. +" + scale_max + " (red)";
  } else {
    s += "sequential scale 0 .. " + scale_max + " of the " + i.value("values", "") + " values";
  }
  s += "; NaN " + std::to_string(i.value("nan", 0)) + " (magenta/black checker), +Inf " +
       std::to_string(i.value("pos_inf", 0)) + " (yellow), -Inf " + std::to_string(i.value("neg_inf", 0)) + " (green).";
  return s;
}

// Appends a PNG as image content with its caption; returns the caption's
// facts about size for structuredContent.
json append_image(ToolResult& r, const std::string& png, const std::string& caption) {
  auto fitted = render::fit_png(png);
  std::string size = " Image " + dims(fitted.width, fitted.height) + " px";
  if (fitted.downscaled()) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.3g", static_cast<double>(fitted.width) / fitted.original_width);
    size += ", downscaled from " + dims(fitted.original_width, fitted.original_height) + " px (factor " + factor +
            ") to fit " + std::to_string(render::kAgentMaxSide) +
            " px on the long side: neighbouring pixels are averaged, so single values may blur.";
  } else if (fitted.enlarged()) {
    size += ", enlarged " + std::to_string(fitted.width / fitted.original_width) + "x from " +
            dims(fitted.original_width, fitted.original_height) + " px (each rendered pixel is a square block).";
  } else {
    size += ".";
  }
  r.content.push_back(text(caption + size));
  r.content.push_back({{"type", "image"}, {"data", base64(fitted.png)}, {"mimeType", "image/png"}});
  return {{"sent_width", fitted.width},
          {"sent_height", fitted.height},
          {"downscaled", fitted.downscaled()},
          {"enlarged", fitted.enlarged()}};
}

ToolResult render_layer(Controller& c, const Arguments& args) {
  render::StripOptions options;
  options.sample = args.integer("sample");
  options.average = args.boolean("average");
  options.values = render::parse_values(args.string("values"));
  const std::string strips = args.string("strips");
  std::vector<std::string> kinds;
  if (strips != "gradient") kinds.push_back("activation");
  if (strips != "activation") kinds.push_back("gradient");

  ToolResult r;
  json images = json::array();
  json missing = json::array();
  std::string reasons;
  for (const auto& layer : args.strings("layers")) {
    for (const auto& kind : kinds) {
      try {
        auto image = c.render_layer(layer, kind, options);
        json info = image->info;
        info.update(append_image(r, image->png, describe_strip(image->info)));
        images.push_back(std::move(info));
      } catch (const ControllerError& e) {
        // No picture for this one: say why in its place and go on.
        r.content.push_back(text("no " + kind + " image for " + layer + ": " + e.what()));
        missing.push_back({{"layer", layer}, {"kind", kind}, {"reason", e.what()}});
        reasons += (reasons.empty() ? "" : "; ") + std::string(e.what());
      }
    }
  }
  if (images.empty()) throw ControllerError(ControllerError::Kind::kInvalidArgument, "no image rendered: " + reasons);
  r.structured = {{"images", images}, {"missing", missing}};
  return r;
}

ToolResult render_input(Controller& c, const Arguments& args) {
  auto image = c.render_input(args.integer("input"), args.integer("sample"));
  const json& i = image->info;
  std::string caption =
      "input " + std::to_string(i.value("input", 0)) + " (\"" + i.value("name", "") + "\"), sample " +
      std::to_string(i.value("sample", 0)) + " of a batch of " + std::to_string(i.value("batch_size", 0)) + " at " +
      i.value("position", json::object()).value("text", "") + ": " +
      (i.value("layout", "") == "image" ? "the input as an image (denormalised with input_mean/input_std where set)."
                                        : "a colour strip of its values (it does not look like an image).");
  if (i.contains("hint")) caption += " " + i.value("hint", "");
  ToolResult r;
  json info = i;
  info.update(append_image(r, image->png, caption));
  r.structured = std::move(info);
  return r;
}

json layers_arg(const std::string& what) {
  return string_list_arg("Layer names from get_architecture (e.g. \"features.0\", \"relu_1\", \"input\")" + what, 64);
}

std::vector<Tools::Tool> tool_table() {
  std::vector<Tools::Tool> t;

  t.push_back({"get_status", "Run status",
               "Where the training run is and what it is doing. Returns state (\"running\", \"paused\", \"finished\" "
               "or \"lost\"), mode, live_position (the batch the loop is at), snapshot_position and "
               "snapshot_sequence (the last captured batch, which every stats tool and picture describes), the "
               "schedule (epochs, phases with batch counts; null until the loop has run them once), a hint saying "
               "what to do next, and lost_reason or internal_errors when something broke. Call it first and "
               "whenever you are unsure what the loop is doing.",
               object_schema(json::object()), true,
               [](Controller& c, const Arguments&) { return json_result(c.get_status()); }});

  t.push_back({"get_architecture", "Network architecture",
               "The network as traced from its forward pass: layers in execution order, each with name (the name "
               "every layer argument takes), role (input, module or op), kind (Conv2d, Linear, relu, ...), module "
               "path, the aten ops it ran, output_shape, dtype and the parameters it used; edges from producer to "
               "consumer; the input layers. Before the first captured batch, captured is false with a reason.",
               object_schema(json::object()), true,
               [](Controller& c, const Arguments&) { return json_result(c.get_architecture()); }});

  t.push_back(
      {"get_layer_stats", "Layer activation and gradient statistics",
       "Statistics of layers in the last captured batch (snapshot_position in get_status), for the activation each "
       "layer produced and the gradient that flowed back into it: shape, dtype, counts of finite, NaN, +Inf and "
       "-Inf values, then over the finite values min, max, mean, population std, median and zero_fraction, and "
       "dead_channels (channels along dim 1 that are exactly zero over the whole batch, e.g. dead ReLUs). "
       "gradient is null with a gradient_note in eval phases and for inputs. Optionally a histogram of the finite "
       "values as [bin centre, count] pairs of the non-empty bins, and the same statistics for one channel.",
       object_schema({{"layers", layers_arg("; omit for every layer.")},
                      {"include_histogram",
                       boolean_arg("Add a histogram of each activation's and gradient's finite values.", false)},
                      {"bins", integer_arg("Histogram bins, equal width over the finite min..max.", 2, 512, 32)},
                      {"channel", integer_arg("Also report this channel (an index along dim 1, e.g. a conv output "
                                              "channel or a Linear feature); its histogram uses the layer's range. "
                                              "Refused for layers without dim 1 or with fewer channels.",
                                              0)}}),
       true, [](Controller& c, const Arguments& a) {
         Controller::LayerStatsOptions o;
         o.histogram = a.boolean("include_histogram");
         o.bins = a.integer("bins");
         o.channel = a.optional_integer("channel");
         return json_result(c.get_layer_stats(a.strings("layers"), o));
       }});

  t.push_back({"get_weight_stats", "Layer parameters, gradients and optimizer state",
               "A layer's parameters in the last captured batch, read after the optimizer step: for each parameter "
               "the value's and gradient's statistics (shape, non-finite counts, min, max, mean, std, median, L2 "
               "norm), the optimizer's state (e.g. Adam's step, exp_avg, exp_avg_sq; momentum buffers) and its "
               "param group's hyperparameters (lr, betas, weight_decay, ...). Notes say why a gradient or optimizer "
               "state is missing. Layers without parameters are refused with the list of those that have some.",
               object_schema({{"layer", string_arg("A layer name from get_architecture that has parameters, e.g. "
                                                   "\"features.0\".")},
                              {"parameters", string_list_arg("Only these parameters, qualified (\"features.0.weight\") "
                                                             "or short (\"weight\", \"bias\"); omit for all.",
                                                             64)}},
                             {"layer"}),
               true, [](Controller& c, const Arguments& a) {
                 return json_result(c.get_weight_stats(a.string("layer"), a.strings("parameters")));
               }});

  t.push_back({"step", "Step the training loop",
               "Resume the paused loop for one unit and wait for it to pause again: \"batch\" runs one batch, "
               "\"phase\" runs to the first batch of the next phase (e.g. train -> val), \"epoch\" to the first "
               "batch of the next epoch. A new snapshot is captured where it pauses. Returns the status; refused "
               "when training has finished or the loop is lost.",
               object_schema({{"unit", enum_arg({"batch", "phase", "epoch"}, "batch", "How far to run.")},
                              {"timeout_seconds", timeout_arg(30)}}),
               false, [](Controller& c, const Arguments& a) {
                 return command_result(c.step(a.string("unit"), wait_of(a)), a);
               }});

  t.push_back({"run", "Run the training loop",
               "Let the loop run. Attached (detach=false): run to the last batch of training and pause there, so "
               "the final state stays inspectable; waits up to timeout_seconds, and pause stops it earlier. "
               "Detached (detach=true): train on without pausing or capturing and return at once; pause still "
               "stops it at the next batch. Returns the status.",
               object_schema({{"detach", boolean_arg("Run without pausing and return at once.", false)},
                              {"timeout_seconds", timeout_arg(30)}}),
               false, [](Controller& c, const Arguments& a) {
                 const bool detach = a.boolean("detach");
                 json status = c.run(detach, wait_of(a));
                 return detach ? json_result(std::move(status)) : command_result(std::move(status), a);
               }});

  t.push_back({"run_until", "Run to a position",
               "Run until the loop reaches the given batch and pause there (capturing it). The target must lie after "
               "the current position and inside the schedule; phase names and batch counts are in get_status's "
               "schedule. Refusals say which part is out of range.",
               object_schema({{"phase", string_arg("Phase name, e.g. \"train\" or \"val\".")},
                              {"epoch", integer_arg("Epoch index, from 0.", 0)},
                              {"batch", integer_arg("Batch index within the phase, from 0.", 0)},
                              {"timeout_seconds", timeout_arg(30)}},
                             {"phase", "epoch", "batch"}),
               false, [](Controller& c, const Arguments& a) {
                 return command_result(
                     c.run_until(a.string("phase"), a.integer("epoch"), a.integer("batch"), wait_of(a)), a);
               }});

  t.push_back({"pause", "Pause the training loop",
               "Stop the running loop at the end of the batch it is in, capture that batch and wait for the pause. "
               "Does nothing when already paused. Returns the status.",
               object_schema({{"timeout_seconds", timeout_arg(30)}}), false,
               [](Controller& c, const Arguments& a) { return command_result(c.pause(wait_of(a)), a); }});

  t.push_back({"refresh", "Capture a fresh batch while running",
               "While the loop runs, capture its next batch without pausing, so the stats tools and pictures show "
               "current data; waits up to timeout_seconds for it. Returns the status with refreshed=true when the "
               "new snapshot arrived. When paused the snapshot is already current (refreshed=false).",
               object_schema({{"timeout_seconds", timeout_arg(10)}}), false,
               [](Controller& c, const Arguments& a) { return json_result(c.refresh(wait_of(a))); }});

  t.push_back({"get_debug_report", "Numerical issues: NaN/Inf and gradient under/overflow",
               "The numerical checks' settings and the standing error, if any: where it was first seen (position), "
               "its reasons (nan, inf, underflow = subnormal gradients, overflow), the checks that ran, one row per "
               "affected layer with the fraction of its values that are NaN / Inf and the fraction of its summed "
               "|grad| in the subnormal / overflow band, the gradient dtype and its band edges, and the root cause: "
               "the producer op (the first op, forward or backward, whose inputs were finite and whose output was "
               "not; with its layer, shapes, dtypes and the finite range of its inputs) told apart from the ops that "
               "only propagated it, plus the NaN capsule file that replays the batch bit for bit. error is null "
               "when nothing tripped. A trip pauses the run before the optimizer step, so the weights are still "
               "the pre-step ones: inspect with get_weight_stats / render_layer.",
               object_schema(json::object()), true,
               [](Controller& c, const Arguments&) { return json_result(c.get_debug_report()); }});

  t.push_back({"configure_debug_checks", "Configure the numerical checks",
               "Change the numerical checks; arguments left out keep their value. Returns get_debug_report. "
               "Values out of range are refused with the reason.",
               object_schema(
                   {{"enabled", {{"type", "boolean"}, {"description", "Master switch for every check."}}},
                    {"interval_batches",
                     {{"type", "integer"}, {"minimum", 1},
                      {"description", "Check every n-th batch (1 = every batch, the default)."}}},
                    {"check_nan_inf",
                     {{"type", "boolean"},
                      {"description", "Trip on any NaN or +-Inf in activations, their gradients or weight gradients."}}},
                    {"check_under_over",
                     {{"type", "boolean"},
                      {"description", "Trip on gradients in the subnormal (0 < |g| < finfo.tiny) or overflow "
                                      "(|g| >= finfo.max/16) band of their dtype."}}},
                    {"threshold_fraction",
                     {{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 1},
                      {"description", "Under/overflow trips when the band holds at least this fraction of a "
                                      "layer's summed finite |grad| (default 0.1)."}}},
                    {"trace_interval_batches",
                     {{"type", "integer"}, {"minimum", 0},
                      {"description", "Also trace every n-th batch at op level (0 = never; about 10% of the "
                                      "traced batch's time). Tripped batches are traced anyway."}}},
                    {"rerun_to_trace",
                     {{"type", "boolean"},
                      {"description", "Re-run a tripped batch that was not traced from its recorded state, traced, "
                                      "to name the producer op."}}},
                    {"allow",
                     {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 256},
                      {"description", "Intended non-finite values that must not trip: op names (\"masked_fill\") or "
                                      "layer names; replaces the list, [] clears it."}}}}),
               false, [](Controller& c, const Arguments& a) {
                 Controller::DebugChecksUpdate u;
                 u.enabled = a.optional_boolean("enabled");
                 u.interval_batches = a.optional_integer("interval_batches");
                 u.check_nan_inf = a.optional_boolean("check_nan_inf");
                 u.check_under_over = a.optional_boolean("check_under_over");
                 u.threshold_fraction = a.optional_number("threshold_fraction");
                 u.trace_interval_batches = a.optional_integer("trace_interval_batches");
                 u.rerun_to_trace = a.optional_boolean("rerun_to_trace");
                 u.allow = a.optional_strings("allow");
                 return json_result(c.configure_debug_checks(u));
               }});

  t.push_back({"silence_debug_check", "Silence a numerical check",
               "Turn a check category off and clear it from the standing error: \"nan_inf\" or \"under_over\"; "
               "without a category, every category of the standing error. Use it when the values are intended; "
               "configure_debug_checks turns a check back on. Returns get_debug_report.",
               object_schema({{"category", {{"type", "string"},
                                            {"enum", {"nan_inf", "under_over"}},
                                            {"description", "The category to silence; omit for those of the "
                                                            "standing error."}}}}),
               false, [](Controller& c, const Arguments& a) {
                 return json_result(c.silence_debug_check(a.optional_string("category")));
               }});

  t.push_back({"choose_update", "Skip or apply the poisoned optimizer update",
               "While the loop is paused before the optimizer step of the batch that tripped (get_debug_report's "
               "error.update is \"held\"): \"skip\" clears every parameter's gradient when the loop resumes, so "
               "the loop's optimizer.step() leaves weights, optimizer state and step counts unchanged for that "
               "batch; \"apply\" lets the update through (the default). Refused when no update is held. Returns "
               "get_debug_report.",
               object_schema({{"action", {{"type", "string"},
                                          {"enum", {"skip", "apply"}},
                                          {"description", "skip or apply the held update."}}}},
                             {"action"}),
               false, [](Controller& c, const Arguments& a) { return json_result(c.choose_update(a.string("action"))); }});

  t.push_back({"get_time_travel_status", "Time travel: cached epochs",
               "Whether the loop can be rewound and to where: available (false with a reason outside "
               "session.epochs()), cached_epochs (jump targets: epochs whose start is checkpointed), "
               "uncached_epochs, total_epochs, current_epoch, pending_epoch (a jump not carried out yet), the cache "
               "folder with budget_bytes and bytes_used, jumps done and last_error (a failed write or a damaged "
               "file).",
               object_schema(json::object()), true,
               [](Controller& c, const Arguments&) { return json_result(c.get_time_travel_status()); }});

  t.push_back({"time_travel", "Rewind to an epoch",
               "Jump to the start of a cached epoch (get_time_travel_status lists them), paused or running: the "
               "rest of the current epoch is abandoned, the model, optimizer, LR schedule and RNG are restored "
               "from that epoch's checkpoint, and the loop pauses on its first batch; waits up to timeout_seconds "
               "for that pause. Replays are exact on CPU. Refused with the reason when no epoch loop runs, the "
               "epoch is out of range or not cached, or its checkpoint is damaged. Returns the status.",
               object_schema({{"epoch", integer_arg("Epoch to jump to, from 0.", 0)},
                              {"timeout_seconds", timeout_arg(30)}},
                             {"epoch"}),
               false, [](Controller& c, const Arguments& a) {
                 return command_result(c.time_travel(a.integer("epoch"), wait_of(a)), a);
               }});

  t.push_back(
      {"render_layer", "Picture a layer's activations and gradients",
       "PNG pictures of layers in the last captured batch, drawn by the same renderer as the web UI: one sample's "
       "activation and/or gradient, one tile per channel in a row (a [N,F] layer is one row of F pixels). Colours: "
       "a diverging scale centred on zero (blue negative, white zero, red positive) shared by all tiles, or a "
       "sequential scale for values=abs|square; NaN is a magenta/black checker, +Inf yellow, -Inf green. Each "
       "image comes with a caption giving the scale's end value, the tile layout and non-finite counts. A missing "
       "picture (no gradient in an eval phase) is replaced by its reason.",
       object_schema({{"layers", layers_arg(".")},
                      {"strips", enum_arg({"activation", "gradient", "both"}, "both",
                                          "Which pictures per layer: the activation, the gradient flowing back "
                                          "into it, or both (two images).")},
                      {"sample", integer_arg("Index of the sample within the batch.", 0, std::nullopt, 0)},
                      {"average", boolean_arg("Average the channels into one tile.", false)},
                      {"values", enum_arg({"unchanged", "abs", "square"}, "unchanged",
                                          "Show the values as they are, or their magnitude (abs) or square, "
                                          "applied before averaging.")}},
                     {"layers"}),
       true, render_layer});

  t.push_back({"render_input", "Picture a model input",
               "A PNG of one sample of a model input in the last captured batch, as the image it was: undone "
               "normalisation (the session's input_mean/input_std) and the session's input transform where set; an "
               "input that is not an image ([N,F] features, tokens) is drawn as a colour strip, with a hint naming "
               "the option that would show it as an image. Use it beside render_layer to see what a layer responded "
               "to.",
               object_schema({{"input", integer_arg("Index of the model input (get_architecture's inputs, in order).",
                                                    0, std::nullopt, 0)},
                              {"sample", integer_arg("Index of the sample within the batch.", 0, std::nullopt, 0)}}),
               true, render_input});

  return t;
}

}  // namespace

Tools::Tools(Controller& controller) : controller_(controller), tools_(tool_table()) {}

json Tools::list(const std::string& version) const {
  json tools = json::array();
  for (const auto& tool : tools_) {
    json entry = {{"name", tool.name}, {"description", tool.description}, {"inputSchema", tool.input_schema}};
    if (version >= "2025-06-18") entry["title"] = tool.title;
    if (version >= "2025-03-26") {
      entry["annotations"] = {{"title", tool.title},
                              {"readOnlyHint", tool.read_only},
                              {"destructiveHint", false},
                              {"idempotentHint", tool.read_only},
                              {"openWorldHint", false}};
    }
    tools.push_back(std::move(entry));
  }
  return {{"tools", std::move(tools)}};
}

json Tools::call(const std::string& name, const json& arguments, const std::string& version) const {
  const Tool* tool = nullptr;
  for (const auto& t : tools_) {
    if (t.name == name) tool = &t;
  }
  if (!tool) {
    std::string known;
    for (const auto& t : tools_) known += (known.empty() ? "" : ", ") + t.name;
    throw RpcError(kInvalidParams, "unknown tool \"" + name + "\"; tools: " + known);
  }
  ToolResult r;
  try {
    r = tool->handle(controller_, Arguments(tool->input_schema, arguments));
  } catch (const ControllerError& e) {
    r = ToolResult{};
    r.is_error = true;
    r.content.push_back(text(e.what()));
    r.structured = {{"error", e.what()}, {"state", controller_.get_status().value("state", "")}};
  } catch (const std::exception& e) {
    r = ToolResult{};
    r.is_error = true;
    r.content.push_back(text(std::string("internal error in nansense: ") + e.what()));
  }
  json out = {{"content", std::move(r.content)}, {"isError", r.is_error}};
  if (version >= "2025-06-18" && r.structured.is_object()) out["structuredContent"] = std::move(r.structured);
  return out;
}

}  // namespace nansense::server::mcp
