// Discovers a forward's layers and captures their activations and gradients
// by observing every top-level op at the dispatcher (at::RecordFunction).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/host_buffers.h"
#include "capture/sample_budget.h"
#include "nansense/architecture.h"
#include "nansense/tensor_stats.h"
#include "observer/observer.h"

namespace nansense::capture {

// What one capture batch produced. Gradients arrive during backward, from
// autograd hooks, hence the mutex.
struct TraceResult {
  std::shared_ptr<Architecture> architecture;
  std::map<std::string, torch::Tensor> activations;  // CPU copies
  std::vector<torch::Tensor> inputs;                 // CPU copies, input-layer order

  // With Tracer::Keep::device: the live tensors themselves (references on
  // their device, for statistics folded at the batch's end).
  std::map<std::string, torch::Tensor> device_activations;

  // Guards the gradients, and the CPU copies and budget below: a gradient
  // hook may trim every copy to fit the snapshot budget.
  std::mutex grad_mu;
  std::map<std::string, torch::Tensor> gradients;  // CPU copies
  std::map<std::string, torch::Tensor> device_gradients;
  // The snapshot budget's state, and the whole-batch statistics of the copies
  // it trimmed (computed on the tensor's device before trimming).
  SampleBudget budget;
  std::map<std::string, TensorStats> activation_stats;
  std::map<std::string, TensorStats> gradient_stats;
  // Per layer index: its name and the op whose output is its activation; a
  // gradient hook only records when it belongs to that final op.
  std::vector<std::string> layer_names;
  std::vector<int64_t> final_op;
  // Set when tracing failed part-way: the result must not be published.
  std::string error;
  // Where the CPU copies are written (Tracer::copy_into); fresh memory when null.
  std::shared_ptr<HostBuffers> buffers;
  // The |x| sums of float32 copies, taken as they were written
  // (HostBuffers::copy), so that the numerical checks need not read the
  // copies again. Keyed by the copy's TensorImpl, which the weak reference
  // keeps from being reused by another tensor; a copy written since (its
  // version moved) or replaced (trimmed to fewer samples) has no sum here.
  struct CopiedSum {
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> copy;
    int64_t version;
    double abs_sum;
  };
  std::unordered_map<const c10::TensorImpl*, CopiedSum> copied_abs_sums;
  // The sum taken as `t` was copied, if `t` is such a copy, unchanged.
  std::optional<double> copied_abs_sum(const torch::Tensor& t) const;
};

// One capture batch's tracer: a consumer of the batch's observer, on the
// training thread from the start of the batch to its end.
//
// The observer's RecordFunction callback shows the tracer every top-level op
// of the batch's forwards, with its inputs and outputs; tensor identity links
// them. Rules (docs/guide/loop.md says what users see of them):
// - an op that reads a module's parameters or buffers belongs to that
//   module's layer, named by module path; ops that read only parameters
//   (weight.t()) prepare a parameter for the op that uses it and are not
//   layers, so linear's matmul + add on a 3-D input is one layer;
// - a module called again in the same batch is a new layer per call
//   ("D.0", "D.0#2");
// - a parameterless op is a layer of its own, named fx-style and scoped
//   under the module whose call it sits in ("layers.0.relu"); when exactly
//   one registered parameterless module (a ReLU, a Dropout2d) could have run
//   it there, it takes that module's name;
// - ops with no floating-point output are not layers; loss ops are not
//   layers; the backward pass and ops that read gradients or write into
//   parameters (the optimizer step) are not observed;
// - every forward of the batch is traced (a GAN's several discriminator
//   calls): parameterless ops after a loss are kept only when the model uses
//   them again (a module or a loss consumes them), so metrics computed on the
//   outputs do not become layers.
// What a trace keeps of each activation and gradient: CPU copies (a
// published snapshot), references to the live device tensors (statistics
// folded on the device; no copy, no sync), or both.
struct TraceKeep {
  bool cpu = true;
  bool device = false;
  // With device: the layers whose device tensors are kept (judged by the
  // layer as it stands when its output appears: its name as finish() would
  // give it then); all when empty. The others' gradients are not held to
  // the batch's end.
  std::function<bool(const LayerInfo&)> device_layer;
  // With device: offered each kept layer's tensors early, so the taker can
  // fold them while they are still in the cache. An activation is offered
  // when the next op starts and cannot extend the layer's call (before an
  // in-place op overwrites it), a gradient as its hook delivers it. A tensor
  // taken (true returned) is not held to the batch's end. `layer` and
  // `op_seq` identify it as TraceResult::final_op does (the taker checks
  // that at the batch's end: a module call extended later replaces it);
  // `name` is the layer's name as judged now (provisional for gradients).
  std::function<bool(int layer, int64_t op_seq, const std::string& name, bool gradient, const torch::Tensor&)> take;
};

// What a tracer knows of the model before its first op: its registered
// modules and which one owns each parameter and buffer. Building it walks
// every module by name and prints each one's description, so a session keeps
// the last one and reuses it while the model has the same modules,
// parameters and buffers (compared by pointer, in order: no names, no text).
struct ModelIndex {
  struct Owner {
    std::string module_path;  // "" for the root module
    std::string module_kind;
    std::string param_name;  // qualified name
  };
  // A registered module, in named_modules() order.
  struct ModuleEntry {
    std::string path;
    std::string kind;
    bool parameterless = false;  // no parameters or buffers in its subtree
    std::string description;     // its printout ("" for the root)
  };
  std::unordered_map<const c10::TensorImpl*, Owner> owners;
  // The other modules a tied tensor is registered in (GPT-2's lm_head holds
  // the embedding's weight): their module, the first owner's parameter name.
  std::unordered_multimap<const c10::TensorImpl*, Owner> aliases;
  std::vector<ModuleEntry> modules;
  std::map<std::string, size_t> module_index;  // module path -> index in modules
  std::vector<torch::Tensor> parameters;       // every parameter, for their gradients
  std::unordered_set<const c10::TensorImpl*> parameter_impls;
  std::map<std::string, size_t> parameter_order;  // qualified name -> named_parameters() index
  // Modules, then parameters and buffers, by address: what reuse compares.
  // The modules are held (and with them their parameters and buffers), so
  // no new module or tensor can take one of these addresses while the index
  // lives: a replaced module never matches.
  std::vector<const void*> identity;
  std::vector<std::shared_ptr<torch::nn::Module>> held;

  // `cached` when the model still matches it, else a new index.
  static std::shared_ptr<const ModelIndex> of(const torch::nn::Module& model,
                                              std::shared_ptr<const ModelIndex> cached = nullptr);
};

class Tracer : public observer::Consumer {
 public:
  using Keep = TraceKeep;
  // Attaches to `observer`, which outlives it.
  // The CPU copies keep at most `budget_bytes` (0: no limit; see
  // StartOptions::snapshot_budget), starting from `start_samples` per batch
  // tensor (0: all; the last capture's fit saves trimming the same batch again).
  // `index` is ModelIndex::of(model) (built here when null).
  Tracer(const torch::nn::Module& model, observer::Observer& observer, Keep keep = {}, int64_t budget_bytes = 0,
         int64_t start_samples = 0, std::shared_ptr<const ModelIndex> index = nullptr);
  // The snapshot budget's share of the step's memory (SampleBudget::share)
  // and the memory the step began with (SampleBudget::base).
  void share_budget(double share, int64_t base_bytes);
  // The CPU copies (activations, gradients, then the snapshot's weights and
  // optimizer state) go into `buffers`' recycled memory.
  void copy_into(std::shared_ptr<HostBuffers> buffers) { result_->buffers = std::move(buffers); }
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Registers the batch's model inputs as input layers. `stacked` means the
  // tensors are one batch's examples that the model sees stacked together
  // (a std::vector<Example<>> item): they form the single layer "input".
  void set_inputs(const std::vector<torch::Tensor>& inputs, bool stacked);
  // Stops observing ops (detaches from the observer), settles the layers' final
  // names and returns the result. Gradients may still arrive afterwards.
  std::shared_ptr<TraceResult> finish();
  // The result as it stands mid-batch (activations so far, under provisional
  // names; gradients as hooks deliver them), for checks that run before
  // finish(). `final_name` maps its names to what finish() will call them.
  std::shared_ptr<TraceResult> result() const { return result_; }
  // Where the ops now run, for a caller that sees module calls (Python's
  // global module forward hooks): the path of the innermost open call of a
  // registered module ("" outside them all). Once reported, each op layer is
  // scoped by it, and a parameterless module that runs the op names it,
  // instead of both being judged from the module calls around the op.
  void set_module_scope(std::string path) {
    module_scope_ = std::move(path);
    scoped_ = true;
  }
  // The layer whose op produced `impl` in this batch (provisional name);
  // nullopt when none did.
  std::optional<std::string> layer_of(const c10::TensorImpl* impl) const;
  // A provisional layer name as finish() names it, judged from the ops seen
  // so far; names it does not know are returned unchanged.
  std::string final_name(const std::string& provisional) const;

  // observer::Consumer: the forward's ops; backward ops are not layers.
  bool wants_backward() const override { return false; }
  void op_started(const at::RecordFunction& fn, const observer::Frame& frame) override;
  void op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                const std::vector<observer::Frame>& stack) override;
  void backward_ran() override { gradients_stale_ = true; }

 private:
  using Owner = ModelIndex::Owner;
  using ModuleEntry = ModelIndex::ModuleEntry;
  // Per provisional layer, what naming and pruning at finish() need.
  struct LayerTrace {
    bool after_loss = false;           // created after the batch's first loss op
    bool feeds_loss = false;           // a loss op consumed its output
    std::optional<std::string> scope;  // the reported module scope it ran in
  };

  // The literal arguments of the op starting, for an op layer's description.
  std::string pending_args_;

  int add_layer(LayerInfo info);
  void record_op(const std::string& op, const std::vector<torch::Tensor>& inputs,
                 const std::vector<torch::Tensor>& outputs);
  bool touches_optimizer_state(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& outputs);
  std::string fresh_name(const std::string& base);
  std::string fresh_call_name(const std::string& module_path);
  void capture_activation(int layer, const torch::Tensor& out, int64_t op_seq);
  // Whether Keep::device_layer wants this layer's device tensors, and the
  // name it judged by.
  bool wanted_on_device(int layer, std::string* judged_name = nullptr) const;
  // The last layer output held for Keep::take, offered once no later op can
  // change it.
  struct Pending {
    int layer = -1;
    int64_t op_seq = 0;
    std::string name;  // as judged when captured
    torch::Tensor tensor;
  };
  Pending pending_;
  void offer_pending();
  struct FinalName {
    bool kept = false;  // false: an op after a loss that the model never used
    std::string name;
    int module = -1;  // the parameterless registered module that ran it
  };
  // Each provisional layer's fate, judged from the ops seen so far.
  std::vector<FinalName> final_names() const;

  std::shared_ptr<const ModelIndex> index_;
  // The owner of a parameter, a buffer, or a tensor derived from parameters
  // alone in this batch (weight.t()); null for the others.
  const Owner* owner_of(const c10::TensorImpl* impl) const;
  std::unordered_map<const c10::TensorImpl*, Owner> derived_owners_;
  std::unordered_map<const c10::TensorImpl*, int> producer_;
  std::map<std::string, int> name_counts_;
  std::map<std::string, int> module_calls_;
  std::map<std::string, int> open_module_call_;  // module path -> layer index
  std::unordered_set<const c10::TensorImpl*> gradient_impls_;
  bool gradients_stale_ = true;
  std::vector<LayerInfo> layers_;
  std::vector<LayerTrace> traces_;
  std::vector<std::vector<int>> producers_;  // per layer: layers feeding it
  // Pins the TensorImpl objects whose addresses identify tensors above, so
  // no later tensor reuses one: weak references keep the object, not its
  // storage, so values free when the loop drops them, as without tracing.
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> keep_alive_;
  void pin(const torch::Tensor& t);
  std::vector<torch::Tensor> pending_inputs_;
  int64_t op_seq_ = 0;
  int last_layer_ = -1;
  int stacked_input_ = -1;  // the input layer of a stacked batch, if any
  bool seen_loss_ = false;
  std::string module_scope_;  // set_module_scope()
  bool scoped_ = false;
  bool stopped_ = false;  // tracing failed part-way
  observer::Observer& observer_;
  Keep keep_;
  int64_t start_samples_ = 0;
  bool attached_ = false;
  std::shared_ptr<TraceResult> result_;
};

}  // namespace nansense::capture
