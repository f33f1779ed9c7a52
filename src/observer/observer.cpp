#include "observer/observer.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "common/own_ops.h"
#include "common/torch_compat.h"

namespace nansense::observer {

namespace {

// Not thread_local: autograd's device threads run with the training thread's
// callbacks and must find the observer too.
std::atomic<Observer*> g_active{nullptr};
std::atomic<uint64_t> g_generation{0};

// Each thread's stack of running ops, for the observer of one batch, and
// the ops its callbacks skip: those the observer's consumers run while they
// handle an op, and any nansense runs under a common::OwnOps (cheaper than a
// DisableRecordFunctionGuard, whose every toggle copies and rebuilds
// LibTorch's thread-local callback state), and the ops a forward op runs
// inside itself (no consumer sees nested ops).
// Skipped starts and ends pair up: ops nest on a thread.
struct ThreadFrames {
  uint64_t generation = 0;
  std::vector<Frame> frames;
  int inside = 0;              // > 0 while the observer handles an op here
  bool in_forward_op = false;  // between a forward op's start and its end
  int64_t skipped = 0;         // starts skipped whose ends are to come
  // The index in `frames` of the backward node whose start turned the
  // callback off for its nested ops (none: npos).
  size_t muted_node = std::string::npos;
};
thread_local ThreadFrames t_frames;

ThreadFrames& thread_state(uint64_t generation) {
  if (t_frames.generation != generation) t_frames = ThreadFrames{generation, {}, 0, false, 0, std::string::npos};
  return t_frames;
}

struct Inside {
  explicit Inside(ThreadFrames& t) : t(t) { ++t.inside; }
  ~Inside() { --t.inside; }
  ThreadFrames& t;
};

std::unique_ptr<at::ObserverContext> on_start_callback(const at::RecordFunction& fn) {
  if (auto* o = g_active.load(std::memory_order_acquire)) o->on_start(fn);
  return nullptr;
}

void on_end_callback(const at::RecordFunction& fn, at::ObserverContext*) {
  if (auto* o = g_active.load(std::memory_order_acquire)) o->on_end(fn);
}

// Calls f on each consumer attached now, from a copy (a consumer may detach
// itself while handling the call), kept on the stack: this runs for every op.
template <class F>
void for_each_consumer(const std::vector<Consumer*>& consumers, F&& f) {
  constexpr size_t kInline = 8;
  if (consumers.size() > kInline) {
    const auto copy = consumers;
    for (auto* c : copy) f(c);
    return;
  }
  std::array<Consumer*, kInline> copy{};
  const size_t n = consumers.size();
  std::copy(consumers.begin(), consumers.end(), copy.begin());
  for (size_t i = 0; i < n; ++i) f(copy[i]);
}

bool in_backward(const Frame& f) { return f.backward || f.kind == FrameKind::kNode || f.kind == FrameKind::kWrapper; }

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

std::string op_name(std::string_view recorded) {
  auto pos = recorded.rfind("::");
  if (pos != std::string_view::npos) recorded.remove_prefix(pos + 2);
  while (recorded.size() > 1 && recorded.back() == '_') recorded.remove_suffix(1);
  while (recorded.size() > 1 && recorded.front() == '_') recorded.remove_prefix(1);
  return std::string(recorded);
}

Observer::Observer() : training_thread_(std::this_thread::get_id()), generation_(++g_generation) {
  Observer* none = nullptr;
  if (!g_active.compare_exchange_strong(none, this)) {
    throw std::runtime_error("another session is tracing a batch in this process; this batch is not traced");
  }
  handle_ = compat::add_thread_local_observer(&on_start_callback, &on_end_callback);
  common::OwnOps::observer_installed(true);
}

Observer::~Observer() {
  at::removeCallback(handle_);
  common::OwnOps::observer_installed(false);
  g_active.store(nullptr, std::memory_order_release);
  std::lock_guard lock(mu_);  // a device thread's dispatch in flight ends first
  consumers_.clear();
}

bool Observer::active() { return g_active.load() != nullptr; }

void Observer::attach(Consumer* consumer) {
  std::lock_guard lock(mu_);
  consumers_.push_back(consumer);
}

void Observer::detach(Consumer* consumer) {
  std::lock_guard lock(mu_);
  std::erase(consumers_, consumer);
}

bool Observer::wants_backward() const {
  for (const auto* c : consumers_) {
    if (c->wants_backward()) return true;
  }
  return false;
}

void Observer::on_start(const at::RecordFunction& fn) {
  auto& state = thread_state(generation_);
  if (state.inside > 0 || state.in_forward_op || common::OwnOps::active()) {
    ++state.skipped;
    return;
  }
  const Inside inside(state);
  auto& frames = state.frames;
  Frame frame;
  frame.name = fn.name();
  frame.seq = fn.seqNr();
  const bool below_backward = !frames.empty() && in_backward(frames.back());
  const bool on_training_thread = std::this_thread::get_id() == training_thread_;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    frame.kind = FrameKind::kNode;
    // Ops the engine runs around the node (summing gradients) belong to it too.
    if (!frames.empty() && frames.back().kind == FrameKind::kWrapper) frames.back().seq = frame.seq;
    // LibTorch 2.x records no op around Tensor::backward() to turn watching
    // off by (below): unless a consumer needs the backward pass, each node's
    // own ops go unrecorded (their inputs and outputs unboxed), the node's
    // start and end still arrive (the end runs the callbacks its start had).
    if (on_training_thread && state.muted_node == std::string::npos) {
      std::lock_guard lock(mu_);
      if (!wants_backward()) {
        at::disableCallback(handle_);
        state.muted_node = frames.size();
      }
    }
  } else if (std::strncmp(fn.name(), "autograd::", 10) == 0) {
    frame.kind = FrameKind::kWrapper;
    frame.seq = -1;  // its node's, once that starts
  } else {
    // Nested in an op, unless a backward node stands between them (the nodes
    // Tensor::backward() runs are ops of their own).
    const bool in_op =
        !frames.empty() && frames.back().kind != FrameKind::kNode && frames.back().kind != FrameKind::kWrapper;
    frame.kind = in_op ? FrameKind::kNestedOp : FrameKind::kOp;
    frame.op = op_name(frame.name);
  }
  frame.backward = below_backward;
  if (frame.kind == FrameKind::kOp) {
    std::lock_guard lock(mu_);
    if (!frame.backward && frame.op == "backward" && on_training_thread) {
      // Tensor::backward(): the whole pass runs inside this op. Unwatched
      // unless a consumer needs it; the op keeps its callbacks, so its end
      // still arrives and turns watching back on.
      if (!wants_backward()) {
        at::disableCallback(handle_);
        disabled_in_backward_ = true;
      }
    } else if (!consumers_.empty() && (!frame.backward || wants_backward())) {
      try {
        for (const auto& v : fn.inputs()) {
          collect_tensors(v, frame.inputs);
          if (v.isDouble()) frame.scalars.push_back(v.toDouble());
          if (v.isScalar() && v.toScalar().isFloatingPoint()) frame.scalars.push_back(v.toScalar().toDouble());
        }
      } catch (const std::exception&) {
        frame.inputs.clear();  // an argument the observer cannot read: consumers see none
      }
      for_each_consumer(consumers_, [&](Consumer* c) {
        if (!frame.backward || c->wants_backward()) c->op_started(fn, frame);
      });
    }
    // The ops it runs inside itself are skipped until its end.
    if (!frame.backward && on_training_thread && frame.op != "backward" && !disabled_in_backward_) {
      state.in_forward_op = true;
    }
  }
  frames.push_back(std::move(frame));
}

void Observer::on_end(const at::RecordFunction& fn) {
  auto& state = thread_state(generation_);
  if (state.skipped > 0) {
    --state.skipped;
    return;
  }
  const Inside inside(state);
  auto& frames = state.frames;
  if (frames.empty()) return;  // began before the observer
  Frame frame = std::move(frames.back());
  frames.pop_back();
  // The first end not skipped after a forward op's start is its own.
  if (frame.kind == FrameKind::kOp && !frame.backward) state.in_forward_op = false;
  if (frame.kind == FrameKind::kNode) {
    if (state.muted_node == frames.size()) {
      at::reenableCallback(handle_);
      state.muted_node = std::string::npos;
    }
    std::lock_guard lock(mu_);
    for_each_consumer(consumers_, [](Consumer* c) { c->backward_ran(); });
    return;
  }
  if (frame.kind != FrameKind::kOp) return;
  std::lock_guard lock(mu_);
  if (!frame.backward && frame.op == "backward" && std::this_thread::get_id() == training_thread_) {
    if (std::exchange(disabled_in_backward_, false)) at::reenableCallback(handle_);
    for_each_consumer(consumers_, [](Consumer* c) { c->backward_ran(); });
    return;
  }
  if (consumers_.empty() || (frame.backward && !wants_backward())) return;
  std::vector<torch::Tensor> outputs;
  try {
    for (const auto& v : fn.outputs()) collect_tensors(v, outputs);
  } catch (const std::exception&) {
    outputs.clear();
  }
  for_each_consumer(consumers_, [&](Consumer* c) {
    if (!frame.backward || c->wants_backward()) c->op_ended(frame, outputs, frames);
  });
}

}  // namespace nansense::observer
