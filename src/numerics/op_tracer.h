// Root cause: observes every op of a traced batch, forward and backward, and
// names the producer of the first non-finite value — the first op whose inputs
// were all finite and whose output was not — apart from the ops that merely
// propagated it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nansense/debug.h"
#include "observer/observer.h"

namespace nansense::numerics {

class OpTracer : public observer::Consumer {
 public:
  // Names the layer of a forward op from one of its outputs (the capture
  // tracer's names, so that the UI can highlight it); nullopt when unknown.
  using LayerNamer = std::function<std::optional<std::string>(const torch::Tensor& output)>;

  // Attaches to `observer` (which outlives it) for every op of the batch,
  // forward and backward, on whichever thread autograd runs them. `batch` are
  // the batch item's tensors, so that a non-finite input can be traced back
  // to the data.
  OpTracer(const torch::nn::Module& model, std::vector<std::string> allow, LayerNamer namer,
           std::vector<torch::Tensor> batch, observer::Observer& observer);
  ~OpTracer();
  OpTracer(const OpTracer&) = delete;
  OpTracer& operator=(const OpTracer&) = delete;

  // The batch item's tensors, once the loop has handed them over.
  void set_batch(std::vector<torch::Tensor> batch) { batch_ = std::move(batch); }
  // Ops after this are the optimizer step (pass "step").
  void mark_backward_done() { backward_done_ = true; }
  // A micro-batch of the step begins (gradient accumulation): its ops are a
  // forward again, and the backward ops after it find their forward ops.
  void begin_micro_batch() { backward_done_ = false; }
  // Detaches from the observer.
  void stop();

  // Whether an op produced or passed on a non-finite value that is not allowed.
  bool saw_non_finite() const { return producer_.has_value() || propagator_count_ > 0; }
  bool saw_nan() const { return saw_nan_; }
  bool saw_inf() const { return saw_inf_; }
  // The root cause so far; `rename` (if set) maps the layer names the namer
  // gave to the ones to report.
  using Rename = std::function<std::string(const std::string&)>;
  RootCause result(const Rename& rename = {}) const;
  // The layers (as the namer calls them) whose ±Inf values are intended (an
  // explicit fill and what carried it along); a NaN in them is not.
  const std::set<std::string>& intended_layers() const { return intended_layers_; }
  // The first failure of the tracer itself ("" if none); it stops observing then.
  const std::string& error() const { return error_; }

  // observer::Consumer
  bool wants_backward() const override { return true; }
  void op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                const std::vector<observer::Frame>& stack) override;

 private:
  struct ForwardOp {
    std::string op;
    std::optional<std::string> layer;
  };

  // The autograd node an op runs under (the innermost one on the stack), if
  // any: its name and sequence number. An op under none runs in the forward
  // pass (or the optimizer step).
  struct Pass {
    bool backward = false;
    std::string node;
    int64_t node_seq = -1;
  };
  // Where an op ran: the layer and forward op it belongs to.
  struct Site {
    std::optional<std::string> layer;
    std::string forward_op;
  };
  // The non-finite values among an op's inputs.
  struct Inputs {
    bool bad = false;                        // one holds a non-finite value that was not intended
    bool allowed = false;                    // one holds an intended non-finite value
    const torch::Tensor* outside = nullptr;  // the first bad one no traced op made
  };

  // One traced op, in named steps: which pass it ran in, a value-preserving
  // op carrying its input's standing through, where it ran, and (when an
  // output is not finite) what it is.
  void process(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
               const std::vector<observer::Frame>& stack);
  static Pass pass_of(const std::vector<observer::Frame>& stack);
  void carry_through(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, bool backward);
  Site locate(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, const Pass& pass);
  Inputs inputs_of(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs) const;
  void mark(const std::vector<torch::Tensor>& outputs, bool intended);
  void classify(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, const Pass& pass,
                const Site& site, const std::string& base);
  bool is_allowed(const torch::Tensor& t) const;
  std::optional<std::string> forward_layer(const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& outputs);
  bool allowed(const std::string& op, const std::optional<std::string>& layer) const;
  // Where a non-finite tensor that no traced op produced came from.
  std::string origin_of(const torch::Tensor& t) const;
  OpReport report(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, bool backward,
                  const std::string& node, const std::string& forward_op,
                  const std::optional<std::string>& layer) const;

  std::vector<std::string> allow_;
  LayerNamer namer_;
  std::vector<torch::Tensor> batch_;
  // Parameter / buffer (and views of them) -> module path and qualified name.
  std::unordered_map<const c10::TensorImpl*, std::pair<std::string, std::string>> owners_;
  std::unordered_map<const c10::TensorImpl*, std::string> layer_of_;    // forward outputs
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> produced_;  // non-finite outputs of traced ops
  std::unordered_set<const c10::TensorImpl*> allowed_;                  // outputs holding intended values
  std::unordered_set<const c10::StorageImpl*> allowed_storages_;        // storages of intended fills
  std::set<std::string> intended_layers_;
  std::map<int64_t, ForwardOp> forward_ops_;  // by autograd sequence number
  std::vector<torch::Tensor> keep_alive_;
  int64_t index_ = 0;
  bool backward_done_ = false;
  bool stopped_ = false;
  observer::Observer& observer_;
  bool attached_ = false;

  std::optional<OpReport> producer_;
  bool from_outside_ = false;
  std::string outside_summary_;
  std::vector<OpReport> propagators_;
  int64_t propagator_count_ = 0;
  int64_t other_producers_ = 0;
  bool saw_nan_ = false;
  bool saw_inf_ = false;
  std::string error_;
};

}  // namespace nansense::numerics
