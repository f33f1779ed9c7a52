#include "server/controller/wire_types.h"

#include "server/controller/replies.h"
#include "server/controller/replies_lab.h"
#include "stats/bins.h"

namespace nansense::server {

// The schema vocabulary has a namespace of its own: its short words
// (number, object, ...) would otherwise meet the controller's in a unity batch.
namespace {
namespace schema_words {

// A small vocabulary for writing JSON Schema by hand.
json str() { return {{"type", "string"}}; }
json integer() { return {{"type", "integer"}}; }
json number() { return {{"type", "number"}}; }
json boolean() { return {{"type", "boolean"}}; }
json one_of(std::vector<std::string> values) { return {{"type", "string"}, {"enum", std::move(values)}}; }
json literal(const std::string& value) { return {{"const", value}}; }
json ref(const std::string& name) { return {{"$ref", "#/$defs/" + name}}; }
json array(json items) { return {{"type", "array"}, {"items", std::move(items)}}; }
json map(json values) { return {{"type", "object"}, {"additionalProperties", std::move(values)}}; }
json nullable(json schema) { return {{"anyOf", {std::move(schema), {{"type", "null"}}}}}; }
json any_of(std::vector<json> schemas) { return {{"anyOf", std::move(schemas)}}; }
// A number the server may have to write as "nan", "inf" or "-inf".
json num() { return ref("Num"); }

// An object with exactly these keys; a key ending in '?' may be absent.
json object(std::vector<std::pair<std::string, json>> fields) {
  json properties = json::object();
  json required = json::array();
  for (auto& [key, schema] : fields) {
    const bool optional = key.back() == '?';
    const std::string name = optional ? key.substr(0, key.size() - 1) : key;
    properties[name] = std::move(schema);
    if (!optional) required.push_back(name);
  }
  return {{"type", "object"}, {"properties", properties}, {"required", required}, {"additionalProperties", false}};
}

// `base`'s keys plus these.
json extend(const json& base, std::vector<std::pair<std::string, json>> fields) {
  json out = base;
  json more = object(std::move(fields));
  out["properties"].update(more["properties"]);
  for (const auto& key : more["required"]) out["required"].push_back(key);
  return out;
}

json tensor_stats() {
  return object({{"shape", array(integer())},
                 {"dtype", str()},
                 {"numel", integer()},
                 {"n", integer()},
                 {"nan", integer()},
                 {"pos_inf", integer()},
                 {"neg_inf", integer()},
                 {"min", nullable(num())},
                 {"max", nullable(num())},
                 {"mean", nullable(num())},
                 {"std?", nullable(num())},
                 {"median?", nullable(num())},
                 {"zero_fraction?", num()},
                 {"norm?", num()}});
}

json histogram() {
  return object({{"bins", integer()},
                 {"min", nullable(num())},
                 {"max", nullable(num())},
                 {"bin_width?", num()},
                 // [bin centre, count] of each non-empty bin.
                 {"pairs", array(array(num()))}});
}

// How an image MCP sent differs from the one rendered (fitted for agents).
std::vector<std::pair<std::string, json>> sent_fields() {
  return {{"sent_width", integer()}, {"sent_height", integer()}, {"downscaled", boolean()}, {"enlarged", boolean()}};
}

// The words and small shapes several areas of the replies use: each word a
// named type of its own.
struct Words {
  json run_state;
  json mode;
  json probe_mode;
  json reason;
  json check;
  json root_cause_status;
  json update;
  json debug_source;
  json layer_role;
  json strip_kind;
  json values;
  json scope;
  json grid;
  json strip_view;
};

Words words(json& d) {
  Words w;
  // A named type: defined once in `d`, referred to where it is used.
  const auto define = [&d](const std::string& name, json schema) {
    d[name] = std::move(schema);
    return ref(name);
  };
  // The words the replies use, each a type of its own.
  w.run_state = define("RunState", one_of({"running", "paused", "finished", "lost"}));
  // Named after the command that set it.
  w.mode = define("Mode", one_of({"step_batch", "step_phase", "step_epoch", "run_until", "run", "detach"}));
  w.probe_mode = define("ProbeMode", one_of({"unchanged", "eval", "train"}));
  w.reason = define("DebugReason", one_of({"nan", "inf", "underflow", "overflow"}));
  w.check = define("DebugCheck", one_of({"nan_inf", "under_over"}));
  w.root_cause_status = define(
      "RootCauseStatus", one_of({"found", "from_outside", "not_reproduced", "pending", "not_traced", "compiled_only"}));
  w.update = define("DebugUpdate", nullable(one_of({"held", "applied", "skipped"})));
  w.debug_source = define("DebugSource", one_of({"activation", "activation_gradient", "weight_gradient", "loss"}));
  w.layer_role = define("LayerRole", one_of({"input", "module", "op"}));
  w.strip_kind = define("StripKind", one_of({"activation", "gradient"}));
  w.values = define("Values", one_of({"unchanged", "abs", "square"}));
  w.scope = define("StatsScope", one_of({"none", "watched", "all"}));
  // ExperimentResult's stage (replies_lab.h).
  define("ExperimentStage", one_of({"queued", "running", "done", "stopped", "failed", "absent"}));
  w.grid = define("PatchGrid", one_of({"max_pixel", "min_pixel", "max_average", "min_average"}));
  w.strip_view = object(
      {{"layer", str()}, {"kind", w.strip_kind}, {"sample", integer()}, {"average", boolean()}, {"values", w.values}});

  return w;
}

// Positions and the schedule.
void basic_types(json& d) {
  d["Num"] = any_of({number(), one_of({"nan", "inf", "-inf"})});
  d["Position"] = object({{"phase", str()},
                          {"epoch", integer()},
                          {"batch_idx", integer()},
                          {"is_last_in_phase", boolean()},
                          {"is_last_in_epoch", boolean()},
                          {"is_last_in_run", boolean()},
                          {"text", str()}});
  d["PhaseSchedule"] = object({{"name", str()}, {"batches", nullable(integer())}});
  d["Schedule"] =
      object({{"epochs", nullable(integer())}, {"declared", boolean()}, {"phases", array(ref("PhaseSchedule"))}});
}

// The status.
void status_types(json& d, const Words& w) {
  d["ProducerBrief"] = object({{"op", str()}, {"pass", str()}, {"layer", nullable(str())}});
  d["DebugErrorSummary"] = object({{"reasons", array(w.reason)},
                                   {"reason_labels", array(str())},
                                   {"position", ref("Position")},
                                   {"text", str()},
                                   {"layers", array(str())},
                                   {"root_cause_status", nullable(w.root_cause_status)},
                                   {"producer", nullable(ref("ProducerBrief"))},
                                   {"capsule", nullable(str())},
                                   {"hits", integer()},
                                   {"update", w.update},
                                   // The batch ran again, traced: the loop body saw it twice.
                                   {"rerun", boolean()},
                                   // With rerun: what ran twice, in the front end's words (the banner's clause).
                                   {"ran_twice", nullable(str())},
                                   {"skip_update", boolean()},
                                   // Under a trainer adapter: the step and the micro-batch it tripped in.
                                   {"trainer_step", nullable(ref("TrainerStep"))},
                                   // Why skipping the held update is refused (a distributed run), else null.
                                   {"skip_refused", nullable(str())}});
  // A mixed-precision loss scaler as the guard counts it: its overflows
  // skip steps and are no error; a collapse is (N in a row, or below the floor).
  d["LossScale"] = object({{"in_use", boolean()},
                           {"scale", nullable(number())},
                           {"skipped_steps", integer()},
                           {"skips_in_row", integer()},
                           {"last_skipped", nullable(ref("Position"))},
                           {"collapse_skips", integer()},
                           {"floor", number()}});
  d["DebugSummary"] = object({{"enabled", boolean()},
                              {"checks", array(w.check)},
                              {"loss_scale", ref("LossScale")},
                              {"error", nullable(ref("DebugErrorSummary"))}});
  d["UpdateFrequency"] =
      object({{"unit", one_of({"batch", "epoch", "seconds"})}, {"n", number()}, {"phase", nullable(str())}});
  // A batch in a trainer's words (the Hugging Face Trainer's callback): one
  // debugger batch is one optimizer step of micro_batches micro-batches
  // (gradient accumulation); micro_batch (0-based) is the one running, null
  // between them.
  d["TrainerStep"] =
      object({{"global_step", integer()}, {"micro_batches", integer()}, {"micro_batch", nullable(integer())}});
  d["Status"] = object({{"state", w.run_state},
                        {"mode", w.mode},
                        {"live_position", nullable(ref("Position"))},
                        {"snapshot_position", nullable(ref("Position"))},
                        {"snapshot_sequence", integer()},
                        {"snapshot_batch_size", integer()},
                        {"snapshot_samples_kept", integer()},
                        // Under a trainer adapter (null for a plain loop): the step the loop
                        // is in, and the one the snapshot shows (micro_batch: the one it was
                        // taken in; null: the step's end, every micro-batch shown).
                        {"live_trainer_step", nullable(ref("TrainerStep"))},
                        {"snapshot_trainer_step", nullable(ref("TrainerStep"))},
                        {"schedule", ref("Schedule")},
                        {"hint", str()},
                        {"time_travel", ref("TimeTravelStatus")},
                        {"debug", ref("DebugSummary")},
                        {"stats", ref("StatsSummary")},
                        {"probe", ref("ProbeStatus")},
                        {"locked", boolean()},
                        // What runs the loop: a LibTorch (C++) program or PyTorch from Python.
                        {"front_end", one_of({"cpp", "python"})},
                        {"recordings", array(str())},
                        // What they fix, setting -> why: update_frequency,
                        // stats_scope, watch_performance, watched:<layer>,
                        // patch_layers:<layer> (recorder.h's FixedSetting).
                        {"fixed", map(str())},
                        {"paused_at_ms?", integer()},
                        {"lost_reason?", str()},
                        {"internal_errors?", array(str())},
                        {"refreshed?", boolean()}});
}

// The architecture and the snapshot.
void snapshot_types(json& d, const Words& w) {
  d["Layer"] = object({{"name", str()},
                       {"role", w.layer_role},
                       {"kind", str()},
                       {"module", str()},
                       {"ops", array(str())},
                       {"output_shape", array(integer())},
                       {"dtype", str()},
                       {"parameters", array(str())},
                       {"description", str()},
                       {"shape_op", boolean()}});
  d["Edge"] = object({{"from", str()}, {"to", str()}});
  d["Architecture"] = object({{"captured", boolean()},
                              {"reason?", str()},
                              {"layers", array(ref("Layer"))},
                              // get_architecture's include_graph (default true): the graph, as edges
                              // and as Mermaid flowchart source; false leaves both out.
                              {"edges?", array(ref("Edge"))},
                              {"mermaid?", str()},
                              {"inputs", array(str())}});
  d["TensorStats"] = tensor_stats();
  d["SnapshotLayer"] = object({{"name", str()},
                               {"kind", str()},
                               {"activation", nullable(ref("TensorStats"))},
                               {"gradient", nullable(ref("TensorStats"))},
                               // watch_layer_tensor instruments' outputs by name.
                               {"instruments?", map(ref("TensorStats"))}});
  d["SnapshotInput"] = object({{"index", integer()}, {"name", str()}, {"shape", array(integer())}, {"dtype", str()}});
  d["SnapshotParameter"] = object({{"name", str()},
                                   {"weight", ref("TensorStats")},
                                   {"gradient", nullable(ref("TensorStats"))},
                                   {"optimizer_state?", map(any_of({num(), ref("TensorStats")}))},
                                   {"hyperparameters?", map(num())}});
  d["SnapshotBudget"] = object({{"budget_bytes", integer()},
                                {"held_bytes", integer()},
                                {"full_bytes", integer()},
                                {"parameter_bytes", integer()},
                                {"trimmed", boolean()},
                                {"note?", str()}});
  d["Snapshot"] = object({{"position", ref("Position")},
                          {"sequence", integer()},
                          {"batch_size", integer()},
                          {"samples_kept", integer()},
                          {"budget", ref("SnapshotBudget")},
                          {"inputs", array(ref("SnapshotInput"))},
                          {"layers", array(ref("SnapshotLayer"))},
                          {"parameters", array(ref("SnapshotParameter"))},
                          // Set while a probe's result is shown in the snapshot's place.
                          {"probe", nullable(ref("SnapshotProbe"))}});
  d["SnapshotProbe"] =
      object({{"run", integer()}, {"position", ref("Position")}, {"mode", w.probe_mode}, {"diff", boolean()}});
}

// Statistics queries.
void stats_query_types(json& d) {
  d["Histogram"] = histogram();
  d["ChannelStats"] = extend(tensor_stats(), {{"index", integer()}, {"histogram?", ref("Histogram")}});
  d["DeadChannels"] = object(
      {{"count", integer()}, {"of", integer()}, {"indices", array(integer())}, {"indices_truncated?", boolean()}});
  d["LayerTensorStats"] = extend(
      tensor_stats(),
      {{"dead_channels?", ref("DeadChannels")}, {"histogram?", ref("Histogram")}, {"channel?", ref("ChannelStats")}});
  d["LayerStatsEntry"] = object({{"name", str()},
                                 {"kind", str()},
                                 {"activation", nullable(ref("LayerTensorStats"))},
                                 {"gradient", nullable(ref("LayerTensorStats"))},
                                 {"gradient_note?", str()}});
  // Where the snapshot budget left samples out: what a reply's figures cover.
  d["SamplesKept"] = object({{"kept", integer()}, {"of", integer()}, {"note", str()}});
  d["LayerStats"] = object({{"position", ref("Position")},
                            {"sequence", integer()},
                            {"layers", array(ref("LayerStatsEntry"))},
                            {"samples?", ref("SamplesKept")}});
  d["ParameterStats"] = object({{"name", str()},
                                {"value", nullable(ref("TensorStats"))},
                                {"note?", str()},
                                {"gradient?", nullable(ref("TensorStats"))},
                                {"gradient_note?", str()},
                                {"optimizer_state?", map(any_of({num(), ref("TensorStats")}))},
                                {"optimizer_state_note?", str()},
                                {"hyperparameters?", map(num())},
                                // Where the Weights page starts: the layout of the value's shape.
                                {"default_layout?", ref("WeightLayout")},
                                // watch_weight_tensor instruments' outputs by name.
                                {"instruments?", map(ref("TensorStats"))}});
  // Each dimension's role in a weight strip (null: no dimension holds it).
  d["WeightLayout"] = object({{"x_dim", nullable(integer())},
                              {"y_dim", nullable(integer())},
                              {"tile_dim", nullable(integer())},
                              {"index", array(integer())}});
  d["WeightStats"] = object({{"layer", str()},
                             {"kind", str()},
                             {"position", ref("Position")},
                             {"sequence", integer()},
                             {"parameters", array(ref("ParameterStats"))}});
}

// Statistics over time.
void stats_history_types(json& d, const Words& w) {
  d["TensorStatsSnapshot"] = object({{"n", integer()},
                                     {"sum", num()},
                                     {"sum_sq", num()},
                                     {"mean", nullable(num())},
                                     {"std", nullable(num())},
                                     {"median", nullable(num())},
                                     {"min", nullable(num())},
                                     {"max", nullable(num())},
                                     {"nan", integer()},
                                     {"pos_inf", integer()},
                                     {"neg_inf", integer()},
                                     {"hist", nullable(array(integer()))},
                                     {"channel_hists", nullable(array(array(integer())))},
                                     {"channels", integer()},
                                     {"binned", integer()},
                                     {"dead_count", nullable(integer())},
                                     {"dead_channels", array(integer())}});
  d["EpochStats"] = object({{"epoch", integer()},
                            {"batches", integer()},
                            {"activation", nullable(ref("TensorStatsSnapshot"))},
                            {"gradient", nullable(ref("TensorStatsSnapshot"))}});
  d["ParameterSample"] = object({{"epoch", integer()},
                                 {"value_norm", num()},
                                 {"mean", num()},
                                 {"std", num()},
                                 {"min", num()},
                                 {"max", num()},
                                 {"grad_norm", nullable(num())},
                                 {"grad_mean", nullable(num())},
                                 {"grad_std", nullable(num())},
                                 {"grad_min", nullable(num())},
                                 {"grad_max", nullable(num())},
                                 {"update_ratio", nullable(num())}});
  d["StatsList"] = object(
      {{"sequence", integer()},
       {"edges", array(number())},
       {"layers",
        array(object({{"layer", str()}, {"phases", array(object({{"phase", str()}, {"epochs", array(integer())}}))}}))},
       {"parameters", map(array(str()))},
       {"series", array(ref("SeriesInfo"))},
       {"device_bytes", integer()}});
  d["StatsHistory"] = object({{"layer", str()},
                              {"edges", array(number())},
                              {"phases", map(array(ref("EpochStats")))},
                              {"parameters", map(array(ref("ParameterSample")))}});
  d["ValueCounts"] = object({{"dtype", str()},
                             {"numel", integer()},
                             {"min", nullable(integer())},
                             {"max", nullable(integer())},
                             {"distinct", integer()},
                             {"true_count?", integer()},
                             {"true_fraction?", number()}});
  d["CurrentStats"] = object({{"layer", str()},
                              {"position", ref("Position")},
                              {"activation", nullable(ref("TensorStatsSnapshot"))},
                              {"gradient", nullable(ref("TensorStatsSnapshot"))},
                              {"samples?", ref("SamplesKept")},
                              // A bool or integer layer: its values counted (activation is null).
                              {"values?", ref("ValueCounts")},
                              {"note?", str()}});
}

// Numerical debugging.
void debug_types(json& d, const Words& w) {
  d["OpReport"] = object({{"op", str()},
                          {"pass", one_of({"forward", "backward", "step"})},
                          {"backward_node", nullable(str())},
                          {"forward_op", nullable(str())},
                          {"layer", nullable(str())},
                          {"index", integer()},
                          {"inputs", array(ref("TensorStats"))},
                          {"outputs", array(ref("TensorStats"))}});
  d["RootCause"] = object({{"status", w.root_cause_status},
                           {"summary", str()},
                           {"producer", nullable(ref("OpReport"))},
                           {"propagators", array(ref("OpReport"))},
                           {"propagator_count", integer()},
                           {"other_producer_count", integer()}});
  d["LayerReport"] = object({{"layer", str()},
                             {"nan", number()},
                             {"inf", number()},
                             {"underflow", number()},
                             {"overflow", number()},
                             {"dtype", nullable(str())},
                             {"sources", array(w.debug_source)}});
  d["DebugBand"] = object({{"dtype", str()}, {"tiny", number()}, {"overflow", number()}});
  d["DebugError"] = object({{"position", ref("Position")},
                            {"reasons", array(w.reason)},
                            {"reason_labels", array(str())},
                            {"checks_used", array(w.check)},
                            {"layers", array(ref("LayerReport"))},
                            {"bands", array(ref("DebugBand"))},
                            {"root_cause", nullable(ref("RootCause"))},
                            {"capsule", nullable(str())},
                            {"hits", integer()},
                            {"update", w.update},
                            {"rerun", boolean()},
                            // A collapsing loss scale: how it collapsed.
                            {"loss_scale", nullable(str())},
                            // Under a trainer adapter: the step and the micro-batch it tripped in.
                            {"trainer_step", nullable(ref("TrainerStep"))},
                            {"text", str()}});
  d["DebugSettings"] = object({{"enabled", boolean()},
                               {"interval_batches", integer()},
                               {"check_nan_inf", boolean()},
                               {"check_under_over", boolean()},
                               {"threshold_fraction", number()},
                               {"trace_interval_batches", integer()},
                               {"rerun_to_trace", boolean()},
                               {"allow", array(str())},
                               {"capsule_dir", str()}});
}

// Pictures: the JSON beside each PNG.
void picture_types(json& d, const Words& w) {
  d["StripInfo"] = object({{"layer", str()},
                           {"kind", w.strip_kind},
                           {"position", ref("Position")},
                           {"sequence", integer()},
                           {"sample", integer()},
                           {"batch_size", integer()},
                           {"average", boolean()},
                           {"values", w.values},
                           {"layout", str()},
                           {"tiles", integer()},
                           {"tile_width", integer()},
                           {"tile_height", integer()},
                           {"width", integer()},
                           {"height", integer()},
                           // boolean: a bool tensor in two colours; categorical: an
                           // integer one, a colour per value (values and average do
                           // not apply to either).
                           {"scale", one_of({"diverging", "sequential", "boolean", "categorical"})},
                           {"dtype", str()},
                           {"scale_max", num()},
                           {"nan", integer()},
                           {"pos_inf", integer()},
                           {"neg_inf", integer()},
                           // boolean and categorical scales only.
                           {"value_min?", integer()},
                           {"value_max?", integer()},
                           {"true_count?", integer()},
                           {"distinct?", integer()}});
  d["InputInfo"] = object({{"input", integer()},
                           {"name", str()},
                           {"position", ref("Position")},
                           {"sequence", integer()},
                           {"sample", integer()},
                           {"batch_size", integer()},
                           // values: a bool or integer input as a grid of cells with the
                           // values written in them.
                           {"layout", one_of({"image", "strip", "values"})},
                           {"width", integer()},
                           {"height", integer()},
                           {"hint?", str()},
                           {"dtype", str()},
                           // bool and integer inputs only.
                           {"value_min?", integer()},
                           {"value_max?", integer()},
                           {"true_count?", integer()},
                           // The normalisation the picture undoes (x * std + mean); empty: none.
                           {"mean", array(num())},
                           {"std", array(num())}});

  // A layer-tensor instrument's strip: kind is "instrument:<name>".
  d["InstrumentStripInfo"] = d["StripInfo"];
  d["InstrumentStripInfo"]["properties"]["kind"] = str();
  d["WeightStripInfo"] = object({{"layer", str()},
                                 {"parameter", str()},
                                 {"tensor", str()},
                                 {"shape", array(integer())},
                                 {"layout", ref("WeightLayout")},
                                 {"position", ref("Position")},
                                 {"sequence", integer()},
                                 {"tiles", integer()},
                                 {"tile_width", integer()},
                                 {"tile_height", integer()},
                                 {"width", integer()},
                                 {"height", integer()},
                                 {"scale_max", num()},
                                 {"nan", integer()},
                                 {"pos_inf", integer()},
                                 {"neg_inf", integer()}});

  d["HistogramInfo"] = object({{"layers", array(str())},
                               {"phase", nullable(str())},
                               {"channel", nullable(integer())},
                               {"log_x", boolean()},
                               {"log_y", boolean()},
                               {"sequence", integer()},
                               {"width", integer()},
                               {"height", integer()},
                               {"series", array(str())}});
}

// Min/Max patches and bin samples.
void patch_types(json& d, const Words& w) {
  d["PatchCell"] = object({{"slot", integer()},
                           {"channel", integer()},
                           {"filled", boolean()},
                           {"score", nullable(num())},
                           {"batch", integer()},
                           {"sample", integer()},
                           {"y", integer()},
                           {"x", integer()},
                           {"top", integer()},
                           {"left", integer()},
                           // base64 PNG of the crop (null for an empty slot).
                           {"png", nullable(str())}});
  d["Patches"] = object({{"layer", str()},
                         {"phase", str()},
                         {"epoch", integer()},
                         {"phases", array(str())},  // the phases that have patches for the layer
                         // The last captured batch's gallery (phase and epoch are the batch's),
                         // at `position`; null for an epoch's.
                         {"current_batch", boolean()},
                         {"position", nullable(str())},
                         {"grid", w.grid},
                         {"grids", array(w.grid)},  // those collected
                         {"heatmap", boolean()},
                         {"samples", integer()},
                         {"channels", integer()},
                         {"crop", object({{"height", integer()}, {"width", integer()}})},
                         {"sequence", integer()},
                         // Why there are no cells, or what the cells leave out.
                         {"note", nullable(str())},
                         {"cells", array(ref("PatchCell"))}});
  d["PatchesPicture"] = object({{"layer", str()},
                                {"phase", str()},
                                {"epoch", integer()},
                                {"grids", array(w.grid)},
                                {"heatmap", boolean()},
                                {"samples", integer()},
                                {"channels", integer()},
                                {"sequence", integer()},
                                {"current_batch", boolean()},
                                {"width", integer()},
                                {"height", integer()}});
  d["BinSample"] = object({{"sample", integer()},
                           {"index", array(integer())},  // the element's coordinates after the batch dimension
                           {"value", num()},
                           {"top", integer()},
                           {"left", integer()},
                           {"png", nullable(str())}});  // base64 PNG of the input crop; null without an image input
  d["BinSamples"] = object({{"layer", str()},
                            {"kind", w.strip_kind},
                            {"channel", nullable(integer())},
                            {"bin", integer()},
                            {"range", array(num())},  // the bin's edges [low, high]
                            {"matches", integer()},   // elements in the bin among the kept samples
                            {"sequence", integer()},
                            {"position", ref("Position")},
                            {"note", nullable(str())},
                            {"samples", array(ref("BinSample"))}});
  d["BinSamplesPicture"] = object({{"layer", str()},
                                   {"kind", w.strip_kind},
                                   {"channel", nullable(integer())},
                                   {"bin", integer()},
                                   {"range", array(num())},
                                   {"matches", integer()},
                                   {"shown", integer()},
                                   {"sequence", integer()},
                                   {"width", integer()},
                                   {"height", integer()}});
}

// Refusals.
void refusal_types(json& d, const Words& w) {
  // A REST refusal's body (with its 4xx status); `argument` names the
  // argument it is about, when it is about one.
  d["ErrorReply"] = object({{"error", str()}, {"argument?", str()}});
  // An MCP tool refusal's structuredContent.
  d["ToolError"] = object({{"error", str()}, {"state", w.run_state}, {"argument?", str()}});
}

// MCP's picture tools: structuredContent beside the images.
void mcp_picture_types(json& d, const Words& w) {
  const auto sent = sent_fields();
  d["StripImage"] = extend(d["StripInfo"], sent);
  d["InputImage"] = extend(d["InputInfo"], sent);
  d["MissingStrip"] = object({{"layer", str()}, {"kind", w.strip_kind}, {"reason", str()}});
  // include_input: the input's picture (drawn first), or why it could not be.
  d["LayerImages"] = object({{"images", array(ref("StripImage"))},
                             {"missing", array(ref("MissingStrip"))},
                             {"input?", ref("InputImage")},
                             {"input_missing?", str()}});
}

// Experiments (controller_experiments.cpp).
void experiment_types(json& d, const Words&) {
  const auto sent = sent_fields();
  d["ExperimentPictureInfo"] = object({{"seq", integer()},
                                       {"kind", str()},
                                       {"stage", str()},
                                       {"step", integer()},
                                       {"total", integer()},
                                       {"overlay", boolean()},
                                       {"width", integer()},
                                       {"height", integer()}});

  d["HistogramImage"] = extend(d["HistogramInfo"], sent);
  d["ExperimentImage"] = extend(d["ExperimentPictureInfo"], sent);
  d["WeightImage"] = extend(d["WeightStripInfo"], sent);
  d["WeightImages"] = object({{"images", array(ref("WeightImage"))},
                              {"missing", array(object({{"parameter", str()}, {"tensor", str()}, {"reason", str()}}))},
                              {"parameters", array(object({{"name", str()},
                                                           {"shape", array(integer())},
                                                           {"layout", ref("WeightLayout")},
                                                           {"scalars", map(num())},
                                                           {"hyperparameters", map(num())}}))}});
  d["PatchesImage"] = extend(d["PatchesPicture"], sent);
  d["BinSamplesImage"] = extend(d["BinSamplesPicture"], sent);
  d["McpImages"] = any_of({ref("InputImage"), ref("LayerImages"), ref("HistogramImage"), ref("ExperimentImage"),
                           ref("WeightImages"), ref("PatchesImage"), ref("BinSamplesImage")});
}

// The push channel (/ws).
void push_types(json& d, const Words& w) {
  d["StripView"] = w.strip_view;
  d["FailedStrip"] = extend(w.strip_view, {{"error", str()}});
  d["PushMessage"] = any_of(
      {object({{"type", literal("status")}, {"status", ref("Status")}}),
       object({{"type", literal("snapshot")},
               {"sequence", integer()},
               {"position", ref("Position")},
               {"batch_size", integer()},
               {"samples_kept", integer()},
               {"architecture_changed", boolean()}}),
       object({{"type", literal("strips_done")}, {"sequence", integer()}, {"failed", array(ref("FailedStrip"))}}),
       // An experiment's progress or outcome (its objective history left out).
       object({{"type", literal("experiment")}, {"result", ref("ExperimentResult")}}),
       object({{"type", literal("error")}, {"message", str()}})});
  // The JSON header of a binary strip frame.
  d["StripFrameHeader"] = extend(d["StripInfo"], {{"type", literal("strip")}});
  // What a page sends.
  d["WatchMessage"] = object({{"type", literal("watch")}, {"strips", array(ref("StripView"))}});
}

// Numbers the page shares with the server: web/scripts/wire_types.mjs writes
// each def marked x-constant as a constant too (histogramBins), so the page
// never copies them.
void constant_types(json& d) {
  json bins = object({{"bins", {{"const", stats::kBins}}},
                      {"zero_bin", {{"const", stats::kZeroBin}}},
                      {"bins_per_decade", {{"const", stats::kBinsPerDecade}}},
                      {"zero_band", {{"const", stats::kZeroBand}}},
                      {"top", {{"const", stats::kTop}}}});
  bins["x-constant"] = true;
  d["HistogramBins"] = std::move(bins);
}

// The replies declared with their structs (reply.h).
void declared_replies(json& d) {
  declare_reply<WatchPerformanceSettings>(d);
  declare_reply<Settings>(d);
  declare_reply<ExperimentDefaults>(d);
  declare_reply<StatsSummary>(d);
  declare_reply<SeriesInfo>(d);
  declare_reply<MetricPoint>(d);
  declare_reply<MetricSeries>(d);
  declare_reply<FailedInstrumentReply>(d);
  declare_reply<Metrics>(d);
  declare_reply<ExperimentCancel>(d);
  declare_reply<ExperimentAutoRun>(d);
  declare_reply<AutoExperiment>(d);
  declare_reply<AutoExperimentCleared>(d);
  declare_reply<ProbePerturbation>(d);
  declare_reply<ProbeResultSummary>(d);
  declare_reply<ProbeStatus>(d);
  declare_reply<TimeTravelSummary>(d);
  declare_reply<TimeTravelCheckpoint>(d);
  declare_reply<TimeTravelReport>(d);
  declare_reply<UncheckedTensorReport>(d);
  declare_reply<DebugRerun>(d);
  declare_reply<DebugReport>(d);
  // Experiments and recordings (replies_lab.h).
  declare_reply<ExperimentParamSpec>(d);
  declare_reply<UnusableLayer>(d);
  declare_reply<ExperimentKind>(d);
  declare_reply<RegisteredAutoExperiment>(d);
  declare_reply<ExperimentList>(d);
  declare_reply<AttributionRange>(d);
  declare_reply<ExperimentVideo>(d);
  declare_reply<ExperimentResult>(d);
  declare_reply<RecordingFile>(d);
  declare_reply<Recording>(d);
  declare_reply<SavedRecording>(d);
  declare_reply<Recordings>(d);
  declare_reply<RecordingsStopped>(d);
  declare_reply<DiscardedRecording>(d);
  declare_reply<RecordingsDiscarded>(d);
  declare_reply<SnapshotSaved>(d);
}

json build() {
  json d = json::object();
  declared_replies(d);
  constant_types(d);
  const Words w = words(d);
  basic_types(d);
  status_types(d, w);
  snapshot_types(d, w);
  stats_query_types(d);
  stats_history_types(d, w);
  debug_types(d, w);
  picture_types(d, w);
  patch_types(d, w);
  refusal_types(d, w);
  mcp_picture_types(d, w);
  experiment_types(d, w);
  push_types(d, w);
  return d;
}

}  // namespace schema_words
}  // namespace

const json& wire_types() {
  static const json types = schema_words::build();
  return types;
}

}  // namespace nansense::server
