// Numerical debugging: catch the first NaN/Inf (and gradient underflow or
// overflow) of a run, name the op that produced it, pause before the optimizer
// applies it, and replay it bit for bit from a NaN capsule.
//
// How it works, and what it costs:
// - The guard. Every parameter carries an autograd hook; on a checked batch the
//   first one to fire queues a callback that runs when backward() is done and
//   before the user's optimizer.step(). It reads every parameter gradient with
//   one device->host sync (a |g| sum per parameter) and only on a suspicious sum
//   computes per-layer fractions. About 0.1% of a batch on the demo CNN
//   (bench/numerics), so it checks every batch by default, in every mode.
// - The flight recorder. Every batch keeps the batch item (a reference), the
//   RNG states (CPU, and CUDA when present) and copies of buffers that changed
//   in place. When the guard trips it writes a NaN capsule: the training state
//   the batch began from (pre-step weights, buffers, every optimizer's state,
//   the LR schedule, RNG states; the same state an epoch checkpoint holds, in
//   the same checksummed file format) plus the batch, position and settings.
// - Root cause. On a traced batch every op of forward and backward is observed
//   at the dispatcher; the producer is the first op whose inputs were finite and
//   whose output was not. A batch that tripped untraced is run again, traced,
//   from the recorded state (see rerun_to_trace).
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "nansense/errors.h"
#include "nansense/position.h"
#include "nansense/tensor_stats.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace nansense {

// What the debugger checks, and how often. Changed at run time through
// Session::set_debug_settings, the UI's gear dialog or the MCP tools.
struct DebugSettings {
  // Master switch. Default true. false: hooks return at once, nothing is
  // checked or recorded (no cost beyond a flag check per hook).
  TORCH_ARG(bool, enabled) = true;
  // Check every n-th batch (>= 1). Default 1, every batch: the guard costs
  // about 0.1% of a batch on the demo CNN.
  TORCH_ARG(int64_t, interval_batches) = 1;
  // NaN / +-Inf in activations, activation gradients and weight gradients;
  // one non-finite value trips it. Fractions are of element count. Default
  // true; part of the guard's cost above.
  TORCH_ARG(bool, check_nan_inf) = true;
  // Gradient underflow / overflow, dtype-aware: subnormal when
  // 0 < |g| < finfo.tiny, overflow when |g| >= finfo.max / 16. Trips when the
  // band holds at least `threshold_fraction` of a layer's summed finite |grad|.
  // Default true; computed only when the guard's per-parameter sums look
  // suspicious, so it adds nothing to a healthy batch.
  TORCH_ARG(bool, check_under_over) = true;
  // In (0, 1]. Default 0.1.
  TORCH_ARG(double, threshold_fraction) = 0.1;
  // Also trace every n-th batch at op level. Default 0: never. Captured batches (the
  // ones the UI shows) and re-runs of a tripped batch are always traced.
  // Tracing costs about 10% of the batches it covers (bench/numerics).
  TORCH_ARG(int64_t, trace_interval_batches) = 0;
  // When the guard trips on a batch that was not traced, restore the state the
  // flight recorder kept (weights, buffers, optimizer state, RNG) and deliver
  // the same batch item again, traced, to name the producer. The loop body then
  // runs twice for that batch: the optimizer step of the first run changes
  // nothing (its gradients are cleared) and the weights, optimizer states, the
  // scheduler given to start() and RNG are restored before the second, but
  // the body's own counters, logs and metric accumulators see the batch twice
  // (Session::rerunning() tells the second run; log_scalar keeps only the
  // second run's values). The re-run assumes the body zeroes gradients, as
  // almost every loop does.
  // Default true. Cost: only when the guard trips (the batch runs again);
  // the recorder's per-batch bookkeeping is in the guard's 0.1%.
  TORCH_ARG(bool, rerun_to_trace) = true;
  // Intended non-finite values that must not trip: op names ("masked_fill" or
  // "aten::masked_fill") or layer names (a module path covers its children).
  // Default none (explicit +-inf fills are intended anyway). No cost.
  TORCH_ARG(std::vector<std::string>, allow) = {};
  // Where NaN capsules are written (created when first needed). Default
  // "nansense_capsules"; empty: no file. Cost: one file when the guard trips.
  TORCH_ARG(std::string, capsule_dir) = "nansense_capsules";

 public:
  // Whether at least one check would run.
  bool any_check() const { return enabled_ && (check_nan_inf_ || check_under_over_); }
};

// Per-layer fractions of one detected error: a row of the details table.
struct LayerReport {
  // The layer as the architecture graph names it ("features.0", "relu_1"), or
  // a parameter's module path when no batch was captured.
  std::string layer;
  // Fractions of element count, the worst over the layer's activation,
  // activation gradient and weight gradients. In [0, 1].
  double nan = 0;
  double inf = 0;
  // Fractions of the layer's summed finite |grad| in the subnormal / overflow
  // band (gradients only). In [0, 1]. Internal key "underflow" reads "subnormal".
  double underflow = 0;
  double overflow = 0;
  // The gradient dtype the bands were measured against; nullopt when no
  // floating-point gradient was scanned for the layer.
  std::optional<std::string> dtype;
  // Where the non-finite values were: "activation", "activation_gradient",
  // "weight_gradient", or "loss" (the row named "loss": the tensor backward()
  // started from, checked at every checked batch, so a NaN loss whose
  // gradients stay finite is an error too).
  std::vector<std::string> sources;
};

// One op of a traced batch.
struct OpReport {
  std::string op;    // "aten::div"
  std::string pass;  // "forward" or "backward"
  // Backward ops: the autograd node running them ("SqrtBackward0") and the
  // forward op it differentiates ("aten::sqrt").
  std::string backward_node;
  std::string forward_op;
  // The layer of the op (a backward op: of its forward op), as the
  // architecture graph names it; nullopt outside the model (the loss).
  std::optional<std::string> layer;
  // Shape, dtype, non-finite counts and finite range of what it read and wrote.
  std::vector<TensorStats> inputs;
  std::vector<TensorStats> outputs;
  int64_t index = 0;  // place among the traced ops, in execution order
};

// Where the first non-finite value of a batch came from.
struct RootCause {
  enum class Status {
    kFound,          // `producer` made it from finite inputs
    kFromOutside,    // already non-finite when it entered the traced ops: see summary
    kNotReproduced,  // the traced re-run of the batch stayed finite
    kPending,        // the batch is being re-run with tracing
    kNotTraced,      // no trace (re-runs off, or the loop left the batch)
    kCompiledOnly,   // non-finite running compiled (torch.compile); its eager re-run stayed finite
  };
  Status status = Status::kNotTraced;
  std::optional<OpReport> producer;
  // The first ops that only passed non-finite values on, and how many there were.
  std::vector<OpReport> propagators;
  int64_t propagator_count = 0;
  // Later ops that also made non-finite values from finite inputs (the same
  // fault hit again: a loss term per missing class, say).
  int64_t other_producer_count = 0;
  // One sentence a person reads first.
  std::string summary;
};
// "found", "from_outside", "not_reproduced", "pending", "not_traced", "compiled_only".
std::string_view to_string(RootCause::Status status);

// An immutable record of one detected numerical error. Later hits merge into
// the standing error: reasons are united, each layer keeps its worst fraction,
// the first position is kept.
struct DebugError {
  BatchPosition position;                // the batch it was first detected on
  std::vector<std::string> reasons;      // subset of "nan", "inf", "underflow", "overflow"
  std::vector<std::string> checks_used;  // subset of "nan_inf", "under_over"
  std::vector<LayerReport> layers;       // affected layers, in graph order
  std::optional<RootCause> root_cause;   // nullopt for under/overflow-only errors
  std::string capsule;                   // the NaN capsule written for it ("" if none)
  int64_t hits = 1;                      // checked batches that tripped since
  // The poisoned optimizer update of the batch that tripped:
  // "held"    paused before the optimizer step; resuming applies it unless
  //           skip_update is chosen (Session::skip_update, REST, MCP, UI);
  // "applied" the loop went on and its optimizer.step() used the gradients;
  // "skipped" every parameter's gradient was cleared before the loop went on,
  //           so its optimizer.step() left weights and optimizer state alone;
  // ""        the trip was found after the step (nothing to choose).
  std::string update;
  // The batch tripped untraced and ran again from the recorded state, traced
  // (rerun_to_trace): the weights, buffers, every optimizer's state, the LR
  // scheduler given to start() and the RNG states were restored before it,
  // but the loop body ran that batch twice, so what the loop keeps itself
  // (counters, logs, metric accumulators, a scheduler not given to start())
  // saw it twice. Session::rerunning() is true during the second run.
  bool rerun = false;
  // Set when the error is a collapsing loss scale (see LossScaleStatus): how
  // it collapsed ("24 steps skipped in a row, scale 2^-8"). Empty otherwise.
  std::string loss_scale;
  // Where a trainer adapter drives the session: the optimizer step that
  // tripped, and the micro-batch its checks tripped in (micro_batch -1 when
  // the trip came after the last one, at the optimizer step).
  std::optional<TrainerStep> trainer_step;
};

// A mixed-precision loss scaler (torch.amp.GradScaler) as the guard sees it.
// The scaler multiplies the loss before backward(); where the scaled
// gradients overflow (Inf/NaN) while the loss itself was finite, it skips
// that optimizer step and lowers its scale. That is the scaler doing its job
// (most fp16 runs skip a few steps at first), so the guard counts it here and
// neither pauses nor re-runs. A non-finite loss or forward is still an error,
// as without a scaler. A collapsing scale is an error: the guard records it
// and names the op that overflows through the traced re-run, once
// kLossScaleCollapseSkips steps in a row were skipped or the scale in use
// fell below kLossScaleFloor. Front ends report the scaler's scale; the
// decision is the engine's.
struct LossScaleStatus {
  bool in_use = false;          // a scaler is known and enabled
  std::optional<double> scale;  // the scale last read, after the loop's update()
  int64_t skipped_steps = 0;    // steps skipped for a scaled overflow, this run
  int64_t skips_in_row = 0;     // of them, how many in a row up to the last checked batch
  std::optional<BatchPosition> last_skipped;
};
// A scale that halves on every step from GradScaler's default 2^16 falls
// below 1 within 17 steps; a run that starts from a far higher scale
// (2^24 or more) may skip that many in a row in its first steps and recover,
// so a row alone counts as a collapse only past 24.
inline constexpr int64_t kLossScaleCollapseSkips = 24;
// GradScaler's documentation: a scale below 1 means something is wrong.
inline constexpr double kLossScaleFloor = 1.0;

// A NaN capsule that cannot be used: unreadable, truncated, corrupt, of another
// format version (a capsule from an older nansense format is refused, saying
// so), or recorded for a different model or optimizers. The message names
// what does not match.
class CapsuleError : public Error {
 public:
  using Error::Error;
};

// What a NaN capsule held, after replay_capsule() restored it.
struct Capsule {
  BatchPosition position;
  // Every tensor of the batch item, in ItemTensors order (an Example: data,
  // target), on the CPU.
  std::vector<torch::Tensor> batch;
  DebugSettings settings;
  std::vector<std::string> reasons;
  // The parameter gradients as the guard saw them (non-finite included).
  std::map<std::string, torch::Tensor> gradients;
  int num_threads = 1;
  // Anything that may keep the replay from being exact (an in-place change to
  // the batch during the step, a batch item with no tensors to record).
  std::vector<std::string> notes;

  // Whether `model`'s parameter gradients now equal the recorded ones bit for
  // bit (NaN payloads included). On a mismatch, `difference` says where.
  bool gradients_match(const torch::nn::Module& model, std::string* difference = nullptr) const;
};

// Loads the NaN capsule at `path`, checks it against `model` (parameter and
// buffer names, shapes, dtypes) and `optimizers` (their number, order, types
// and param-group sizes: pass them as StartOptions().optimizers() had them),
// and restores the recorded weights, buffers, train/eval mode, the optimizers'
// state and param-group options (learning rates), gradient presence, RNG
// states and torch thread count. With no optimizers given, their state is
// left alone. The LR schedule's own state (a step count) is not restored:
// the learning rates come back with the optimizers. Run the batch body once
// on `batch` to reproduce the NaN; on CPU it is bit for bit. Throws
// CapsuleError, with nothing changed.
Capsule replay_capsule(const std::string& path, torch::nn::Module& model,
                       const std::vector<torch::optim::Optimizer*>& optimizers);
// The same for a session with one optimizer (or none).
Capsule replay_capsule(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer = nullptr);

}  // namespace nansense
