#include "numerics/op_tracer.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <string_view>

#include "common/dtype.h"
#include "common/own_ops.h"
#include "common/tensor_stats.h"
#include "numerics/bands.h"

namespace nansense::numerics {

namespace {

// "aten::relu_" -> "relu": how allow-list entries and op names compare.
std::string base_name(std::string_view full) { return observer::op_name(full); }

// Ops whose outputs are views or copies of their input's values: they can
// never make a non-finite value, so they are not checked (it saves a pass over
// every weight each forward); ownership and taint pass through them.
bool value_preserving(const std::string& op) {
  static const std::set<std::string> kOps = {
      "t",           "transpose",     "permute",    "view",         "reshape",     "reshape_alias",
      "unsafe_view", "as_strided",    "expand",     "expand_as",    "squeeze",     "unsqueeze",
      "slice",       "select",        "narrow",     "unfold",       "detach",      "alias",
      "lift_fresh",  "flatten",       "contiguous", "clone",        "split",       "chunk",
      "unbind",      "view_as",       "numpy_T",    "resolve_conj", "resolve_neg", "empty",
      "empty_like",  "empty_strided", "zeros",      "zeros_like",   "ones",        "ones_like"};
  return kOps.count(op) > 0;
}

// Ops that write a value they are given: an infinite value given to them is
// intended (an attention mask's -inf), not a numerical accident.
bool fills(const std::string& op) {
  static const std::set<std::string> kOps = {
      "masked_fill", "where", "full",      "full_like", "new_full",       "scalar_tensor",   "tensor", "fill",
      "index_fill",  "clamp", "clamp_min", "clamp_max", "masked_scatter", "constant_pad_nd", "pad"};
  return kOps.count(op) > 0;
}

// An argument is ±inf: a scalar, or a one-value tensor (masked_fill's value).
bool infinite_literal(const observer::Frame& frame) {
  for (double v : frame.scalars) {
    if (std::isinf(v)) return true;
  }
  for (const auto& t : frame.inputs) {
    if (t.numel() == 1 && t.is_floating_point() && std::isinf(t.item<double>())) return true;
  }
  return false;
}

bool checkable(const torch::Tensor& t) { return t.defined() && t.is_floating_point() && t.numel() > 0; }

// Every op of a traced batch, forward and backward, comes through here. A CPU
// tensor of a float dtype laid out densely is read in place (its exponent
// bits: no op, no allocation); any other takes one pass (a sum), and an
// exact test only when the sum is not finite, which a finite tensor of huge
// values can also give.
bool finite(const torch::Tensor& t) {
  if (!checkable(t)) return true;
  try {
    if (const auto in_place = all_finite_in_place(t)) return *in_place;
  } catch (const std::exception&) {
    // A tensor whose memory cannot be read directly (a wrapper subclass on
    // the CPU): the tensor ops below read it as before.
  }
  if (std::isfinite(t.sum().item<double>())) return true;
  return torch::isfinite(t).all().item<bool>();
}

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << common::dtype_name(t.scalar_type());
  return out.str();
}

bool same_storage(const torch::Tensor& a, const torch::Tensor& b) {
  return a.has_storage() && b.has_storage() && a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

OpTracer::OpTracer(const torch::nn::Module& model, std::vector<std::string> allow, LayerNamer namer,
                   std::vector<torch::Tensor> batch, observer::Observer& observer)
    : allow_(std::move(allow)), namer_(std::move(namer)), batch_(std::move(batch)), observer_(observer) {
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string& path = item.key();
    auto add = [&](const std::string& local, const torch::Tensor& t) {
      if (!t.defined()) return;
      owners_.emplace(t.unsafeGetTensorImpl(), std::make_pair(path, path.empty() ? local : path + "." + local));
      keep_alive_.push_back(t);
    };
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) add(p.key(), p.value());
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) add(b.key(), b.value());
  }
  observer_.attach(this);
  attached_ = true;
}

OpTracer::~OpTracer() { stop(); }

void OpTracer::stop() {
  if (std::exchange(attached_, false)) observer_.detach(this);
  stopped_ = true;
}

void OpTracer::op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                        const std::vector<observer::Frame>& stack) {
  if (stopped_) return;
  try {
    // Inside the observer's callback, which passes over the ops run here.
    common::OwnOps own_ops(common::OwnOps::kFew);
    torch::NoGradGuard no_grad;
    process(frame, outputs, stack);
  } catch (const std::exception& e) {
    error_ = std::string("op tracing failed: ") + e.what();
    stop();
  }
}

std::optional<std::string> OpTracer::forward_layer(const std::vector<torch::Tensor>& inputs,
                                                   const std::vector<torch::Tensor>& outputs) {
  if (namer_) {
    for (const auto& out : outputs) {
      if (auto name = namer_(out)) return name;
    }
  }
  for (const auto& in : inputs) {
    auto it = owners_.find(in.unsafeGetTensorImpl());
    if (it != owners_.end() && !it->second.first.empty()) return it->second.first;
  }
  return std::nullopt;
}

bool OpTracer::allowed(const std::string& op, const std::optional<std::string>& layer) const {
  const std::string base = base_name(op);
  for (const auto& entry : allow_) {
    if (base_name(entry) == base) return true;
    if (layer && (*layer == entry || layer->rfind(entry + ".", 0) == 0)) return true;
  }
  return false;
}

std::string OpTracer::origin_of(const torch::Tensor& t) const {
  for (const auto& [impl, owner] : owners_) {
    const auto& held = std::find_if(keep_alive_.begin(), keep_alive_.end(),
                                    [impl = impl](const torch::Tensor& k) { return k.unsafeGetTensorImpl() == impl; });
    if (held != keep_alive_.end() && (impl == t.unsafeGetTensorImpl() || same_storage(*held, t))) {
      return "'" + owner.second +
             "' already held non-finite values when the batch began: an earlier optimizer step (or a "
             "load) wrote them";
    }
  }
  for (size_t i = 0; i < batch_.size(); ++i) {
    if (batch_[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl() || same_storage(batch_[i], t)) {
      return "the batch's tensor #" + std::to_string(i) + " (" + shape_text(batch_[i]) +
             ") already held non-finite values: the data is the cause";
    }
  }
  return "a tensor made outside the traced ops (a constant, or one computed before the batch began) already "
         "held non-finite values";
}

OpReport OpTracer::report(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, bool backward,
                          const std::string& node, const std::string& forward_op,
                          const std::optional<std::string>& layer) const {
  OpReport r;
  r.op = frame.name;
  r.pass = backward ? "backward" : backward_done_ ? "step" : "forward";
  r.backward_node = node;
  r.forward_op = forward_op;
  r.layer = layer;
  r.index = index_;
  for (const auto& in : frame.inputs) r.inputs.push_back(common::tensor_stats(in));
  for (const auto& out : outputs) r.outputs.push_back(common::tensor_stats(out));
  return r;
}

namespace {

bool any_non_finite(const std::vector<torch::Tensor>& outputs) {
  return std::any_of(outputs.begin(), outputs.end(), [](const torch::Tensor& out) { return !finite(out); });
}

}  // namespace

OpTracer::Pass OpTracer::pass_of(const std::vector<observer::Frame>& stack) {
  Pass pass;
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    if (it->kind != observer::FrameKind::kNode && it->kind != observer::FrameKind::kWrapper) continue;
    pass.backward = true;
    if (!pass.node.empty()) continue;
    std::string_view name = it->name;
    if (it->kind == observer::FrameKind::kWrapper) {
      auto colon = name.find(": ");
      name = colon == std::string_view::npos ? std::string_view() : name.substr(colon + 2);
    }
    pass.node = std::string(name);
    pass.node_seq = it->seq;
  }
  return pass;
}

void OpTracer::process(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                       const std::vector<observer::Frame>& stack) {
  ++index_;
  const Pass pass = pass_of(stack);
  const std::string base = base_name(frame.name);
  if (value_preserving(base)) {
    carry_through(frame, outputs, pass.backward);
    return;
  }
  const Site site = locate(frame, outputs, pass);
  if (!any_non_finite(outputs)) return;
  classify(frame, outputs, pass, site, base);
}

// A view, copy or cast hands its input's standing on: an owner's name, an
// intended value, a traced non-finite value.
void OpTracer::carry_through(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, bool backward) {
  if (frame.inputs.empty()) return;
  const auto* in = frame.inputs.front().unsafeGetTensorImpl();
  auto owner = owners_.find(in);
  for (const auto& out : outputs) {
    const auto* impl = out.unsafeGetTensorImpl();
    if (impl == in) continue;
    if (owner != owners_.end()) {
      owners_.emplace(impl, owner->second);
      keep_alive_.push_back(out);
    }
    if (is_allowed(frame.inputs.front())) {
      allowed_.insert(impl);
      keep_alive_.push_back(out);
      if (!backward && namer_) {
        if (auto layer = namer_(out)) intended_layers_.insert(*layer);
      }
    }
    if (produced_.count(in)) produced_.emplace(impl, out);
  }
}

// The layer and forward op an op belongs to: a backward op's from the
// forward op its node recorded, a forward op's from its tensors (and
// recorded for its node).
OpTracer::Site OpTracer::locate(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs,
                                const Pass& pass) {
  Site site;
  if (pass.backward) {
    if (auto f = forward_ops_.find(pass.node_seq); f != forward_ops_.end()) {
      site.layer = f->second.layer;
      site.forward_op = f->second.op;
    }
  } else if (!backward_done_) {
    site.layer = forward_layer(frame.inputs, outputs);
    if (frame.seq >= 0) forward_ops_[frame.seq] = ForwardOp{frame.name, site.layer};
  }
  return site;
}

// What the inputs of an op with non-finite outputs held: a non-finite value
// that was not intended (and the first such one no traced op made), or only
// intended ones.
OpTracer::Inputs OpTracer::inputs_of(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs) const {
  Inputs in;
  for (const auto& t : frame.inputs) {
    const auto* impl = t.unsafeGetTensorImpl();
    // A number literal (`x * float("nan")`, `x * NAN`) reaches some kernels
    // as a wrapped 0-dim tensor and others as a Scalar: either way it is part
    // of this op, which is then what made the NaN — not a tensor from outside.
    if (impl->is_wrapped_number()) continue;
    // An in-place op's input is its output now: its values before the op are
    // known only from what earlier ops left in it.
    const bool overwritten = std::any_of(outputs.begin(), outputs.end(),
                                         [&](const torch::Tensor& out) { return out.unsafeGetTensorImpl() == impl; });
    if (overwritten ? !produced_.count(impl) && !is_allowed(t) : finite(t)) continue;
    if (is_allowed(t)) {
      in.allowed = true;
    } else {
      in.bad = true;
      if (!produced_.count(impl) && !in.outside) in.outside = &t;
    }
  }
  return in;
}

// Remembers an op's outputs as intended values or as traced non-finite ones.
void OpTracer::mark(const std::vector<torch::Tensor>& outputs, bool intended) {
  for (const auto& out : outputs) {
    if (!checkable(out)) continue;
    if (intended) {
      allowed_.insert(out.unsafeGetTensorImpl());
      // A factory's result is handed out under a new TensorImpl
      // (make_variable): its storage is how it is known.
      if (out.has_storage()) allowed_storages_.insert(out.storage().unsafeGetStorageImpl());
      keep_alive_.push_back(out);
    } else {
      produced_.emplace(out.unsafeGetTensorImpl(), out);
    }
  }
}

// An op with non-finite outputs: intended, the producer, another producer or
// a propagator.
void OpTracer::classify(const observer::Frame& frame, const std::vector<torch::Tensor>& outputs, const Pass& pass,
                        const Site& site, const std::string& base) {
  bool out_nan = false, out_inf = false;
  for (const auto& out : outputs) {
    if (!checkable(out)) continue;
    // An attention mask's -inf comes through here on every traced batch: its
    // bits are read in place, no op.
    std::optional<NonFiniteKinds> kinds;
    try {
      kinds = non_finite_kinds_in_place(out);
    } catch (const std::exception&) {
      // Memory that cannot be read directly: the tensor ops below.
    }
    if (!kinds) kinds = NonFiniteKinds{torch::isnan(out).any().item<bool>(), torch::isinf(out).any().item<bool>()};
    out_nan = out_nan || kinds->nan;
    out_inf = out_inf || kinds->inf;
  }
  const Inputs in = inputs_of(frame, outputs);
  // Intended: an allowed op; an explicit ±inf fill (masked_fill, where,
  // full... given an infinite value); or an op that only carried an intended
  // Inf along (a masked score plus a bias). NaN is never intended, and neither
  // is an Inf made by arithmetic.
  const bool inf_fill = fills(base) && infinite_literal(frame);
  if (allowed(frame.name, site.layer) || (!in.bad && ((inf_fill && !out_nan) || (in.allowed && !out_nan)))) {
    mark(outputs, true);
    if (site.layer && !pass.backward) intended_layers_.insert(*site.layer);
    return;
  }
  // A fill carrying a NaN along (the mask of a block whose input is already
  // poisoned): the NaN counts, the ±Inf it wrote does not.
  if (inf_fill && site.layer && !pass.backward) intended_layers_.insert(*site.layer);
  mark(outputs, false);
  saw_nan_ = saw_nan_ || out_nan;
  saw_inf_ = saw_inf_ || (out_inf && !inf_fill);
  if (!producer_ && (!in.bad || in.outside)) {
    producer_ = report(frame, outputs, pass.backward, pass.node, site.forward_op, site.layer);
    if (in.bad) {
      from_outside_ = true;
      outside_summary_ = origin_of(*in.outside);
    }
    return;
  }
  if (!in.bad) {
    ++other_producers_;
    return;
  }
  ++propagator_count_;
  if (propagators_.size() < 8) {
    propagators_.push_back(report(frame, outputs, pass.backward, pass.node, site.forward_op, site.layer));
  }
}

bool OpTracer::is_allowed(const torch::Tensor& t) const {
  return allowed_.count(t.unsafeGetTensorImpl()) ||
         (t.has_storage() && allowed_storages_.count(t.storage().unsafeGetStorageImpl()));
}

RootCause OpTracer::result(const Rename& rename) const {
  RootCause cause;
  cause.propagators = propagators_;
  if (rename) {
    for (auto& p : cause.propagators) {
      if (p.layer) p.layer = rename(*p.layer);
    }
  }
  cause.propagator_count = propagator_count_;
  cause.other_producer_count = other_producers_;
  if (!producer_) {
    cause.status = RootCause::Status::kNotTraced;
    cause.summary = error_.empty() ? "no traced op made or passed on a non-finite value" : error_;
    return cause;
  }
  cause.producer = producer_;
  if (rename && cause.producer->layer) cause.producer->layer = rename(*cause.producer->layer);
  const auto& p = *cause.producer;
  // "aten::div in the forward, outside the model's layers (the loss?)"
  std::string what = p.op;
  if (p.pass == "backward") {
    what += " in the backward, in " + p.backward_node +
            (p.forward_op.empty() ? "" : " (the gradient of " + p.forward_op + ")");
  } else {
    what += p.pass == "step" ? " after backward (the optimizer step)" : " in the forward";
  }
  if (p.layer) {
    what += ", layer " + *p.layer;
  } else if (p.pass == "forward" && namer_) {
    // The capture tracer names every op of the model's forward.
    what += ", outside the model's layers (the loss?)";
  }
  if (from_outside_) {
    cause.status = RootCause::Status::kFromOutside;
    cause.summary = "no op of this batch made it: " + outside_summary_ + "; first seen by " + what;
    return cause;
  }
  cause.status = RootCause::Status::kFound;
  std::string kinds;
  int64_t nan = 0, inf = 0;
  for (const auto& o : p.outputs) {
    nan += o.nan;
    inf += o.pos_inf + o.neg_inf;
  }
  kinds = nan && inf ? "NaN and Inf" : nan ? "NaN" : "Inf";
  cause.summary = what + ", produced " + kinds + " from finite inputs";
  return cause;
}

}  // namespace nansense::numerics
