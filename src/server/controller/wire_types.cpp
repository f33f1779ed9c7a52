#include "server/controller/wire_types.h"

#include "server/controller/replies.h"
#include "server/controller/replies_views.h"
#include "server/controller/replies_status.h"
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
  json reason;
  json check;
  json root_cause_status;
  json update;
  json debug_source;
  json strip_kind;
  json values;
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
  define("Mode", one_of({"step_batch", "step_phase", "step_epoch", "run_until", "run", "detach"}));
  define("ProbeMode", one_of({"unchanged", "eval", "train"}));
  w.reason = define("DebugReason", one_of({"nan", "inf", "underflow", "overflow"}));
  w.check = define("DebugCheck", one_of({"nan_inf", "under_over"}));
  w.root_cause_status = define(
      "RootCauseStatus", one_of({"found", "from_outside", "not_reproduced", "pending", "not_traced", "compiled_only"}));
  w.update = define("DebugUpdate", nullable(one_of({"held", "applied", "skipped"})));
  w.debug_source = define("DebugSource", one_of({"activation", "activation_gradient", "weight_gradient", "loss"}));
  define("LayerRole", one_of({"input", "module", "op"}));
  w.strip_kind = define("StripKind", one_of({"activation", "gradient"}));
  w.values = define("Values", one_of({"unchanged", "abs", "square"}));
  define("StatsScope", one_of({"none", "watched", "all"}));
  // ExperimentResult's stage (replies_lab.h).
  define("ExperimentStage", one_of({"queued", "running", "done", "stopped", "failed", "absent"}));
  w.grid = define("PatchGrid", one_of({"max_pixel", "min_pixel", "max_average", "min_average"}));
  w.strip_view = object(
      {{"layer", str()}, {"kind", w.strip_kind}, {"sample", integer()}, {"average", boolean()}, {"values", w.values}});

  return w;
}

// Numbers and positions.
void basic_types(json& d) {
  d["Num"] = any_of({number(), one_of({"nan", "inf", "-inf"})});
  d["Position"] = object({{"phase", str()},
                          {"epoch", integer()},
                          {"batch_idx", integer()},
                          {"is_last_in_phase", boolean()},
                          {"is_last_in_epoch", boolean()},
                          {"is_last_in_run", boolean()},
                          {"text", str()}});
}

// The parts of the status that keep a codec of their own (the status itself
// is declared in replies_status.h).
void status_types(json& d) {
  // A mixed-precision loss scaler as the guard counts it: its overflows
  // skip steps and are no error; a collapse is (N in a row, or below the floor).
  d["LossScale"] = object({{"in_use", boolean()},
                           {"scale", nullable(number())},
                           {"skipped_steps", integer()},
                           {"skips_in_row", integer()},
                           {"last_skipped", nullable(ref("Position"))},
                           {"collapse_skips", integer()},
                           {"floor", number()}});
  d["UpdateFrequency"] =
      object({{"unit", one_of({"batch", "epoch", "seconds"})}, {"n", number()}, {"phase", nullable(str())}});
  // A batch in a trainer's words (the Hugging Face Trainer's callback): one
  // debugger batch is one optimizer step of micro_batches micro-batches
  // (gradient accumulation); micro_batch (0-based) is the one running, null
  // between them.
  d["TrainerStep"] =
      object({{"global_step", integer()}, {"micro_batches", integer()}, {"micro_batch", nullable(integer())}});
}

// Statistics of the last captured batch: one tensor's (common/tensor_stats.h)
// and the figures controller_stats.cpp adds to them.
void stats_query_types(json& d) {
  d["TensorStats"] = tensor_stats();
  d["Histogram"] = histogram();
  d["ChannelStats"] = extend(tensor_stats(), {{"index", integer()}, {"histogram?", ref("Histogram")}});
  d["DeadChannels"] = object(
      {{"count", integer()}, {"of", integer()}, {"indices", array(integer())}, {"indices_truncated?", boolean()}});
  d["LayerTensorStats"] = extend(
      tensor_stats(),
      {{"dead_channels?", ref("DeadChannels")}, {"histogram?", ref("Histogram")}, {"channel?", ref("ChannelStats")}});
  // Each dimension's role in a weight strip (null: no dimension holds it).
  d["WeightLayout"] = object({{"x_dim", nullable(integer())},
                              {"y_dim", nullable(integer())},
                              {"tile_dim", nullable(integer())},
                              {"index", array(integer())}});
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
  // The views, weights and statistics over time (replies_views.h).
  declare_reply<ArchitectureLayer>(d);
  declare_reply<ArchitectureEdge>(d);
  declare_reply<ArchitectureView>(d);
  declare_reply<SnapshotBudget>(d);
  declare_reply<SnapshotInput>(d);
  declare_reply<SnapshotLayer>(d);
  declare_reply<SnapshotParameter>(d);
  declare_reply<SnapshotProbe>(d);
  declare_reply<SnapshotSummary>(d);
  declare_reply<SamplesKept>(d);
  declare_reply<LayerStatsEntry>(d);
  declare_reply<LayerStats>(d);
  declare_reply<ParameterStats>(d);
  declare_reply<WeightStats>(d);
  declare_reply<StatsList>(d);
  declare_reply<CollectedStats>(d);
  declare_reply<EpochStats>(d);
  declare_reply<ParameterSampleReply>(d);
  declare_reply<StatsHistory>(d);
  declare_reply<ValueCounts>(d);
  declare_reply<CurrentStats>(d);
  // replies_status.h
  declare_reply<PatchCell>(d);
  declare_reply<PatchCrop>(d);
  declare_reply<Patches>(d);
  declare_reply<BinSample>(d);
  declare_reply<BinSamples>(d);
  declare_reply<ProducerBrief>(d);
  declare_reply<DebugErrorSummary>(d);
  declare_reply<DebugSummary>(d);
  declare_reply<PhaseSchedule>(d);
  declare_reply<ScheduleSummary>(d);
  declare_reply<Status>(d);
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
  status_types(d);
  stats_query_types(d);
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
