// Small models, data and a training-thread helper shared by the unit tests.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <ostream>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "nansense/nansense.h"
#include "session/session_access.h"

namespace nansense {
// Readable gtest messages for run states.
inline void PrintTo(RunState state, std::ostream* os) { *os << to_string(state); }
}  // namespace nansense

namespace nansense::test {

// Generous: waits return as soon as the loop stops; this only bounds a failure.
inline constexpr std::chrono::milliseconds kWait{20000};

// Linear -> ReLU -> Linear inside a Sequential registered as "net".
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t in = 4, int64_t hidden = 8, int64_t out = 3)
      : net(torch::nn::Linear(in, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, out)) {
    register_module("net", net);
  }
  torch::Tensor forward(const torch::Tensor& x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Mlp);

// fc1 -> relu -> fc2 with plain members, so a test can replay its forward.
struct TwoLayerImpl : torch::nn::Module {
  explicit TwoLayerImpl(int64_t in = 4, int64_t hidden = 6, int64_t out = 3)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(TwoLayer);

// conv -> relu -> max_pool2d -> flatten -> fc, on 1x8x8 images.
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)))),
        fc(register_module("fc", torch::nn::Linear(4 * 3 * 3, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(conv(x));
    h = torch::max_pool2d(h, 2);
    h = h.flatten(1);
    return fc(h);
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(Cnn);

// relu(fc2(relu(fc1(x))) + x): the skip connection makes "add" a two-input layer.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t width)
      : fc1(register_module("fc1", torch::nn::Linear(width, width))),
        fc2(register_module("fc2", torch::nn::Linear(width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1(x));
    return torch::relu(fc2(h) + x);
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Block);

struct ResidualImpl : torch::nn::Module {
  ResidualImpl()
      : stem(register_module("stem", torch::nn::Linear(4, 6))),
        block(register_module("block", Block(6))),
        head(register_module("head", torch::nn::Linear(6, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return head(block(stem(x))); }
  torch::nn::Linear stem;
  Block block;
  torch::nn::Linear head;
};
TORCH_MODULE(Residual);

// Two inputs feeding separate branches that meet in an add.
struct TwoInputImpl : torch::nn::Module {
  TwoInputImpl()
      : fa(register_module("fa", torch::nn::Linear(4, 5))),
        fb(register_module("fb", torch::nn::Linear(2, 5))),
        head(register_module("head", torch::nn::Linear(5, 3))) {}
  torch::Tensor forward(const torch::Tensor& a, const torch::Tensor& b) {
    auto ha = torch::relu(fa(a));
    auto hb = fb(b);
    return head(ha + hb);
  }
  torch::nn::Linear fa;
  torch::nn::Linear fb;
  torch::nn::Linear head;
};
TORCH_MODULE(TwoInput);

// Parameters on the root module, forward written with torch:: functions only.
struct FunctionalImpl : torch::nn::Module {
  FunctionalImpl() {
    w1 = register_parameter("w1", torch::randn({8, 4}) * 0.3);
    b1 = register_parameter("b1", torch::zeros({8}));
    w2 = register_parameter("w2", torch::randn({3, 8}) * 0.3);
    b2 = register_parameter("b2", torch::zeros({3}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(torch::relu(torch::linear(x, w1, b1)), w2, b2); }
  torch::Tensor w1, b1, w2, b2;
};
TORCH_MODULE(Functional);

// Dropout between two layers: a replay matches only with the restored CPU
// generator. `hidden` changes the parameter shapes (a different model).
struct DropNetImpl : torch::nn::Module {
  explicit DropNetImpl(int64_t hidden = 8)
      : fc1(register_module("fc1", torch::nn::Linear(4, hidden))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(DropNet);

// Convolution, BatchNorm, dropout and a linear head: every piece of state a
// forward can touch (running statistics, the RNG, training flags).
struct NormNetImpl : torch::nn::Module {
  NormNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        norm(register_module("norm", torch::nn::BatchNorm2d(4))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        fc(register_module("fc", torch::nn::Linear(4 * 8 * 8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(drop(torch::relu(norm(conv(x))).flatten(1))); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d norm;
  torch::nn::Dropout drop;
  torch::nn::Linear fc;
};
TORCH_MODULE(NormNet);

// One (input, class target) pair per batch. Generated on the test thread,
// before the training thread starts, so the global RNG is never shared.
using Batch = std::pair<torch::Tensor, torch::Tensor>;
inline std::vector<Batch> make_batches(int64_t n, int64_t batch = 5, std::vector<int64_t> input_shape = {4},
                                       int64_t classes = 3) {
  std::vector<Batch> out;
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  for (int64_t i = 0; i < n; ++i) out.emplace_back(torch::randn(shape), torch::randint(classes, {batch}));
  return out;
}

// A server on a free port with no browser, banner or MCP: what pauses need.
inline ServeOptions quiet_server() { return ServeOptions().port(0).open_browser(false).print_banner(false).mcp(false); }

// Tests that pause between batches keep the NaN/Inf check only: the
// under/overflow check may trip inside a backward on random data (whether a
// gradient crosses its 10% threshold can depend on the thread count's
// rounding), and a pause there refuses experiments and probes. No capsules.
inline DebugSettings quiet_checks() { return DebugSettings().check_under_over(false).capsule_dir(""); }

// zero_grad, forward, cross-entropy, backward, step: the canonical batch body.
template <class Model>
torch::Tensor train_step(Model& model, torch::optim::Optimizer& optimizer, const torch::Tensor& x,
                         const torch::Tensor& y) {
  optimizer.zero_grad();
  auto loss = torch::cross_entropy_loss(model->forward(x), y);
  loss.backward();
  optimizer.step();
  return loss;
}

// A training thread's body: `data` as one "train" phase of train_step, then
// close(). `each(i)` (when given) runs before batch i's step.
template <class Model>
std::function<void()> train_phase(Session& session, Model& model, torch::optim::Optimizer& optimizer,
                                  std::vector<Batch>& data, std::function<void(int)> each = nullptr) {
  return [&session, &model, &optimizer, &data, each] {
    int i = 0;
    for (auto& batch : session.batches(data, "train")) {
      if (each) each(i);
      ++i;
      train_step(model, optimizer, batch.first, batch.second);
    }
    session.close();
  };
}

// A one-shot latch. wait() is bounded so that a failing test ends instead of hanging.
class Gate {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout = kWait) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Runs a training loop on its own thread. On destruction it ends run control
// (no pause holds the loop any more) and joins, so a failed assertion never
// hangs a test.
class TrainingThread {
 public:
  TrainingThread(Session& session, std::function<void()> body)
      : session_(session), thread_([this, body = std::move(body)] {
          try {
            body();
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~TrainingThread() {
    if (thread_.joinable()) {
      if (detail::core_of(session_)) detail::core_of(session_)->control().close();
      thread_.join();
    }
  }
  TrainingThread(const TrainingThread&) = delete;
  TrainingThread& operator=(const TrainingThread&) = delete;

  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::thread::id id() const { return thread_.get_id(); }
  // What the body threw (after join()).
  std::exception_ptr error() const { return error_; }

 private:
  Session& session_;
  std::exception_ptr error_;
  std::thread thread_;
};

// Reading a discovered graph in tests: a layer's producers (sorted), and a
// layer by name (a test failure, not a crash, when it is missing).
inline std::vector<std::string> incoming(const Architecture& a, const std::string& layer) {
  std::vector<std::string> out;
  for (const auto& [from, to] : a.edges) {
    if (to == layer) out.push_back(from);
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline const LayerInfo& layer(const Architecture& a, const std::string& name) {
  const LayerInfo* l = a.find(name);
  if (!l) {
    static const LayerInfo missing;
    ADD_FAILURE() << "no layer '" << name << "'";
    return missing;
  }
  return *l;
}

// The message of the exception `f` throws as E; fails the test if none.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

}  // namespace nansense::test
