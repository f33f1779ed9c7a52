#include "capture/tracer.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string_view>

namespace nansense::capture {

namespace {

thread_local Tracer* t_active = nullptr;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (t_active) t_active->on_op_start(fn);
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (t_active) t_active->on_op_end(fn);
}

// The tracer's own failures stay out of the user's ops: the first one is kept
// for the session to report, and tracing stops.
template <class F>
void guarded(TraceResult& result, bool& stopped, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    if (result.error.empty()) result.error = std::string("tracing failed: ") + e.what();
    stopped = true;
  } catch (...) {
    if (result.error.empty()) result.error = "tracing failed";
    stopped = true;
  }
}

// "aten::relu_" -> "relu"
std::string short_op_name(std::string_view full) {
  auto pos = full.rfind("::");
  if (pos != std::string_view::npos) full.remove_prefix(pos + 2);
  while (full.size() > 1 && full.back() == '_') full.remove_suffix(1);
  while (full.size() > 1 && full.front() == '_') full.remove_prefix(1);
  return std::string(full);
}

// "torch::nn::Conv2dImpl" -> "Conv2d"
std::string module_kind(const torch::nn::Module& m) {
  std::string name = m.name();
  auto pos = name.rfind("::");
  if (pos != std::string::npos) name = name.substr(pos + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

// Loss functions end the model's forward: what follows is the loss, not the model.
bool is_loss_op(const std::string& op) {
  static const std::set<std::string> kLosses = {
      "nll_loss", "nll_loss_nd", "nll_loss2d", "cross_entropy_loss", "mse_loss", "l1_loss",
      "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss",
      "kl_div", "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss",
      "multilabel_margin_loss", "multi_margin_loss", "cosine_embedding_loss",
      "triplet_margin_loss", "ctc_loss", "poisson_nll_loss"};
  return kLosses.count(op) > 0;
}

// Ops that pass a tensor through unchanged in value: their output keeps the
// producer of their input instead of becoming a layer.
bool is_transparent_op(const std::string& op) {
  static const std::set<std::string> kTransparent = {"to", "to_copy", "contiguous", "detach",
                                                     "type_as", "lift_fresh", "alias"};
  return kTransparent.count(op) > 0;
}

torch::Tensor cpu_copy(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

// "Conv2d(1, 16, kernel_size=[3, 3], stride=[1, 1])": the module's printout
// without the namespace.
std::string describe(const torch::nn::Module& module) {
  std::ostringstream out;
  module.pretty_print(out);
  std::string text = out.str();
  for (const std::string prefix : {"torch::nn::"}) {
    for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
  }
  return text;
}

// "(·, [2, 2], [2, 2], [0, 0], [1, 1], False)": literal arguments, tensors as ·.
std::string describe_args(c10::ArrayRef<const c10::IValue> inputs) {
  std::ostringstream out;
  out << "(";
  bool first = true;
  for (const auto& v : inputs) {
    if (!first) out << ", ";
    first = false;
    if (v.isTensor() || v.isTensorList()) {
      out << "·";
    } else if (v.isNone()) {
      out << "None";
    } else if (v.isInt() || v.isDouble() || v.isBool() || v.isIntList() || v.isDoubleList() || v.isBoolList() ||
               v.isString()) {
      out << v;
    } else {
      out << "…";
    }
  }
  out << ")";
  return out.str();
}

}  // namespace

void collect_tensors(const c10::IValue& v, std::vector<torch::Tensor>& out) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) out.push_back(v.toTensor());
  } else if (v.isTensorList()) {
    for (const auto& t : v.toTensorList()) {
      const torch::Tensor& tensor = t;
      if (tensor.defined()) out.push_back(tensor);
    }
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) collect_tensors(e, out);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) collect_tensors(e, out);
  }
}

Tracer::Tracer(const torch::nn::Module& model) : result_(std::make_shared<TraceResult>()) {
  // Parameter identity is rebuilt for every capture: Module::to() and
  // set_data() keep TensorImpls, but a user may replace parameters between batches.
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string& path = item.key();
    const auto& module = *item.value();
    const std::string kind = module_kind(module);
    auto add = [&](const std::string& local, const torch::Tensor& t) {
      if (!t.defined()) return;
      std::string qualified = path.empty() ? local : path + "." + local;
      owners_.emplace(t.unsafeGetTensorImpl(), Owner{path, kind, std::move(qualified)});
    };
    for (const auto& p : module.named_parameters(/*recurse=*/false)) add(p.key(), p.value());
    for (const auto& b : module.named_buffers(/*recurse=*/false)) add(b.key(), b.value());
    if (!module.named_parameters(/*recurse=*/false).is_empty()) module_descriptions_[path] = describe(module);
  }
  t_active = this;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  installed_ = true;
}

Tracer::~Tracer() {
  if (installed_) {
    at::removeCallback(handle_);
    if (t_active == this) t_active = nullptr;
  }
}

std::shared_ptr<TraceResult> Tracer::finish() {
  if (installed_) {
    at::removeCallback(handle_);
    installed_ = false;
    if (t_active == this) t_active = nullptr;
  }
  auto arch = std::make_shared<Architecture>();
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& layer : layers_) {
    arch->layers.push_back(layer);
    if (layer.role == LayerInfo::Role::kInput) arch->inputs.push_back(layer.name);
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (int p : producers_[i]) {
      auto edge = std::make_pair(layers_[p].name, layers_[i].name);
      if (seen.insert(edge).second) arch->edges.push_back(edge);
    }
  }
  result_->architecture = std::move(arch);
  keep_alive_.clear();
  return result_;
}

std::optional<std::string> Tracer::layer_of(const c10::TensorImpl* impl) const {
  auto it = producer_.find(impl);
  if (it == producer_.end()) return std::nullopt;
  return layers_[static_cast<size_t>(it->second)].name;
}

void Tracer::set_inputs(const std::vector<torch::Tensor>& inputs, bool stacked) {
  at::DisableRecordFunctionGuard no_record;
  torch::NoGradGuard no_grad;
  auto add_input = [&](const std::string& name, const torch::Tensor& shown) {
    LayerInfo info;
    info.name = name;
    info.role = LayerInfo::Role::kInput;
    info.kind = "input";
    info.output_shape = shown.sizes().vec();
    info.dtype = std::string(c10::toString(shown.scalar_type()));
    int idx = add_layer(std::move(info));
    auto copy = cpu_copy(shown);
    result_->activations[layers_[idx].name] = copy;
    result_->inputs.push_back(copy);
    return idx;
  };
  if (stacked && !inputs.empty()) {
    bool same_shape = std::all_of(inputs.begin(), inputs.end(),
                                  [&](const auto& t) { return t.sizes() == inputs[0].sizes(); });
    int idx = add_input(fresh_name("input"), same_shape ? torch::stack(inputs) : inputs[0]);
    stacked_input_ = idx;
    for (const auto& t : inputs) {
      producer_[t.unsafeGetTensorImpl()] = idx;
      keep_alive_.push_back(t);
    }
    return;
  }
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    int idx = add_input(fresh_name("input"), t);
    producer_[t.unsafeGetTensorImpl()] = idx;
    keep_alive_.push_back(t);
  }
}

std::string Tracer::fresh_name(const std::string& base) {
  int n = name_counts_[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

int Tracer::add_layer(LayerInfo info) {
  layers_.push_back(std::move(info));
  producers_.emplace_back();
  std::lock_guard lock(result_->grad_mu);
  result_->layer_names.push_back(layers_.back().name);
  result_->final_op.push_back(-1);
  return static_cast<int>(layers_.size()) - 1;
}

void Tracer::end_forward() {
  forward_done_ = true;
  // Backward and the optimizer step then run without the observer's cost
  // (boxing every op's inputs); ops already in flight keep their own copy of
  // the callback list, so the depth count stays balanced.
  at::disableCallback(handle_);
}

void Tracer::on_op_start(const at::RecordFunction& fn) {
  ++depth_;
  if (depth_ != 1 || forward_done_) return;
  guarded(*result_, forward_done_, [&] { start_op(fn); });
}

void Tracer::start_op(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION ||
      std::string_view(fn.name()).rfind("autograd::", 0) == 0) {
    end_forward();  // backward started: the forward is over
    return;
  }
  pending_inputs_.clear();
  for (const auto& v : fn.inputs()) collect_tensors(v, pending_inputs_);
  pending_args_ = describe_args(fn.inputs());
}

void Tracer::on_op_end(const at::RecordFunction& fn) {
  --depth_;
  if (depth_ != 0 || forward_done_) return;
  guarded(*result_, forward_done_, [&] { end_op(fn); });
}

void Tracer::end_op(const at::RecordFunction& fn) {
  at::DisableRecordFunctionGuard no_record;
  std::vector<torch::Tensor> outputs;
  for (const auto& v : fn.outputs()) collect_tensors(v, outputs);
  std::vector<torch::Tensor> inputs = std::move(pending_inputs_);
  pending_inputs_.clear();
  record_op(short_op_name(fn.name()), inputs, outputs);
}

void Tracer::record_op(const std::string& op, const std::vector<torch::Tensor>& inputs,
                       const std::vector<torch::Tensor>& outputs) {
  const int64_t seq = op_seq_++;
  if (is_loss_op(op)) {
    end_forward();
    return;
  }
  const Owner* owner = nullptr;
  std::vector<std::string> params;
  std::vector<int> producers;
  for (const auto& t : inputs) {
    const auto* impl = t.unsafeGetTensorImpl();
    if (auto it = owners_.find(impl); it != owners_.end()) {
      if (!owner || (owner->module_path.empty() && !it->second.module_path.empty())) owner = &it->second;
      params.push_back(it->second.param_name);
    } else if (auto pit = producer_.find(impl); pit != producer_.end()) {
      producers.push_back(pit->second);
    }
  }
  if (producers.empty()) {
    if (!owner) return;  // not part of the model's data flow
    if (owner->module_path.empty()) {
      // Only the root module's parameters (a functional model's weight.t()):
      // a parameter transform that the consuming op will show, not a layer.
      const Owner derived = *owner;
      for (const auto& out : outputs) {
        owners_.emplace(out.unsafeGetTensorImpl(), derived);
        keep_alive_.push_back(out);
      }
      return;
    }
  }

  const torch::Tensor* activation = nullptr;
  for (const auto& out : outputs) {
    if (out.is_floating_point() || out.is_complex()) {
      activation = &out;
      break;
    }
  }
  if (!activation) return;  // indices, masks, shapes: not layers

  // The loop stacking a batch's examples builds the input layer itself.
  const bool stacks_examples = stacked_input_ >= 0 && (op == "stack" || op == "cat") &&
                               std::all_of(producers.begin(), producers.end(),
                                           [&](int p) { return p == stacked_input_; });
  if (!owner && (is_transparent_op(op) || stacks_examples)) {
    for (const auto& out : outputs) {
      producer_[out.unsafeGetTensorImpl()] = producers.front();
      keep_alive_.push_back(out);
    }
    return;
  }

  int layer = -1;
  if (owner && !owner->module_path.empty()) {
    // The same module call continues while its ops feed each other; a module
    // used again later (weight sharing, a reused block) is a new call: "fc_1".
    auto open = open_module_call_.find(owner->module_path);
    if (open != open_module_call_.end() &&
        (last_layer_ == open->second ||
         std::find(producers.begin(), producers.end(), open->second) != producers.end())) {
      layer = open->second;
    } else {
      LayerInfo info;
      info.name = fresh_name(owner->module_path);
      info.role = LayerInfo::Role::kModule;
      info.kind = owner->module_kind;
      info.module = owner->module_path;
      if (auto d = module_descriptions_.find(owner->module_path); d != module_descriptions_.end()) {
        info.description = d->second;
      }
      layer = add_layer(std::move(info));
      open_module_call_[owner->module_path] = layer;
    }
  } else {
    LayerInfo info;
    info.name = fresh_name(op);
    info.role = LayerInfo::Role::kOp;
    info.kind = op;
    info.description = op + pending_args_;
    layer = add_layer(std::move(info));
  }

  LayerInfo& info = layers_[layer];
  info.ops.push_back(op);
  for (auto& p : params) {
    if (std::find(info.parameters.begin(), info.parameters.end(), p) == info.parameters.end()) {
      info.parameters.push_back(std::move(p));
    }
  }
  for (int p : producers) {
    if (p != layer && std::find(producers_[layer].begin(), producers_[layer].end(), p) == producers_[layer].end()) {
      producers_[layer].push_back(p);
    }
  }
  for (const auto& out : outputs) {
    producer_[out.unsafeGetTensorImpl()] = layer;
    keep_alive_.push_back(out);
  }
  last_layer_ = layer;
  capture_activation(layer, *activation, seq);
}

void Tracer::capture_activation(int layer, const torch::Tensor& out, int64_t op_seq) {
  torch::NoGradGuard no_grad;
  LayerInfo& info = layers_[layer];
  info.output_shape = out.sizes().vec();
  info.dtype = std::string(c10::toString(out.scalar_type()));
  // Copied now: a later in-place op may overwrite the live tensor.
  result_->activations[info.name] = cpu_copy(out);
  {
    std::lock_guard lock(result_->grad_mu);
    result_->final_op[layer] = op_seq;
  }
  if (out.requires_grad()) {
    std::weak_ptr<TraceResult> weak = result_;
    // The hook stays on the autograd graph; it records only while this op is
    // still the layer's final op, and never keeps the result alive.
    const_cast<torch::Tensor&>(out).register_hook([weak, layer, op_seq](torch::Tensor grad) {
      auto result = weak.lock();
      if (!result || !grad.defined()) return;
      at::DisableRecordFunctionGuard no_record;
      std::lock_guard lock(result->grad_mu);
      if (result->final_op[layer] != op_seq) return;
      try {
        result->gradients[result->layer_names[layer]] = cpu_copy(grad);
      } catch (const std::exception& e) {
        // Never into the user's backward(): the snapshot goes without it.
        if (result->error.empty()) result->error = std::string("gradient capture failed: ") + e.what();
      }
    });
  }
}

}  // namespace nansense::capture
