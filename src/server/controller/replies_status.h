// The status and the replies of the patch and debug areas, typed (reply.h):
// each struct lists its fields once, with what each means, and both its JSON
// and its JSON Schema in wire_types() come from that list. Torch-free, like
// replies.h, so that wire_types.cpp reads them on its own.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nansense/position.h"
#include "server/controller/replies.h"
#include "server/controller/reply.h"

namespace nansense {
// Declared with the session (nansense/session.h, which needs torch); its
// words are written by to_string(RunState) from there.
enum class RunState;
}  // namespace nansense

namespace nansense::server {

// --- Min/Max patches and bin samples (PatchArea). ---

// One (slot, channel) cell of a patch grid.
struct PatchCell {
  static constexpr const char* kWireName = "PatchCell";
  int64_t slot = 0;
  int64_t channel = 0;
  bool filled = false;
  json score = nullptr;  // common::number, or null for an empty slot
  int64_t batch = 0;
  int64_t sample = 0;
  int64_t y = 0;
  int64_t x = 0;
  int64_t top = 0;
  int64_t left = 0;
  std::optional<std::string> png;
  template <class Fields>
  static void fields(Fields& f) {
    using C = PatchCell;
    f.field("slot", &C::slot, "Its rank among the channel's kept inputs (0: the best).");
    f.field("channel", &C::channel, "Its channel.");
    f.field("filled", &C::filled, "Whether the slot holds an input yet.");
    f.field("score", &C::score, "The channel's value that ranked it; null for an empty slot.",
            {{"anyOf", {{{"$ref", "#/$defs/Num"}}, {{"type", "null"}}}}});
    f.field("batch", &C::batch, "The batch it came from.");
    f.field("sample", &C::sample, "The sample of that batch.");
    f.field("y", &C::y, "Where in the activation the channel responded (row).");
    f.field("x", &C::x, "Where in the activation the channel responded (column).");
    f.field("top", &C::top, "The crop's top row in the input.");
    f.field("left", &C::left, "The crop's left column in the input.");
    f.field("png", &C::png, "Base64 PNG of the crop; null for an empty slot.");
  }
};

// A patch crop's size in input pixels.
struct PatchCrop {
  static constexpr const char* kWireName = "PatchCrop";
  int64_t height = 0;
  int64_t width = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("height", &PatchCrop::height, "Its height (0 when there are no cells).");
    f.field("width", &PatchCrop::width, "Its width (0 when there are no cells).");
  }
};

// get_patches' reply: one ranking's grid of a layer's Min/Max patches.
struct Patches {
  static constexpr const char* kWireName = "Patches";
  std::string layer;
  std::string phase;
  int64_t epoch = 0;
  std::vector<std::string> phases;
  bool current_batch = false;
  std::optional<std::string> position;
  std::string grid;
  std::vector<std::string> grids;
  bool heatmap = false;
  int64_t samples = 0;
  int64_t channels = 0;
  PatchCrop crop;
  uint64_t sequence = 0;
  std::optional<std::string> note;
  std::vector<PatchCell> cells;
  template <class Fields>
  static void fields(Fields& f) {
    using P = Patches;
    const json grid = {{"$ref", "#/$defs/PatchGrid"}};
    f.field("layer", &P::layer, "The layer.");
    f.field("phase", &P::phase, "The phase of the gallery (the batch's, for current_batch).");
    f.field("epoch", &P::epoch, "The epoch of the gallery (the batch's, for current_batch).");
    f.field("phases", &P::phases, "The phases that have patches for the layer.");
    f.field("current_batch", &P::current_batch,
            "Whether it is the last captured batch's gallery rather than an epoch's.");
    f.field("position", &P::position, "current_batch: the batch's position as text; null for an epoch's gallery.");
    f.field("grid", &P::grid, "The ranking shown.", grid);
    f.field("grids", &P::grids, "The rankings collected.", {{"type", "array"}, {"items", grid}});
    f.field("heatmap", &P::heatmap, "Whether the channel's activation is drawn over each crop.");
    f.field("samples", &P::samples, "The rows: inputs kept per channel.");
    f.field("channels", &P::channels, "The columns: channels with patches.");
    f.field("crop", &P::crop, "The crops' size.");
    f.field("sequence", &P::sequence, "The sequence of the statistics view or snapshot it comes from.");
    f.field("note", &P::note, "Why there are no cells, or what the cells leave out; null when nothing to say.");
    f.field("cells", &P::cells, "The grid's cells, row by row.");
  }
};

// One element of a histogram bin, with the input crop around it.
struct BinSample {
  static constexpr const char* kWireName = "BinSample";
  int64_t sample = 0;
  std::vector<int64_t> index;
  json value;  // common::number
  int64_t top = 0;
  int64_t left = 0;
  std::optional<std::string> png;
  template <class Fields>
  static void fields(Fields& f) {
    using S = BinSample;
    f.field("sample", &S::sample, "The sample of the batch.");
    f.field("index", &S::index, "The element's coordinates after the batch dimension.");
    f.field("value", &S::value, "Its value.", {{"$ref", "#/$defs/Num"}});
    f.field("top", &S::top, "The crop's top row in the input.");
    f.field("left", &S::left, "The crop's left column in the input.");
    f.field("png", &S::png, "Base64 PNG of the input crop; null without an image input.");
  }
};

// get_bin_samples' reply: a few elements of the last captured batch in a
// histogram bin.
struct BinSamples {
  static constexpr const char* kWireName = "BinSamples";
  std::string layer;
  std::string kind;
  std::optional<int64_t> channel;
  int64_t bin = 0;
  std::vector<json> range;  // common::number: the bin's edges
  int64_t matches = 0;
  uint64_t sequence = 0;
  BatchPosition position;
  std::optional<std::string> note;
  std::vector<BinSample> samples;
  template <class Fields>
  static void fields(Fields& f) {
    using B = BinSamples;
    f.field("layer", &B::layer, "The layer.");
    f.field("kind", &B::kind, "Activations or gradients.", {{"$ref", "#/$defs/StripKind"}});
    f.field("channel", &B::channel, "The channel; null: the whole layer.");
    f.field("bin", &B::bin, "The histogram bin.");
    f.field("range", &B::range, "The bin's edges [low, high].",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/Num"}}}});
    f.field("matches", &B::matches, "Elements in the bin among the kept samples.");
    f.field("sequence", &B::sequence, "The snapshot's sequence.");
    f.field("position", &B::position, "The snapshot's batch.");
    f.field("note", &B::note, "What the samples leave out; null when nothing to say.");
    f.field("samples", &B::samples, "The elements picked (the same ones for the same snapshot and bin).");
  }
};

// --- The numerical banner (DebugArea::summary). ---

// The op that made the first non-finite value, in brief.
struct ProducerBrief {
  static constexpr const char* kWireName = "ProducerBrief";
  std::string op;
  std::string pass;
  std::optional<std::string> layer;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("op", &ProducerBrief::op, "The op.");
    f.field("pass", &ProducerBrief::pass, "The pass it ran in.");
    f.field("layer", &ProducerBrief::layer, "Its layer; null outside the layers.");
  }
};

// The standing numerical error, as the banner shows it.
struct DebugErrorSummary {
  static constexpr const char* kWireName = "DebugErrorSummary";
  std::vector<std::string> reasons;
  std::vector<std::string> reason_labels;
  BatchPosition position;
  std::string text;
  std::vector<std::string> layers;
  std::optional<std::string> root_cause_status;
  std::optional<ProducerBrief> producer;
  std::optional<std::string> capsule;
  int64_t hits = 0;
  std::optional<std::string> update;
  bool rerun = false;
  std::optional<std::string> ran_twice;
  bool skip_update = false;
  std::optional<TrainerStep> trainer_step;
  std::optional<std::string> skip_refused;
  template <class Fields>
  static void fields(Fields& f) {
    using E = DebugErrorSummary;
    f.field("reasons", &E::reasons, "What was found.",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/DebugReason"}}}});
    f.field("reason_labels", &E::reason_labels, "The reasons in words.");
    f.field("position", &E::position, "The batch it was first detected on.");
    f.field("text", &E::text, "The banner's headline.");
    f.field("layers", &E::layers, "The affected layers, in graph order.");
    f.field("root_cause_status", &E::root_cause_status, "How far the root cause was traced; null without a trace.",
            {{"anyOf", {{{"$ref", "#/$defs/RootCauseStatus"}}, {{"type", "null"}}}}});
    f.field("producer", &E::producer, "The op that made the first non-finite value; null when none was found.");
    f.field("capsule", &E::capsule, "The NaN capsule written for it; null when none.");
    f.field("hits", &E::hits, "Checked batches that tripped since.");
    f.field("update", &E::update, "What became of the poisoned update.", {{"$ref", "#/$defs/DebugUpdate"}});
    f.field("rerun", &E::rerun, "Whether the batch ran again, traced: the loop body saw it twice.");
    f.field("ran_twice", &E::ran_twice, "With rerun: what ran twice, in the front end's words; else null.");
    f.field("skip_update", &E::skip_update, "Whether skipping the held poisoned update is chosen.");
    f.field("trainer_step", &E::trainer_step,
            "Under a trainer adapter: the step and the micro-batch it tripped in; else null.");
    f.field("skip_refused", &E::skip_refused,
            "Why skipping the held update is refused (a distributed run); else null.");
  }
};

// The status's `debug`: what the numerical banner needs.
struct DebugSummary {
  static constexpr const char* kWireName = "DebugSummary";
  bool enabled = false;
  std::vector<std::string> checks;
  json loss_scale;  // numerics::to_json(LossScaleStatus)
  std::optional<DebugErrorSummary> error;
  template <class Fields>
  static void fields(Fields& f) {
    using D = DebugSummary;
    f.field("enabled", &D::enabled, "Whether the checks are on.");
    f.field("checks", &D::checks, "The check categories on.",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/DebugCheck"}}}});
    f.field("loss_scale", &D::loss_scale, "The loss scaler as the guard counts it.", {{"$ref", "#/$defs/LossScale"}});
    f.field("error", &D::error, "The standing error; null when none.");
  }
};

// --- The status (RunArea::get_status). ---

// One phase of the schedule.
struct PhaseSchedule {
  static constexpr const char* kWireName = "PhaseSchedule";
  std::string name;
  std::optional<int64_t> batches;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("name", &PhaseSchedule::name, "The phase.");
    f.field("batches", &PhaseSchedule::batches, "Its batches per epoch; null until known.");
  }
};

// The schedule: the epochs and the phases of each.
struct ScheduleSummary {
  static constexpr const char* kWireName = "Schedule";
  std::optional<int64_t> epochs;
  bool declared = false;
  std::vector<PhaseSchedule> phases;
  template <class Fields>
  static void fields(Fields& f) {
    using S = ScheduleSummary;
    f.field("epochs", &S::epochs, "The epochs of the run; null when not declared.");
    f.field("declared", &S::declared, "Whether the phases were declared (else learned during epoch 0).");
    f.field("phases", &S::phases, "The phases, in the order they run each epoch.");
  }
};

// The run's status as every transport shows it (GET /api/status, MCP
// get_status, each command's reply, the push channel). Typed, so that a
// transport reads the state or the snapshot sequence from a field, never back
// out of the JSON.
struct Status {
  static constexpr const char* kWireName = "Status";
  RunState state{};  // set by get_status (value-initialized: the first word, running)
  Mode mode = Mode::kStepBatch;
  std::optional<BatchPosition> live_position;      // where the loop is
  std::optional<BatchPosition> snapshot_position;  // the batch every view shows
  uint64_t snapshot_sequence = 0;                  // 0 before the first capture
  int64_t snapshot_batch_size = 0;
  // The samples its batch tensors hold (snapshot budget); == batch size when
  // nothing was left out.
  int64_t snapshot_samples_kept = 0;
  // A trainer adapter's step (the loop's, and the snapshot's); none for plain loops.
  std::optional<TrainerStep> live_trainer_step;
  std::optional<TrainerStep> snapshot_trainer_step;
  ScheduleSummary schedule;
  std::string hint;                     // status_hint(state, locked)
  std::optional<int64_t> paused_at_ms;  // wall clock, while paused
  TimeTravelSummary time_travel;
  std::optional<std::string> lost_reason;                   // only when lost
  std::optional<std::vector<std::string>> internal_errors;  // only when some part of nansense gave up
  DebugSummary debug;
  StatsSummary stats;
  ProbeStatus probe;
  bool locked = false;                  // Session::lock(): a shared, read-only session
  std::string front_end = "cpp";        // "cpp" (LibTorch) or "python" (PyTorch)
  std::vector<std::string> recordings;  // the keys of the active recordings
  // What they fix: setting -> why (RecordingArea::fixed_settings).
  std::map<std::string, std::string> fixed;
  // Only from refresh: whether a newer snapshot arrived within the wait.
  std::optional<bool> refreshed;
  template <class Fields>
  static void fields(Fields& f) {
    using S = Status;
    f.field("state", &S::state, "Where the training side stands.", {{"$ref", "#/$defs/RunState"}});
    f.field("mode", &S::mode, "How training proceeds after a resume (named after the command that set it).",
            {{"$ref", "#/$defs/Mode"}});
    f.field("live_position", &S::live_position, "Where the loop is; null before its first batch.");
    f.field("snapshot_position", &S::snapshot_position, "The batch every view shows; null before the first capture.");
    f.field("snapshot_sequence", &S::snapshot_sequence, "The shown snapshot's sequence (0 before the first capture).");
    f.field("snapshot_batch_size", &S::snapshot_batch_size, "The shown snapshot's batch size.");
    f.field("snapshot_samples_kept", &S::snapshot_samples_kept,
            "The samples its batch tensors hold (the snapshot budget); the batch size when none was left out.");
    f.field("live_trainer_step", &S::live_trainer_step,
            "Under a trainer adapter: the step the loop is in; null for a plain loop.");
    f.field("snapshot_trainer_step", &S::snapshot_trainer_step,
            "Under a trainer adapter: the step the snapshot shows (micro_batch: the one it was taken in; null: the "
            "step's end, every micro-batch shown); null for a plain loop.");
    f.field("schedule", &S::schedule, "The epochs and phases.");
    f.field("hint", &S::hint, "What to do next.");
    f.field("time_travel", &S::time_travel, "What the Time Travel button needs.");
    f.field("debug", &S::debug, "What the numerical banner needs.");
    f.field("stats", &S::stats, "The statistics settings and the published view's sequence.");
    f.field("probe", &S::probe, "The probe (get_probe_status).");
    f.field("locked", &S::locked, "Whether the session is locked: shared and read-only.");
    f.field("front_end", &S::front_end, "What runs the loop: a LibTorch (C++) program or PyTorch from Python.",
            {{"type", "string"}, {"enum", {"cpp", "python"}}});
    f.field("recordings", &S::recordings, "The keys of the active recordings.");
    f.field("fixed", &S::fixed,
            "What the active recordings fix, setting -> why: update_frequency, stats_scope, watch_performance, "
            "watched:<layer>, patch_layers:<layer>.");
    f.optional_field("paused_at_ms", &S::paused_at_ms, "While paused: when it paused (wall clock, ms).");
    f.optional_field("lost_reason", &S::lost_reason, "Only when lost: why.");
    f.optional_field("internal_errors", &S::internal_errors, "Only when some: the parts of nansense that gave up.");
    f.optional_field("refreshed", &S::refreshed,
                     "Only from refresh: whether a newer snapshot arrived within the wait.");
  }
};

}  // namespace nansense::server
