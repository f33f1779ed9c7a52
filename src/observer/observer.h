// The one place nansense watches the dispatcher: a RecordFunction callback,
// installed for one traced batch, that tells its consumers (the capture
// tracer that finds layers, the root-cause tracer) every op the batch runs.
//
// The callback is thread-local to the training thread. Autograd carries a
// thread's RecordFunction callbacks into the threads that run its backward
// (the device threads of CUDA tensors), so those ops are seen too: a
// consumer gets them marked `backward`, from whichever thread ran them, one
// at a time.
//
// One batch is observed at a time in a process: a second observer while one
// is installed throws (two sessions tracing at once in one process).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace at {
class RecordFunction;
}

namespace nansense::observer {

// Appends every defined tensor inside an op argument or result (tensors,
// tensor lists, nested lists and tuples) to `out`.
void collect_tensors(const c10::IValue& v, std::vector<torch::Tensor>& out);

// An op's name as nansense says it: "aten::_softmax_" -> "softmax". Allow-list
// entries, layer kinds and the ops of a layer all use it.
std::string op_name(std::string_view recorded);

enum class FrameKind {
  kOp,        // an op not nested in another op: what consumers see
  kNestedOp,  // an op that an op runs inside itself
  kNode,      // a backward node of autograd's engine
  kWrapper,   // autograd::engine::evaluate_function and the like, around a node
};

// One entry of a thread's stack of running ops.
struct Frame {
  FrameKind kind = FrameKind::kOp;
  std::string name;  // as recorded: "aten::relu_", "AddmmBackward0"
  std::string op;    // op_name(name), for ops
  int64_t seq = -1;  // autograd sequence number (a forward op's links it to its backward node;
                     // a wrapper takes its node's)
  // Inside autograd's backward: a node or wrapper is below it on its thread.
  bool backward = false;
  std::vector<torch::Tensor> inputs;  // kOp frames only
  std::vector<double> scalars;        // kOp frames only: its floating-point scalar arguments
};

class Observer;

// What a consumer of ops implements. Calls come from the training thread or,
// for backward ops, from a thread autograd runs them on; never two at once.
// A consumer must not throw: its own failures are its to record.
class Consumer {
 public:
  virtual ~Consumer() = default;
  // Whether it needs the ops inside autograd's backward. When no attached
  // consumer does, Tensor::backward() runs unobserved (no boxing cost).
  virtual bool wants_backward() const = 0;
  // A kOp frame started (its inputs are collected; `fn` has its literal arguments).
  virtual void op_started(const at::RecordFunction& fn, const Frame& frame) {
    (void)fn;
    (void)frame;
  }
  // A kOp frame ended. `stack` is its thread's frames below it, innermost
  // last (backward node names and sequence numbers are there).
  virtual void op_ended(const Frame& frame, const std::vector<torch::Tensor>& outputs,
                        const std::vector<Frame>& stack) = 0;
  // A backward pass ran (parameter gradients may be new tensors now).
  virtual void backward_ran() {}
};

class Observer {
 public:
  // Installs the callback on the calling thread (the training thread).
  Observer();
  // Removes it; ops in flight end unobserved.
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // Consumers are told in the order they were attached (the capture tracer
  // before the root-cause tracer, which asks it for layer names).
  void attach(Consumer* consumer);
  void detach(Consumer* consumer);
  // Whether an observer is installed in this process.
  static bool active();

  // Called from the RecordFunction callbacks.
  void on_start(const at::RecordFunction& fn);
  void on_end(const at::RecordFunction& fn);

 private:
  bool wants_backward() const;  // mu_ held

  const std::thread::id training_thread_;
  const uint64_t generation_;  // tells a thread's stack of this batch from an older one
  uint64_t handle_ = 0;
  bool disabled_in_backward_ = false;  // training thread only
  std::recursive_mutex mu_;
  std::vector<Consumer*> consumers_;
};

}  // namespace nansense::observer
