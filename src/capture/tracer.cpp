#include "capture/tracer.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string_view>

#include "common/dtype.h"
#include "common/own_ops.h"

namespace nansense::capture {

std::optional<double> TraceResult::copied_abs_sum(const torch::Tensor& t) const {
  // The entry's weak reference keeps its TensorImpl's address from being
  // reused: a live tensor found here is that copy.
  auto it = copied_abs_sums.find(t.unsafeGetTensorImpl());
  if (it == copied_abs_sums.end() || t._version() != it->second.version) return std::nullopt;
  return it->second.abs_sum;
}

namespace {

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
  static const std::set<std::string> kLosses = {"nll_loss",
                                                "nll_loss_nd",
                                                "nll_loss2d",
                                                "cross_entropy_loss",
                                                "mse_loss",
                                                "l1_loss",
                                                "binary_cross_entropy",
                                                "binary_cross_entropy_with_logits",
                                                "smooth_l1_loss",
                                                "huber_loss",
                                                "kl_div",
                                                "margin_ranking_loss",
                                                "hinge_embedding_loss",
                                                "soft_margin_loss",
                                                "multilabel_margin_loss",
                                                "multi_margin_loss",
                                                "cosine_embedding_loss",
                                                "triplet_margin_loss",
                                                "ctc_loss",
                                                "poisson_nll_loss"};
  return kLosses.count(op) > 0;
}

// Ops that pass a tensor through unchanged in value: their output keeps the
// producer of their input instead of becoming a layer.
bool is_transparent_op(const std::string& op) {
  static const std::set<std::string> kTransparent = {"to",      "to_copy",    "contiguous", "detach",
                                                     "type_as", "lift_fresh", "alias"};
  return kTransparent.count(op) > 0;
}

// Ops that read only their input's shape, dtype and device (a loss's target
// of ones): no data flows through them.
bool is_factory_op(const std::string& op) {
  static const std::set<std::string> kFactory = {"ones_like", "zeros_like", "empty_like",   "full_like",
                                                 "rand_like", "randn_like", "randint_like", "new_ones",
                                                 "new_zeros", "new_empty",  "new_full",     "new_empty_strided"};
  return kFactory.count(op) > 0;
}

// Ops that only rearrange their input's values (views, reshapes, splits):
// layers flagged shape_op, which the UI folds into the edges.
bool is_shape_op(const std::string& op) {
  static const std::set<std::string> kShape = {
      "view",    "reshape", "reshape_alias", "unsafe_view", "permute",  "transpose", "t",
      "numpy_T", "select",  "slice",         "narrow",      "flatten",  "unflatten", "unsqueeze",
      "squeeze", "expand",  "expand_as",     "view_as",     "chunk",    "split",     "split_with_sizes",
      "unbind",  "movedim", "moveaxis",      "swapaxes",    "swapdims", "as_strided"};
  return kShape.count(op) > 0;
}

// The ops a parameterless registered module runs, by module kind: how an op
// finds the module that ran it (torch::nn's functional forms of each).
bool module_runs(const std::string& kind, const std::string& op) {
  static const std::map<std::string, std::set<std::string>> kRuns = {
      {"ReLU", {"relu"}},
      {"ReLU6", {"hardtanh", "relu6"}},
      {"LeakyReLU", {"leaky_relu"}},
      {"ELU", {"elu"}},
      {"SELU", {"selu"}},
      {"CELU", {"celu"}},
      {"GELU", {"gelu"}},
      {"SiLU", {"silu"}},
      {"Mish", {"mish"}},
      {"Sigmoid", {"sigmoid"}},
      {"Tanh", {"tanh"}},
      {"Hardtanh", {"hardtanh"}},
      {"Hardswish", {"hardswish"}},
      {"Hardsigmoid", {"hardsigmoid"}},
      {"Softplus", {"softplus"}},
      {"Threshold", {"threshold"}},
      {"Softmax", {"softmax"}},
      {"LogSoftmax", {"log_softmax"}},
      {"Dropout", {"dropout"}},
      {"Dropout2d", {"feature_dropout"}},
      {"Dropout3d", {"feature_dropout"}},
      {"AlphaDropout", {"alpha_dropout"}},
      {"FeatureAlphaDropout", {"feature_alpha_dropout"}},
      {"MaxPool1d", {"max_pool1d", "max_pool1d_with_indices"}},
      {"MaxPool2d", {"max_pool2d", "max_pool2d_with_indices"}},
      {"MaxPool3d", {"max_pool3d", "max_pool3d_with_indices"}},
      {"AvgPool1d", {"avg_pool1d"}},
      {"AvgPool2d", {"avg_pool2d"}},
      {"AvgPool3d", {"avg_pool3d"}},
      {"AdaptiveAvgPool1d", {"adaptive_avg_pool1d"}},
      {"AdaptiveAvgPool2d", {"adaptive_avg_pool2d"}},
      {"AdaptiveAvgPool3d", {"adaptive_avg_pool3d"}},
      {"AdaptiveMaxPool1d", {"adaptive_max_pool1d"}},
      {"AdaptiveMaxPool2d", {"adaptive_max_pool2d"}},
      {"AdaptiveMaxPool3d", {"adaptive_max_pool3d"}},
      {"Flatten", {"flatten"}},
      {"Unflatten", {"unflatten", "view"}},
      {"PixelShuffle", {"pixel_shuffle"}},
      {"PixelUnshuffle", {"pixel_unshuffle"}},
      {"Upsample",
       {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d", "upsample_bilinear2d",
        "upsample_bicubic2d", "upsample_trilinear3d"}},
      {"ZeroPad2d", {"constant_pad_nd", "pad"}},
      {"ConstantPad1d", {"constant_pad_nd", "pad"}},
      {"ConstantPad2d", {"constant_pad_nd", "pad"}},
      {"ConstantPad3d", {"constant_pad_nd", "pad"}},
      {"ReflectionPad1d", {"reflection_pad1d", "pad"}},
      {"ReflectionPad2d", {"reflection_pad2d", "pad"}},
      {"ReplicationPad1d", {"replication_pad1d", "pad"}},
      {"ReplicationPad2d", {"replication_pad2d", "pad"}},
      {"ReplicationPad3d", {"replication_pad3d", "pad"}}};
  auto it = kRuns.find(kind);
  return it != kRuns.end() && it->second.count(op) > 0;
}

// "layers.0.linear1", "layers.0.linear2" -> "layers.0"
std::string common_scope(const std::string& a, const std::string& b) {
  size_t end = 0;
  for (size_t i = 0; i <= a.size() && i <= b.size(); ++i) {
    const bool a_end = i == a.size() || a[i] == '.';
    const bool b_end = i == b.size() || b[i] == '.';
    if (a_end && b_end) {
      end = i;
      if (i == a.size() || i == b.size()) break;
      continue;
    }
    if (i == a.size() || i == b.size() || a[i] != b[i]) break;
  }
  return a.substr(0, end);
}

// "layers.0.linear1" -> "layers.0"
std::string parent_scope(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
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

std::shared_ptr<const ModelIndex> ModelIndex::of(const torch::nn::Module& model,
                                                 std::shared_ptr<const ModelIndex> cached) {
  // Parameter identity is checked for every batch: Module::to() and
  // set_data() keep TensorImpls, but a user may replace parameters or
  // modules between batches.
  std::vector<const void*> identity;
  auto modules = model.modules(/*include_self=*/true);
  for (const auto& m : modules) identity.push_back(m.get());
  for (const auto& p : model.parameters()) identity.push_back(p.unsafeGetTensorImpl());
  for (const auto& b : model.buffers()) identity.push_back(b.defined() ? b.unsafeGetTensorImpl() : nullptr);
  if (cached && cached->identity == identity) return cached;
  auto index = std::make_shared<ModelIndex>();
  index->identity = std::move(identity);
  index->held = std::move(modules);
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string& path = item.key();
    const auto& module = *item.value();
    const std::string kind = module_kind(module);
    auto add = [&](const std::string& local, const torch::Tensor& t) {
      if (!t.defined()) return;
      std::string qualified = path.empty() ? local : path + "." + local;
      auto [first, added] = index->owners.emplace(t.unsafeGetTensorImpl(), Owner{path, kind, qualified});
      if (!added) index->aliases.emplace(t.unsafeGetTensorImpl(), Owner{path, kind, first->second.param_name});
    };
    for (const auto& p : module.named_parameters(/*recurse=*/false)) add(p.key(), p.value());
    for (const auto& b : module.named_buffers(/*recurse=*/false)) add(b.key(), b.value());
    index->module_index[path] = index->modules.size();
    index->modules.push_back({path, kind, module.parameters().empty() && module.buffers().empty(),
                              path.empty() ? std::string() : describe(module)});
  }
  for (const auto& p : model.named_parameters()) {
    index->parameters.push_back(p.value());
    index->parameter_impls.insert(p.value().unsafeGetTensorImpl());
    index->parameter_order.emplace(p.key(), index->parameter_order.size());
  }
  return index;
}

Tracer::Tracer(const torch::nn::Module& model, observer::Observer& observer, Keep keep, int64_t budget_bytes,
               int64_t start_samples, std::shared_ptr<const ModelIndex> index)
    : index_(index ? std::move(index) : ModelIndex::of(model)),
      observer_(observer),
      keep_(keep),
      start_samples_(start_samples),
      result_(std::make_shared<TraceResult>()) {
  result_->budget.bytes = budget_bytes;
  observer_.attach(this);
  attached_ = true;
}

const Tracer::Owner* Tracer::owner_of(const c10::TensorImpl* impl) const {
  if (auto it = index_->owners.find(impl); it != index_->owners.end()) {
    // A tied tensor read inside another module that registers it: that
    // module's call (Python tells the module running each op).
    if (scoped_ && !index_->aliases.empty() && it->second.module_path != module_scope_) {
      for (auto [a, end] = index_->aliases.equal_range(impl); a != end; ++a) {
        if (a->second.module_path == module_scope_) return &a->second;
      }
    }
    return &it->second;
  }
  if (auto it = derived_owners_.find(impl); it != derived_owners_.end()) return &it->second;
  return nullptr;
}

Tracer::~Tracer() {
  if (attached_) observer_.detach(this);
}

std::vector<Tracer::FinalName> Tracer::final_names() const {
  const auto& modules = index_->modules;
  const size_t n = layers_.size();
  std::vector<std::vector<int>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (int p : producers_[i]) consumers[static_cast<size_t>(p)].push_back(static_cast<int>(i));
  }
  std::vector<FinalName> out(n);
  // Consumers come after their producers: one pass from the end settles
  // which parameterless ops after a loss the model used again.
  for (size_t i = n; i-- > 0;) {
    bool keep = layers_[i].role != LayerInfo::Role::kOp || !traces_[i].after_loss || traces_[i].feeds_loss;
    for (int c : consumers[i]) keep = keep || out[static_cast<size_t>(c)].kept;
    out[i].kept = keep;
  }
  std::vector<int> module_layers;
  for (size_t i = 0; i < n; ++i) {
    if (out[i].kept && layers_[i].role == LayerInfo::Role::kModule) module_layers.push_back(static_cast<int>(i));
  }
  std::map<std::string, int> op_counts, call_counts;
  // An op's fx-style name: never a registered module's path (a ReLU module
  // "relu" and an unscoped relu op would both read "relu").
  auto op_name = [&](const std::string& base) {
    for (;;) {
      const int k = op_counts[base]++;
      std::string name = k == 0 ? base : base + "_" + std::to_string(k);
      if (!index_->module_index.count(name)) return name;
    }
  };
  // The one parameterless registered module under `scope` that runs `op`;
  // -1 for none, -2 for several.
  auto only_module_under = [&](const std::string& scope, const std::string& op) {
    int match = -1;
    for (size_t m = 0; m < modules.size(); ++m) {
      if (!modules[m].parameterless || !module_runs(modules[m].kind, op) ||
          modules[m].path.rfind(scope + ".", 0) != 0) {
        continue;
      }
      match = match == -1 ? static_cast<int>(m) : -2;
    }
    return match;
  };
  std::vector<std::string> scopes(n);  // per op layer, the scope it was named in
  // Whether an op's result reaches a module call or a loss: what does not is
  // a side result (a MultiheadAttention's averaged attention weights).
  std::vector<bool> live(n, false);
  for (size_t i = n; i-- > 0;) {
    bool l = traces_[i].feeds_loss;
    for (int c : consumers[i]) {
      const auto ci = static_cast<size_t>(c);
      l = l || (out[ci].kept && (layers_[ci].role != LayerInfo::Role::kOp || live[ci]));
    }
    live[i] = l;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!out[i].kept) continue;
    const LayerInfo& layer = layers_[i];
    if (layer.role != LayerInfo::Role::kOp) {
      out[i].name = layer.name;
      continue;
    }
    if (const auto& reported = traces_[i].scope) {
      // The module call it ran in is known: that module ran it when it is a
      // parameterless one that runs such an op (an in-place form too).
      scopes[i] = *reported;
      auto m = index_->module_index.find(*reported);
      const std::string& op = layer.kind;
      if (m != index_->module_index.end() && modules[m->second].parameterless &&
          (module_runs(modules[m->second].kind, op) ||
           (!op.empty() && op.back() == '_' && module_runs(modules[m->second].kind, op.substr(0, op.size() - 1))))) {
        const int call = ++call_counts[*reported];
        out[i].name = call == 1 ? *reported : *reported + "#" + std::to_string(call);
        out[i].module = static_cast<int>(m->second);
        continue;
      }
      out[i].name = op_name(reported->empty() ? op : *reported + "." + op);
      continue;
    }
    // The module calls around the op: its scope is what they share, and a
    // registered parameterless module between them may be what ran it.
    auto next = std::upper_bound(module_layers.begin(), module_layers.end(), static_cast<int>(i));
    const LayerInfo* after = next != module_layers.end() ? &layers_[static_cast<size_t>(*next)] : nullptr;
    const LayerInfo* before = next != module_layers.begin() ? &layers_[static_cast<size_t>(*std::prev(next))] : nullptr;
    // Between two calls of one module (weight sharing) is outside it.
    std::string scope;
    if (before && after) {
      scope =
          before->module == after->module ? parent_scope(before->module) : common_scope(before->module, after->module);
    }
    // A side result made from ops deeper in a module call, after its last
    // submodule call: it belongs to that call.
    if (!live[i] && !producers_[i].empty()) {
      std::optional<std::string> deeper;
      for (int p : producers_[i]) {
        const auto& ps = scopes[static_cast<size_t>(p)];
        const bool inside = layers_[static_cast<size_t>(p)].role == LayerInfo::Role::kOp && !ps.empty() &&
                            (scope.empty() || ps.rfind(scope + ".", 0) == 0);
        if (!inside || (deeper && *deeper != ps)) {
          deeper.reset();
          break;
        }
        deeper = ps;
      }
      if (deeper) scope = *deeper;
    }
    const size_t lo = before ? index_->module_index.at(before->module) : 0;
    size_t hi = after ? index_->module_index.at(after->module) : modules.size();
    if (hi <= lo) hi = modules.size();
    // The one parameterless module registered between the calls around the
    // op that runs it (-1 none, -2 several).
    auto declared_between = [&](const std::string& op) {
      int found = -1;
      for (size_t m = before ? lo + 1 : lo; m < hi; ++m) {
        if (!modules[m].parameterless || !module_runs(modules[m].kind, op)) continue;
        found = found == -1 ? static_cast<int>(m) : -2;
      }
      return found;
    };
    int match = declared_between(layer.kind);
    if (match == -1 && live[i] && before) {
      // The tail of the call before it: a block's own ReLU module called a
      // second time after its last parametered submodule (torchvision's
      // BasicBlock: conv2, bn2, then `out + identity` and self.relu again)
      // sits between that block's last call and the next sibling's first.
      // The deepest enclosing call of `before` holding the one such module
      // for this op or a later op of the same gap takes the ops up to it.
      const size_t gap_end = next != module_layers.end() ? static_cast<size_t>(*next) : n;
      for (std::string s = parent_scope(before->module); s.size() > scope.size(); s = parent_scope(s)) {
        bool found = false;
        for (size_t k = i; k < gap_end && !found; ++k) {
          if (!out[k].kept || layers_[k].role != LayerInfo::Role::kOp || traces_[k].scope || !live[k]) continue;
          found = declared_between(layers_[k].kind) == -1 && only_module_under(s, layers_[k].kind) >= 0;
        }
        if (found) {
          scope = s;
          break;
        }
      }
    }
    scopes[i] = scope;
    if (match == -1 && !scope.empty()) {
      // Not between the calls around it in declaration order (a block's
      // Dropout registered last): the one such module of the scope, if any.
      match = only_module_under(scope, layer.kind);
    }
    if (match >= 0) {
      const std::string& path = modules[static_cast<size_t>(match)].path;
      const int call = ++call_counts[path];
      out[i].name = call == 1 ? path : path + "#" + std::to_string(call);
      out[i].module = match;
      continue;
    }
    out[i].name = op_name(scope.empty() ? layer.kind : scope + "." + layer.kind);
  }
  return out;
}

bool Tracer::wanted_on_device(int layer, std::string* judged_name) const {
  const LayerInfo& info = layers_[static_cast<size_t>(layer)];
  if (judged_name) *judged_name = info.name;
  if (!keep_.device_layer) return true;
  // A module's layer keeps its name; a parameterless op may take a module's.
  if (info.role != LayerInfo::Role::kOp) return keep_.device_layer(info);
  const auto names = final_names();
  const auto& fate = names[static_cast<size_t>(layer)];
  if (!fate.kept || fate.name == info.name) return keep_.device_layer(info);
  LayerInfo renamed = info;
  renamed.name = fate.name;
  if (judged_name) *judged_name = fate.name;
  return keep_.device_layer(renamed);
}

void Tracer::offer_pending() {
  Pending p = std::exchange(pending_, Pending{});
  if (p.layer < 0 || !keep_.take) return;
  if (!keep_.take(p.layer, p.op_seq, p.name, /*gradient=*/false, p.tensor)) return;
  // Taken: the reference goes now, as the loop's own would.
  auto it = result_->device_activations.find(layers_[static_cast<size_t>(p.layer)].name);
  if (it != result_->device_activations.end() && it->second.is_same(p.tensor)) result_->device_activations.erase(it);
}

std::string Tracer::final_name(const std::string& provisional) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].name != provisional) continue;
    auto names = final_names();
    return names[i].kept ? names[i].name : provisional;
  }
  return provisional;
}

std::shared_ptr<TraceResult> Tracer::finish() {
  if (std::exchange(attached_, false)) observer_.detach(this);
  if (!stopped_) guarded(*result_, stopped_, [&] { offer_pending(); });
  pending_ = {};
  const auto names = final_names();
  auto arch = std::make_shared<Architecture>();
  std::vector<std::string> final(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!names[i].kept) continue;
    LayerInfo layer = layers_[i];
    layer.name = names[i].name;
    // In the module's declaration order (weight, bias), whatever order its ops read them.
    std::stable_sort(layer.parameters.begin(), layer.parameters.end(), [&](const auto& a, const auto& b) {
      const auto& order = index_->parameter_order;
      auto ia = order.find(a), ib = order.find(b);
      return (ia == order.end() ? SIZE_MAX : ia->second) < (ib == order.end() ? SIZE_MAX : ib->second);
    });
    if (names[i].module >= 0) {
      const ModuleEntry& m = index_->modules[static_cast<size_t>(names[i].module)];
      layer.role = LayerInfo::Role::kModule;
      layer.module = m.path;
      layer.kind = m.kind;
      layer.description = m.description;
    }
    final[i] = layer.name;
    if (layer.role == LayerInfo::Role::kInput) arch->inputs.push_back(layer.name);
    arch->layers.push_back(std::move(layer));
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!names[i].kept) continue;
    for (int p : producers_[i]) {
      if (!names[static_cast<size_t>(p)].kept) continue;
      auto edge = std::make_pair(final[static_cast<size_t>(p)], final[i]);
      if (seen.insert(edge).second) arch->edges.push_back(edge);
    }
  }
  // The captured tensors move to the final names; a gradient that arrives
  // later finds its layer's final name (dropped layers record nothing).
  auto rename = [&](auto& tensors) {
    std::remove_reference_t<decltype(tensors)> renamed;
    for (size_t i = 0; i < layers_.size(); ++i) {
      auto it = tensors.find(layers_[i].name);
      if (names[i].kept && it != tensors.end()) renamed[final[i]] = std::move(it->second);
    }
    tensors = std::move(renamed);
  };
  rename(result_->device_activations);
  {
    std::lock_guard lock(result_->grad_mu);
    // Dropped layers' copies go, and with them their place in the budget.
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (names[i].kept) continue;
      for (const auto* held : {&result_->activations, &result_->gradients}) {
        if (auto it = held->find(layers_[i].name); it != held->end()) {
          result_->budget.batch_copies.erase(it->second.unsafeGetTensorImpl());
        }
      }
    }
    rename(result_->activations);
    rename(result_->activation_stats);
    rename(result_->gradients);
    rename(result_->gradient_stats);
    rename(result_->device_gradients);
    result_->budget.held_total = held_bytes(*result_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      result_->layer_names[i] = final[i];
      if (!names[i].kept) result_->final_op[i] = -2;
    }
  }
  result_->architecture = std::move(arch);
  keep_alive_.clear();
  return result_;
}

void Tracer::share_budget(double share, int64_t base_bytes) {
  std::lock_guard lock(result_->grad_mu);
  result_->budget.share = share;
  result_->budget.base = std::max<int64_t>(base_bytes, 0);
}

void Tracer::pin(const torch::Tensor& t) {
  if (t.defined()) keep_alive_.emplace_back(t.getIntrusivePtr());
}

std::optional<std::string> Tracer::layer_of(const c10::TensorImpl* impl) const {
  auto it = producer_.find(impl);
  if (it == producer_.end()) return std::nullopt;
  return layers_[static_cast<size_t>(it->second)].name;
}

void Tracer::set_inputs(const std::vector<torch::Tensor>& inputs, bool stacked) {
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  auto add_input = [&](const std::string& name, const torch::Tensor& shown) {
    LayerInfo info;
    info.name = name;
    info.role = LayerInfo::Role::kInput;
    info.kind = "input";
    info.output_shape = shown.sizes().vec();
    info.dtype = common::dtype_name(shown.scalar_type());
    int idx = add_layer(std::move(info));
    if (keep_.device) result_->device_activations[layers_[idx].name] = shown.detach();
    if (keep_.cpu) {
      std::lock_guard lock(result_->grad_mu);
      const auto& name = layers_[idx].name;
      hold(*result_, result_->activations, result_->activation_stats, name, shown);
      result_->inputs.push_back(result_->activations[name]);
    }
    return idx;
  };
  // The batch's size, for the snapshot budget: the examples stacked, else the
  // first tensor input's leading dimension.
  {
    std::lock_guard lock(result_->grad_mu);
    SampleBudget& budget = result_->budget;
    if (budget.batch_size == 0) {
      if (stacked) {
        budget.batch_size = static_cast<int64_t>(inputs.size());
      } else {
        for (const auto& t : inputs) {
          if (t.defined() && t.dim() > 0) {
            budget.batch_size = t.size(0);
            break;
          }
        }
      }
      budget.kept = start_samples_ > 0 ? std::min(start_samples_, budget.batch_size) : budget.batch_size;
    }
  }
  if (stacked && !inputs.empty()) {
    bool same_shape =
        std::all_of(inputs.begin(), inputs.end(), [&](const auto& t) { return t.sizes() == inputs[0].sizes(); });
    int idx = add_input(fresh_name("input"), same_shape ? torch::stack(inputs) : inputs[0]);
    stacked_input_ = idx;
    for (const auto& t : inputs) {
      producer_[t.unsafeGetTensorImpl()] = idx;
      pin(t);
    }
    return;
  }
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    int idx = add_input(fresh_name("input"), t);
    producer_[t.unsafeGetTensorImpl()] = idx;
    pin(t);
  }
}

std::string Tracer::fresh_name(const std::string& base) {
  int n = name_counts_[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

std::string Tracer::fresh_call_name(const std::string& module_path) {
  int n = ++module_calls_[module_path];
  return n == 1 ? module_path : module_path + "#" + std::to_string(n);
}

int Tracer::add_layer(LayerInfo info) {
  layers_.push_back(std::move(info));
  producers_.emplace_back();
  traces_.push_back(LayerTrace{seen_loss_, false, scoped_ ? std::optional(module_scope_) : std::nullopt});
  std::lock_guard lock(result_->grad_mu);
  result_->layer_names.push_back(layers_.back().name);
  result_->final_op.push_back(-1);
  return static_cast<int>(layers_.size()) - 1;
}

void Tracer::op_started(const at::RecordFunction& fn, const observer::Frame& frame) {
  if (stopped_) return;
  guarded(*result_, stopped_, [&] {
    // Only an op fed by a layer can become an op layer (the one use of its
    // arguments' text): the optimizer's many ops skip the formatting, and so
    // does a batch only collected (no snapshot shows its descriptions).
    pending_args_.clear();
    if (keep_.cpu && std::any_of(frame.inputs.begin(), frame.inputs.end(), [&](const torch::Tensor& t) {
          return producer_.count(t.unsafeGetTensorImpl()) > 0;
        })) {
      pending_args_ = describe_args(fn.inputs());
    }
    if (pending_.layer < 0) return;
    // An op reading the pending module's parameters may extend its call
    // (linear's bias add after its matmul): the output is offered later.
    const LayerInfo& held = layers_[static_cast<size_t>(pending_.layer)];
    if (held.role == LayerInfo::Role::kModule) {
      for (const auto& t : frame.inputs) {
        const Owner* owner = owner_of(t.unsafeGetTensorImpl());
        if (owner && owner->module_path == held.module) return;
      }
    }
    offer_pending();  // its ops are not observed: the observer skips its consumers' own ops
  });
}

void Tracer::op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                      const std::vector<observer::Frame>& stack) {
  (void)stack;
  if (stopped_) return;
  // The observer skips the ops record_op runs itself (detach, hooks).
  guarded(*result_, stopped_, [&] { record_op(frame.op, frame.inputs, outputs); });
}

bool Tracer::touches_optimizer_state(const std::vector<torch::Tensor>& inputs,
                                     const std::vector<torch::Tensor>& outputs) {
  if (gradients_stale_) {
    gradient_impls_.clear();
    for (const auto& p : index_->parameters) {
      if (!p.grad().defined()) continue;
      gradient_impls_.insert(p.grad().unsafeGetTensorImpl());
      // zero_grad() sets gradients to None (LibTorch 2.x): pinned, a freed
      // gradient's address cannot pass to a forward tensor taken for it.
      pin(p.grad());
    }
    gradients_stale_ = false;
  }
  for (const auto& t : inputs) {
    if (gradient_impls_.count(t.unsafeGetTensorImpl())) return true;
  }
  for (const auto& t : outputs) {
    if (index_->parameter_impls.count(t.unsafeGetTensorImpl())) return true;
  }
  return false;
}

void Tracer::record_op(const std::string& op, const std::vector<torch::Tensor>& inputs,
                       const std::vector<torch::Tensor>& outputs) {
  const int64_t seq = op_seq_++;
  // Zeroing gradients, clipping them, the optimizer's update: not the model.
  if (touches_optimizer_state(inputs, outputs) || is_factory_op(op)) return;
  if (is_loss_op(op)) {
    seen_loss_ = true;
    for (const auto& t : inputs) {
      if (auto it = producer_.find(t.unsafeGetTensorImpl()); it != producer_.end()) {
        traces_[static_cast<size_t>(it->second)].feeds_loss = true;
      }
    }
    return;
  }
  const Owner* owner = nullptr;
  std::vector<std::string> params;
  std::vector<int> producers;
  bool only_parameters = !inputs.empty();
  for (const auto& t : inputs) {
    const auto* impl = t.unsafeGetTensorImpl();
    if (const Owner* found = owner_of(impl)) {
      if (!owner || (owner->module_path.empty() && !found->module_path.empty())) owner = found;
      params.push_back(found->param_name);
    } else {
      only_parameters = false;
      if (auto pit = producer_.find(impl); pit != producer_.end()) producers.push_back(pit->second);
    }
  }
  if (producers.empty()) {
    if (!owner) return;  // not part of the model's data flow
    if (only_parameters || owner->module_path.empty()) {
      // A parameter transform (weight.t() before linear's matmul; a
      // functional model's root parameters): the op that uses its result
      // shows it, under the parameter's name.
      const Owner derived = *owner;
      for (const auto& out : outputs) {
        derived_owners_.emplace(out.unsafeGetTensorImpl(), derived);
        pin(out);
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
  const bool stacks_examples =
      stacked_input_ >= 0 && (op == "stack" || op == "cat") &&
      std::all_of(producers.begin(), producers.end(), [&](int p) { return p == stacked_input_; });
  if (!owner && (is_transparent_op(op) || stacks_examples)) {
    for (const auto& out : outputs) {
      producer_[out.unsafeGetTensorImpl()] = producers.front();
      pin(out);
    }
    return;
  }

  int layer = -1;
  if (owner && !owner->module_path.empty()) {
    // The same module call continues while its ops feed each other (linear's
    // matmul, then its bias add); a module used again later (weight sharing,
    // a GAN's discriminator on real then fake data) is a new call, and so is
    // an op that reads a parameter this call already read.
    auto open = open_module_call_.find(owner->module_path);
    bool continues =
        open != open_module_call_.end() &&
        (last_layer_ == open->second || std::find(producers.begin(), producers.end(), open->second) != producers.end());
    if (continues) {
      const auto& used = layers_[static_cast<size_t>(open->second)].parameters;
      for (const auto& p : params) continues = continues && std::find(used.begin(), used.end(), p) == used.end();
    }
    if (continues) {
      layer = open->second;
    } else {
      LayerInfo info;
      info.name = fresh_call_name(owner->module_path);
      info.role = LayerInfo::Role::kModule;
      info.kind = owner->module_kind;
      info.module = owner->module_path;
      if (auto m = index_->module_index.find(owner->module_path); m != index_->module_index.end()) {
        info.description = index_->modules[m->second].description;
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
    info.shape_op = is_shape_op(op);
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
    pin(out);
  }
  last_layer_ = layer;
  capture_activation(layer, *activation, seq);
}

void Tracer::capture_activation(int layer, const torch::Tensor& out, int64_t op_seq) {
  torch::NoGradGuard no_grad;
  LayerInfo& info = layers_[layer];
  info.output_shape = out.sizes().vec();
  info.dtype = common::dtype_name(out.scalar_type());
  // Copied now: a later in-place op may overwrite the live tensor (the
  // device reference for statistics then sees the overwritten values).
  std::string judged;
  const bool device = keep_.device && wanted_on_device(layer, &judged);
  if (device) {
    result_->device_activations[info.name] = out.detach();
    if (keep_.take) {
      // Another layer's output waiting (a module call that was not extended
      // after all): offered now.
      if (pending_.layer >= 0 && pending_.layer != layer) offer_pending();
      pending_ = {layer, op_seq, std::move(judged), result_->device_activations[info.name]};
    }
  } else {
    result_->device_activations.erase(info.name);  // an earlier op's output of this layer
  }
  {
    std::lock_guard lock(result_->grad_mu);
    if (keep_.cpu) {
      hold(*result_, result_->activations, result_->activation_stats, info.name, out,
           /*gradient_follows=*/out.requires_grad());
    }
    result_->final_op[layer] = op_seq;
  }
  if (out.requires_grad() && (keep_.cpu || device)) {
    std::weak_ptr<TraceResult> weak = result_;
    // The hook stays on the autograd graph; it records only while this op is
    // still the layer's final op, and never keeps the result alive.
    const Keep keep{.cpu = keep_.cpu, .device = device, .device_layer = nullptr, .take = device ? keep_.take : nullptr};
    const_cast<torch::Tensor&>(out).register_hook([weak, layer, op_seq, keep](torch::Tensor grad) {
      auto result = weak.lock();
      if (!result || !grad.defined()) return;
      common::OwnOps own_ops(common::OwnOps::kFew);
      std::lock_guard lock(result->grad_mu);
      if (result->final_op[layer] != op_seq) return;
      try {
        const auto& name = result->layer_names[layer];
        if (keep.cpu) hold(*result, result->gradients, result->gradient_stats, name, grad);
        if (keep.device && !(keep.take && keep.take(layer, op_seq, name, /*gradient=*/true, grad))) {
          result->device_gradients[name] = grad;
        }
      } catch (const std::exception& e) {
        // Never into the user's backward(): the snapshot goes without it.
        if (result->error.empty()) result->error = std::string("gradient capture failed: ") + e.what();
      }
    });
  }
}

}  // namespace nansense::capture
