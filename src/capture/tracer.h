// Discovers a forward's layers and captures their activations and gradients
// by observing every top-level op at the dispatcher (at::RecordFunction).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nansense/architecture.h"

namespace nansense::capture {

// Appends every defined tensor inside an op argument or result (tensors,
// tensor lists, nested lists and tuples) to `out`.
void collect_tensors(const c10::IValue& v, std::vector<torch::Tensor>& out);

// What one capture batch produced. Gradients arrive during backward, from
// autograd hooks, hence the mutex.
struct TraceResult {
  std::shared_ptr<Architecture> architecture;
  std::map<std::string, torch::Tensor> activations;  // CPU copies
  std::vector<torch::Tensor> inputs;                 // CPU copies, input-layer order

  std::mutex grad_mu;
  std::map<std::string, torch::Tensor> gradients;  // CPU copies
  // Per layer index: its name and the op whose output is its activation; a
  // gradient hook only records when it belongs to that final op.
  std::vector<std::string> layer_names;
  std::vector<int64_t> final_op;
  // Set when tracing failed part-way: the result must not be published.
  std::string error;
};

// One capture batch's tracer. Lives on the training thread, from the start of
// the batch to its end; while installed, a thread-local RecordFunction
// callback feeds it every top-level op of that thread.
//
// Rules (see DESIGN.md §2): an op that reads a module's parameters or buffers
// belongs to that module's layer, named by module path; a parameterless op
// that consumes a layer's output is a layer of its own, named fx-style
// ("relu", "relu_1"); ops with no floating-point output are not layers; a loss
// op (nll_loss, cross_entropy, ...) or the start of backward ends the forward.
class Tracer {
 public:
  explicit Tracer(const torch::nn::Module& model);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Registers the batch's model inputs as input layers. `stacked` means the
  // tensors are one batch's examples that the model sees stacked together
  // (a std::vector<Example<>> item): they form the single layer "input".
  void set_inputs(const std::vector<torch::Tensor>& inputs, bool stacked);
  // Stops observing ops (the callback is removed) and returns the result.
  // Gradients may still arrive afterwards while backward has not run.
  std::shared_ptr<TraceResult> finish();
  // The result as it stands mid-batch (activations so far; gradients as hooks
  // deliver them), for checks that run before finish().
  std::shared_ptr<TraceResult> result() const { return result_; }
  // The layer whose op produced `impl` in this forward; nullopt when none did.
  std::optional<std::string> layer_of(const c10::TensorImpl* impl) const;

  // Called from the RecordFunction callbacks.
  void on_op_start(const at::RecordFunction& fn);
  void on_op_end(const at::RecordFunction& fn);

 private:
  struct Owner {
    std::string module_path;   // "" for the root module
    std::string module_kind;
    std::string param_name;    // qualified name
  };

  // The literal arguments of the op starting, for an op layer's description.
  std::string pending_args_;
  // Module path -> its printout, for module layers' descriptions.
  std::map<std::string, std::string> module_descriptions_;

  void end_forward();
  void start_op(const at::RecordFunction& fn);
  void end_op(const at::RecordFunction& fn);
  int add_layer(LayerInfo info);
  void record_op(const std::string& op, const std::vector<torch::Tensor>& inputs,
                 const std::vector<torch::Tensor>& outputs);
  std::string fresh_name(const std::string& base);
  void capture_activation(int layer, const torch::Tensor& out, int64_t op_seq);

  std::unordered_map<const c10::TensorImpl*, Owner> owners_;
  std::unordered_map<const c10::TensorImpl*, int> producer_;
  std::map<std::string, int> name_counts_;
  std::map<std::string, int> open_module_call_;  // module path -> layer index
  std::vector<LayerInfo> layers_;
  std::vector<std::vector<int>> producers_;  // per layer: layers feeding it
  std::vector<torch::Tensor> keep_alive_;  // pins TensorImpl addresses for identity
  std::vector<torch::Tensor> pending_inputs_;
  int depth_ = 0;
  int64_t op_seq_ = 0;
  int last_layer_ = -1;
  int stacked_input_ = -1;  // the input layer of a stacked batch, if any
  bool forward_done_ = false;
  bool installed_ = false;
  uint64_t handle_ = 0;
  std::shared_ptr<TraceResult> result_;
};

}  // namespace nansense::capture
