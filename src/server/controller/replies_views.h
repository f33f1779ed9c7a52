// The typed replies (reply.h) of the views of the last captured batch
// (ViewArea: the graph, the snapshot in brief, layer statistics), a layer's
// parameters (WeightArea) and the statistics over time (StatsArea's
// list_stats, get_stats_history, get_current_stats). Like replies.h, free of
// torch so that wire_types.cpp reads them on its own. Where a value comes
// from a codec of its own (common::to_json(TensorStats), the layer figures
// of controller_stats.cpp, a BatchPosition), the field is a json value that
// names its schema.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/replies.h"
#include "server/controller/reply.h"

namespace nansense::server {

// --- The architecture (get_architecture). ---

// A layer of the traced graph (nansense::LayerInfo).
struct ArchitectureLayer {
  static constexpr const char* kWireName = "Layer";
  std::string name;
  std::string role;
  std::string kind;
  std::string module;
  std::vector<std::string> ops;
  std::vector<int64_t> output_shape;
  std::string dtype;
  std::vector<std::string> parameters;
  std::string description;
  bool shape_op = false;
  template <class Fields>
  static void fields(Fields& f) {
    using L = ArchitectureLayer;
    f.field("name", &L::name, "The name every layer argument takes (a module path, or an op's fx-style name).");
    f.field("role", &L::role, "Whether it is a model input, a module or a parameterless op.",
            {{"$ref", "#/$defs/LayerRole"}});
    f.field("kind", &L::kind, "Conv2d, Linear, relu, ...");
    f.field("module", &L::module, "The module path it belongs to.");
    f.field("ops", &L::ops, "The aten ops it ran.");
    f.field("output_shape", &L::output_shape, "Its output's shape in the traced batch.");
    f.field("dtype", &L::dtype, "Its output's dtype.");
    f.field("parameters", &L::parameters, "The parameters it used, qualified.");
    f.field("description", &L::description, "What it is, in words.");
    f.field("shape_op", &L::shape_op, "Whether it only changes a tensor's shape (view, flatten, ...).");
  }
};

// An edge of the graph: `from` produced a tensor `to` consumed.
struct ArchitectureEdge {
  static constexpr const char* kWireName = "Edge";
  std::string from;
  std::string to;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("from", &ArchitectureEdge::from, "The producing layer.");
    f.field("to", &ArchitectureEdge::to, "The consuming layer.");
  }
};

// get_architecture's reply. ViewArea gives the edges; the command leaves
// them out or adds the Mermaid source (its include_graph argument).
struct ArchitectureView {
  static constexpr const char* kWireName = "Architecture";
  bool captured = false;
  std::optional<std::string> reason;
  std::vector<ArchitectureLayer> layers;
  std::optional<std::vector<ArchitectureEdge>> edges;
  std::optional<std::string> mermaid;
  std::vector<std::string> inputs;
  template <class Fields>
  static void fields(Fields& f) {
    using A = ArchitectureView;
    f.field("captured", &A::captured, "Whether a batch was captured (before one, the graph is empty).");
    f.optional_field("reason", &A::reason, "Only before the first capture: why there is no graph yet.");
    f.field("layers", &A::layers, "The layers in execution order.");
    f.optional_field("edges", &A::edges, "The graph's edges, producer to consumer (absent with include_graph false).");
    f.optional_field("mermaid", &A::mermaid,
                     "The graph as Mermaid flowchart source (absent with include_graph false).");
    f.field("inputs", &A::inputs, "The model inputs' layer names, in order.");
  }
};

// --- The last captured batch in brief (get_snapshot). ---

// What the snapshot budget left out of a snapshot.
struct SnapshotBudget {
  static constexpr const char* kWireName = "SnapshotBudget";
  int64_t budget_bytes = 0;
  int64_t held_bytes = 0;
  int64_t full_bytes = 0;
  int64_t parameter_bytes = 0;
  bool trimmed = false;
  std::optional<std::string> note;
  template <class Fields>
  static void fields(Fields& f) {
    using B = SnapshotBudget;
    f.field("budget_bytes", &B::budget_bytes, "The budget the snapshot was built under; 0 for none.");
    f.field("held_bytes", &B::held_bytes, "Bytes of activations, gradients and inputs held.");
    f.field("full_bytes", &B::full_bytes, "What they would hold with every sample.");
    f.field("parameter_bytes", &B::parameter_bytes, "Weights, their gradients and optimizer state (kept whole).");
    f.field("trimmed", &B::trimmed, "Whether samples were left out.");
    f.optional_field("note", &B::note, "Only when trimmed: what is shown and what the statistics cover.");
  }
};

// A model input of the snapshot.
struct SnapshotInput {
  static constexpr const char* kWireName = "SnapshotInput";
  int64_t index = 0;
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("index", &SnapshotInput::index, "Its place among the model inputs.");
    f.field("name", &SnapshotInput::name, "Its layer name.");
    f.field("shape", &SnapshotInput::shape, "Its shape (the kept samples).");
    f.field("dtype", &SnapshotInput::dtype, "Its dtype.");
  }
};

// A layer of the snapshot: its activation's and gradient's statistics.
struct SnapshotLayer {
  static constexpr const char* kWireName = "SnapshotLayer";
  std::string name;
  std::string kind;
  json activation = nullptr;  // common::to_json(TensorStats) or null
  json gradient = nullptr;    // common::to_json(TensorStats) or null
  std::optional<std::map<std::string, json>> instruments;
  template <class Fields>
  static void fields(Fields& f) {
    using L = SnapshotLayer;
    const json stats_or_null = {{"anyOf", {{{"$ref", "#/$defs/TensorStats"}}, {{"type", "null"}}}}};
    f.field("name", &L::name, "The layer's name.");
    f.field("kind", &L::kind, "Its kind (Conv2d, relu, ...).");
    f.field("activation", &L::activation, "Its output over the whole batch; null when not captured.", stats_or_null);
    f.field("gradient", &L::gradient, "The gradient into its output; null when no backward reached it.", stats_or_null);
    f.optional_field("instruments", &L::instruments, "watch_layer_tensor instruments' outputs by name.",
                     {{"type", "object"}, {"additionalProperties", {{"$ref", "#/$defs/TensorStats"}}}});
  }
};

// A parameter of the snapshot.
struct SnapshotParameter {
  static constexpr const char* kWireName = "SnapshotParameter";
  std::string name;
  json weight;              // common::to_json(TensorStats)
  json gradient = nullptr;  // common::to_json(TensorStats) or null
  std::optional<std::map<std::string, json>> optimizer_state;
  std::optional<std::map<std::string, json>> hyperparameters;
  template <class Fields>
  static void fields(Fields& f) {
    using P = SnapshotParameter;
    f.field("name", &P::name, "The parameter's qualified name.");
    f.field("weight", &P::weight, "Its value's statistics.", {{"$ref", "#/$defs/TensorStats"}});
    f.field("gradient", &P::gradient, "Its gradient's statistics; null without a gradient.",
            {{"anyOf", {{{"$ref", "#/$defs/TensorStats"}}, {{"type", "null"}}}}});
    f.optional_field(
        "optimizer_state", &P::optimizer_state, "Its optimizer state by key: a scalar (Adam's step) or statistics.",
        {{"type", "object"},
         {"additionalProperties", {{"anyOf", {{{"$ref", "#/$defs/Num"}}, {{"$ref", "#/$defs/TensorStats"}}}}}}});
    f.optional_field("hyperparameters", &P::hyperparameters, "Its param group's hyperparameters (lr, ...).",
                     {{"type", "object"}, {"additionalProperties", {{"$ref", "#/$defs/Num"}}}});
  }
};

// The probe run a snapshot shows in the last captured batch's place.
struct SnapshotProbe {
  static constexpr const char* kWireName = "SnapshotProbe";
  uint64_t run = 0;
  json position;  // to_json(BatchPosition)
  std::string mode;
  bool diff = false;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("run", &SnapshotProbe::run, "The probe run it shows.");
    f.field("position", &SnapshotProbe::position, "The batch whose inputs it re-ran.", {{"$ref", "#/$defs/Position"}});
    f.field("mode", &SnapshotProbe::mode, "The forward mode it ran in.", {{"$ref", "#/$defs/ProbeMode"}});
    f.field("diff", &SnapshotProbe::diff, "Whether its activations are perturbed - unperturbed.");
  }
};

// get_snapshot's reply.
struct SnapshotSummary {
  static constexpr const char* kWireName = "Snapshot";
  json position;  // to_json(BatchPosition)
  uint64_t sequence = 0;
  int64_t batch_size = 0;
  int64_t samples_kept = 0;
  SnapshotBudget budget;
  std::vector<SnapshotInput> inputs;
  std::vector<SnapshotLayer> layers;
  std::vector<SnapshotParameter> parameters;
  std::optional<SnapshotProbe> probe;
  template <class Fields>
  static void fields(Fields& f) {
    using S = SnapshotSummary;
    f.field("position", &S::position, "The captured batch.", {{"$ref", "#/$defs/Position"}});
    f.field("sequence", &S::sequence, "The snapshot's sequence (grows with every published snapshot).");
    f.field("batch_size", &S::batch_size, "The batch's samples.");
    f.field("samples_kept", &S::samples_kept, "The samples pictures exist for (0..samples_kept-1).");
    f.field("budget", &S::budget, "What the snapshot budget left out.");
    f.field("inputs", &S::inputs, "The model inputs.");
    f.field("layers", &S::layers, "Each layer's activation and gradient statistics, in execution order.");
    f.field("parameters", &S::parameters, "Each parameter's value, gradient and optimizer state.");
    f.field("probe", &S::probe, "Set while a probe's result is shown in the snapshot's place; else null.");
  }
};

// --- Statistics of the last captured batch (get_layer_stats, get_weight_stats). ---

// Where the snapshot budget left samples out: what a reply's figures cover.
struct SamplesKept {
  static constexpr const char* kWireName = "SamplesKept";
  int64_t kept = 0;
  int64_t of = 0;
  std::string note;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("kept", &SamplesKept::kept, "The samples kept (the first ones).");
    f.field("of", &SamplesKept::of, "The batch's samples.");
    f.field("note", &SamplesKept::note, "Which figures cover the kept samples and which the whole batch.");
  }
};

// A layer's activation and gradient figures (get_layer_stats).
struct LayerStatsEntry {
  static constexpr const char* kWireName = "LayerStatsEntry";
  std::string name;
  std::string kind;
  json activation = nullptr;  // LayerTensorStats (controller_stats.cpp) or null
  json gradient = nullptr;    // LayerTensorStats or null
  std::optional<std::string> gradient_note;
  template <class Fields>
  static void fields(Fields& f) {
    using E = LayerStatsEntry;
    const json figures_or_null = {{"anyOf", {{{"$ref", "#/$defs/LayerTensorStats"}}, {{"type", "null"}}}}};
    f.field("name", &E::name, "The layer's name.");
    f.field("kind", &E::kind, "Its kind (Conv2d, relu, ...).");
    f.field("activation", &E::activation, "Its output's figures; null when not captured.", figures_or_null);
    f.field("gradient", &E::gradient, "The gradient into its output; null with a gradient_note when there is none.",
            figures_or_null);
    f.optional_field("gradient_note", &E::gradient_note, "Only without a gradient: why there is none.");
  }
};

// get_layer_stats' reply.
struct LayerStats {
  static constexpr const char* kWireName = "LayerStats";
  json position;  // to_json(BatchPosition)
  uint64_t sequence = 0;
  std::vector<LayerStatsEntry> layers;
  std::optional<SamplesKept> samples;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("position", &LayerStats::position, "The captured batch.", {{"$ref", "#/$defs/Position"}});
    f.field("sequence", &LayerStats::sequence, "The snapshot's sequence.");
    f.field("layers", &LayerStats::layers, "The layers asked for, in that order (every layer in graph order).");
    f.optional_field("samples", &LayerStats::samples, "Only where the snapshot budget left samples out.");
  }
};

// A parameter's figures (get_weight_stats).
struct ParameterStats {
  static constexpr const char* kWireName = "ParameterStats";
  std::string name;
  json value = nullptr;  // common::to_json(TensorStats) with norm, or null
  std::optional<std::string> note;
  std::optional<json> gradient;
  std::optional<std::string> gradient_note;
  std::optional<std::map<std::string, json>> optimizer_state;
  std::optional<std::string> optimizer_state_note;
  std::optional<std::map<std::string, json>> hyperparameters;
  std::optional<json> default_layout;  // weight_layout_json
  std::optional<std::map<std::string, json>> instruments;
  template <class Fields>
  static void fields(Fields& f) {
    using P = ParameterStats;
    const json stats = {{"$ref", "#/$defs/TensorStats"}};
    const json stats_or_null = {{"anyOf", {stats, {{"type", "null"}}}}};
    const json num = {{"$ref", "#/$defs/Num"}};
    f.field("name", &P::name, "The parameter's qualified name.");
    f.field("value", &P::value, "Its value's statistics with the L2 norm; null when not captured (see note).",
            stats_or_null);
    f.optional_field("note", &P::note, "Only when the parameter was not captured in this batch.");
    f.optional_field("gradient", &P::gradient, "Its gradient's statistics; null with a gradient_note without one.",
                     stats_or_null);
    f.optional_field("gradient_note", &P::gradient_note, "Only without a gradient: why.");
    f.optional_field("optimizer_state", &P::optimizer_state,
                     "Its optimizer state by key: a scalar (Adam's step) or statistics.",
                     {{"type", "object"}, {"additionalProperties", {{"anyOf", {num, stats}}}}});
    f.optional_field("optimizer_state_note", &P::optimizer_state_note, "Only without optimizer state: why.");
    f.optional_field("hyperparameters", &P::hyperparameters, "Its param group's hyperparameters (lr, betas, ...).",
                     {{"type", "object"}, {"additionalProperties", num}});
    f.optional_field("default_layout", &P::default_layout,
                     "Where the Weights page starts: the layout of the value's shape.",
                     {{"$ref", "#/$defs/WeightLayout"}});
    f.optional_field("instruments", &P::instruments, "watch_weight_tensor instruments' outputs by name.",
                     {{"type", "object"}, {"additionalProperties", stats}});
  }
};

// get_weight_stats' reply.
struct WeightStats {
  static constexpr const char* kWireName = "WeightStats";
  std::string layer;
  std::string kind;
  json position;  // to_json(BatchPosition)
  uint64_t sequence = 0;
  std::vector<ParameterStats> parameters;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("layer", &WeightStats::layer, "The layer.");
    f.field("kind", &WeightStats::kind, "Its kind (Conv2d, Linear, ...).");
    f.field("position", &WeightStats::position, "The captured batch (read after its optimizer step).",
            {{"$ref", "#/$defs/Position"}});
    f.field("sequence", &WeightStats::sequence, "The snapshot's sequence.");
    f.field("parameters", &WeightStats::parameters, "The parameters asked for (all when none were named).");
  }
};

// --- Statistics over time (list_stats, get_stats_history, get_current_stats). ---

// A phase's epochs of a layer in list_stats.
struct CollectedPhase {
  static constexpr bool kInline = true;
  std::string phase;
  std::vector<int64_t> epochs;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("phase", &CollectedPhase::phase, "The phase.");
    f.field("epochs", &CollectedPhase::epochs, "The epochs with statistics, oldest first.");
  }
};

// A layer with collected statistics in list_stats.
struct CollectedLayer {
  static constexpr bool kInline = true;
  std::string layer;
  std::vector<CollectedPhase> phases;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("layer", &CollectedLayer::layer, "The layer.");
    f.field("phases", &CollectedLayer::phases, "Its phases, in schedule order.");
  }
};

// list_stats' reply.
struct StatsList {
  static constexpr const char* kWireName = "StatsList";
  uint64_t sequence = 0;
  std::vector<double> edges;
  std::vector<CollectedLayer> layers;
  std::map<std::string, std::vector<std::string>> parameters;
  std::vector<SeriesInfo> series;
  int64_t device_bytes = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("sequence", &StatsList::sequence, "The statistics view's sequence (grows with every publish).");
    f.field("edges", &StatsList::edges, "The signed-log histogram's bin edges.");
    f.field("layers", &StatsList::layers, "The layers with statistics, in graph order.");
    f.field("parameters", &StatsList::parameters, "layer -> its parameters with samples.");
    f.field("series", &StatsList::series, "The logged scalar and metric series.");
    f.field("device_bytes", &StatsList::device_bytes, "What the accumulators hold on their device.");
  }
};

// One accumulator as published (nansense::TensorStatsSnapshot): a layer's
// activations or gradients over a phase's batches in one epoch.
struct CollectedStats {
  static constexpr const char* kWireName = "TensorStatsSnapshot";
  int64_t n = 0;
  json sum;     // common::number
  json sum_sq;  // common::number
  json mean = nullptr;
  json std = nullptr;
  json median = nullptr;
  json min = nullptr;
  json max = nullptr;
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
  std::optional<std::vector<int64_t>> hist;
  std::optional<std::vector<std::vector<int64_t>>> channel_hists;
  int64_t channels = 0;
  int64_t binned = 0;
  std::optional<int64_t> dead_count;
  std::vector<int64_t> dead_channels;
  template <class Fields>
  static void fields(Fields& f) {
    using C = CollectedStats;
    const json num = {{"$ref", "#/$defs/Num"}};
    const json num_or_null = {{"anyOf", {num, {{"type", "null"}}}}};
    f.field("n", &C::n, "The finite values folded in.");
    f.field("sum", &C::sum, "Their sum.", num);
    f.field("sum_sq", &C::sum_sq, "The sum of their squares.", num);
    f.field("mean", &C::mean, "Their mean; null without finite values.", num_or_null);
    f.field("std", &C::std, "Their population std; null without finite values.", num_or_null);
    f.field("median", &C::median, "The median from the bins; null when the bins held no value.", num_or_null);
    f.field("min", &C::min, "The smallest finite value; null without one.", num_or_null);
    f.field("max", &C::max, "The largest finite value; null without one.", num_or_null);
    f.field("nan", &C::nan, "NaN values.");
    f.field("pos_inf", &C::pos_inf, "+Inf values.");
    f.field("neg_inf", &C::neg_inf, "-Inf values.");
    f.field("hist", &C::hist, "The layer's counts over the signed-log bins; null once collapsed (older epochs).");
    f.field("channel_hists", &C::channel_hists,
            "Per channel (dim 1) the same counts, for the first channels up to the limit; null when there are none.");
    f.field("channels", &C::channels, "The dim-1 size seen; 0 when per-channel statistics are off.");
    f.field("binned", &C::binned, "The values the bins count (fewer when the histograms were sampled).");
    f.field("dead_count", &C::dead_count,
            "Channels whose every value fell in the zero band; null when unknown (no per-channel histograms).");
    f.field("dead_channels", &C::dead_channels, "Their indices (while the bins exist).");
  }
};

// A layer's statistics in one epoch of a phase.
struct EpochStats {
  static constexpr const char* kWireName = "EpochStats";
  int64_t epoch = 0;
  int64_t batches = 0;
  std::optional<CollectedStats> activation;
  std::optional<CollectedStats> gradient;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("epoch", &EpochStats::epoch, "The epoch.");
    f.field("batches", &EpochStats::batches, "The batches folded in.");
    f.field("activation", &EpochStats::activation, "Its activations'; null when none were collected.");
    f.field("gradient", &EpochStats::gradient, "Its gradients'; null when none were collected.");
  }
};

// A parameter at an epoch's first collected batch (nansense::ParameterSample).
struct ParameterSampleReply {
  static constexpr const char* kWireName = "ParameterSample";
  int64_t epoch = 0;
  json value_norm, mean, std, min, max;                     // common::number
  json grad_norm, grad_mean, grad_std, grad_min, grad_max;  // common::number or null
  json update_ratio;                                        // common::number or null
  template <class Fields>
  static void fields(Fields& f) {
    using P = ParameterSampleReply;
    const json num = {{"$ref", "#/$defs/Num"}};
    const json num_or_null = {{"anyOf", {num, {{"type", "null"}}}}};
    f.field("epoch", &P::epoch, "The epoch.");
    f.field("value_norm", &P::value_norm, "The value's L2 norm.", num);
    f.field("mean", &P::mean, "The value's mean.", num);
    f.field("std", &P::std, "The value's std.", num);
    f.field("min", &P::min, "The value's minimum.", num);
    f.field("max", &P::max, "The value's maximum.", num);
    f.field("grad_norm", &P::grad_norm, "The gradient's L2 norm; null without a gradient.", num_or_null);
    f.field("grad_mean", &P::grad_mean, "The gradient's mean; null without a gradient.", num_or_null);
    f.field("grad_std", &P::grad_std, "The gradient's std; null without a gradient.", num_or_null);
    f.field("grad_min", &P::grad_min, "The gradient's minimum; null without a gradient.", num_or_null);
    f.field("grad_max", &P::grad_max, "The gradient's maximum; null without a gradient.", num_or_null);
    f.field("update_ratio", &P::update_ratio,
            "||w after the step - w before|| / ||w before||; null when w before was all zeros.", num_or_null);
  }
};

// get_stats_history's reply.
struct StatsHistory {
  static constexpr const char* kWireName = "StatsHistory";
  std::string layer;
  std::vector<double> edges;
  std::map<std::string, std::vector<EpochStats>> phases;
  std::map<std::string, std::vector<ParameterSampleReply>> parameters;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("layer", &StatsHistory::layer, "The layer.");
    f.field("edges", &StatsHistory::edges, "The signed-log histogram's bin edges.");
    f.field("phases", &StatsHistory::phases, "phase -> its epochs' statistics, oldest first.");
    f.field("parameters", &StatsHistory::parameters, "parameter -> its samples, oldest first.");
  }
};

// What a bool or integer tensor holds, in counts.
struct ValueCounts {
  static constexpr const char* kWireName = "ValueCounts";
  std::string dtype;
  int64_t numel = 0;
  std::optional<int64_t> min;
  std::optional<int64_t> max;
  int64_t distinct = 0;
  std::optional<int64_t> true_count;
  std::optional<double> true_fraction;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("dtype", &ValueCounts::dtype, "The tensor's dtype.");
    f.field("numel", &ValueCounts::numel, "Its elements.");
    f.field("min", &ValueCounts::min, "The smallest value; null when empty.");
    f.field("max", &ValueCounts::max, "The largest value; null when empty.");
    f.field("distinct", &ValueCounts::distinct, "How many different values.");
    f.optional_field("true_count", &ValueCounts::true_count, "Only for bool: how many are true.");
    f.optional_field("true_fraction", &ValueCounts::true_fraction, "Only for bool: the fraction that is true.");
  }
};

// get_current_stats' reply.
struct CurrentStats {
  static constexpr const char* kWireName = "CurrentStats";
  std::string layer;
  json position;  // to_json(BatchPosition)
  std::optional<CollectedStats> activation;
  std::optional<CollectedStats> gradient;
  std::optional<SamplesKept> samples;
  std::optional<ValueCounts> values;
  std::optional<std::string> note;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("layer", &CurrentStats::layer, "The layer.");
    f.field("position", &CurrentStats::position, "The captured batch.", {{"$ref", "#/$defs/Position"}});
    f.field("activation", &CurrentStats::activation,
            "Its output binned like the collected statistics; null when not floating point.");
    f.field("gradient", &CurrentStats::gradient, "The gradient into its output, binned; null without one.");
    f.optional_field("samples", &CurrentStats::samples, "Only where the snapshot budget left samples out.");
    f.optional_field("values", &CurrentStats::values,
                     "Only for a bool or integer layer: its values counted (activation is null).");
    f.optional_field("note", &CurrentStats::note, "Only with values: why they are counted, not binned.");
  }
};

}  // namespace nansense::server
