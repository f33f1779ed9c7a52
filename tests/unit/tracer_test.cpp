// Layer discovery through a real Session capture: names, kinds, edges, shapes.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::kWait;
using test::TrainingThread;
using Edge = std::pair<std::string, std::string>;

std::vector<std::string> names(const Architecture& a) {
  std::vector<std::string> out;
  for (const auto& l : a.layers) out.push_back(l.name);
  return out;
}

using test::incoming;
using test::layer;

using Shape = std::vector<int64_t>;

// Starts a session in step mode, runs `body` on every item of `items` on a
// training thread, and returns the snapshot of the first (paused) batch.
template <class Model, class Items, class Body>
std::shared_ptr<const BatchSnapshot> capture_first(Model& model, Items& items, Body body) {
  auto session = start(model);
  TrainingThread thread(session, [&] {
    for (auto& item : session.batches(items, "train")) body(item);
    session.close();
  });
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  EXPECT_TRUE(snap);
  if (snap) {
    EXPECT_EQ(session.architecture(), snap->architecture) << "the session publishes the snapshot's graph";
  }
  return snap;
}

TEST(Tracer, SequentialMlpIsNamedByModulePath) {
  test::Mlp model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2);
  auto snap = capture_first(model, data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  // The ReLU is a registered module of the Sequential: it keeps its name.
  EXPECT_EQ(names(a), (std::vector<std::string>{"input", "net.0", "net.1", "net.2"}));
  EXPECT_EQ(a.inputs, (std::vector<std::string>{"input"}));
  EXPECT_EQ(a.edges, (std::vector<Edge>{{"input", "net.0"}, {"net.0", "net.1"}, {"net.1", "net.2"}}));

  const auto& in = layer(a, "input");
  EXPECT_EQ(in.role, LayerInfo::Role::kInput);
  EXPECT_EQ(in.kind, "input");
  EXPECT_EQ(in.output_shape, (Shape{5, 4}));

  const auto& fc = layer(a, "net.0");
  EXPECT_EQ(fc.role, LayerInfo::Role::kModule);
  EXPECT_EQ(fc.kind, "Linear");
  EXPECT_EQ(fc.module, "net.0");
  // LibTorch's C++ Linear runs t + addmm (or linear, by version): every op of
  // the call belongs to the module's one layer.
  EXPECT_FALSE(fc.ops.empty());
  EXPECT_EQ(fc.parameters, (std::vector<std::string>{"net.0.weight", "net.0.bias"}));
  EXPECT_EQ(fc.output_shape, (Shape{5, 8}));
  EXPECT_EQ(fc.dtype, "float32");

  const auto& relu = layer(a, "net.1");
  EXPECT_EQ(relu.role, LayerInfo::Role::kModule);
  EXPECT_EQ(relu.kind, "ReLU");
  EXPECT_EQ(relu.module, "net.1");
  EXPECT_EQ(relu.ops, (std::vector<std::string>{"relu"}));
  EXPECT_TRUE(relu.parameters.empty());
  EXPECT_EQ(relu.output_shape, (Shape{5, 8}));

  EXPECT_EQ(layer(a, "net.2").output_shape, (Shape{5, 3}));
  EXPECT_EQ(layer(a, "net.2").parameters, (std::vector<std::string>{"net.2.weight", "net.2.bias"}));
}

TEST(Tracer, LossOpsAndWhatFollowsAreNotLayers) {
  test::Mlp model;
  torch::optim::Adam opt(model->parameters(), 1e-3);
  auto data = test::make_batches(2);
  for (const std::string loss : {"nll_loss", "cross_entropy", "mse_loss"}) {
    SCOPED_TRACE(loss);
    auto snap = capture_first(model, data, [&](test::Batch& b) {
      opt.zero_grad();
      auto out = model->forward(b.first);
      torch::Tensor l;
      if (loss == "nll_loss") {
        l = torch::nll_loss(torch::log_softmax(out, 1), b.second);
      } else if (loss == "cross_entropy") {
        l = torch::cross_entropy_loss(out, b.second);
      } else {
        l = torch::mse_loss(out, torch::one_hot(b.second, 3).to(torch::kFloat));
      }
      l.backward();
      opt.step();
    });
    ASSERT_TRUE(snap && snap->architecture);
    auto got = names(*snap->architecture);
    std::vector<std::string> want{"input", "net.0", "net.1", "net.2"};
    if (loss == "nll_loss") want.push_back("log_softmax");  // part of the model's output here
    EXPECT_EQ(got, want) << "loss, backward and optimizer ops must not become layers";
  }
}

TEST(Tracer, CnnKindsShapesAndEdges) {
  test::Cnn model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2, 5, {1, 8, 8});
  auto snap = capture_first(model, data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  EXPECT_EQ(names(a), (std::vector<std::string>{"input", "conv", "relu", "max_pool2d", "flatten", "fc"}));
  EXPECT_EQ(
      a.edges,
      (std::vector<Edge>{
          {"input", "conv"}, {"conv", "relu"}, {"relu", "max_pool2d"}, {"max_pool2d", "flatten"}, {"flatten", "fc"}}));
  EXPECT_EQ(layer(a, "conv").kind, "Conv2d");
  EXPECT_EQ(layer(a, "conv").ops, (std::vector<std::string>{"conv2d"}));
  EXPECT_EQ(layer(a, "conv").parameters, (std::vector<std::string>{"conv.weight", "conv.bias"}));
  EXPECT_EQ(layer(a, "fc").kind, "Linear");
  EXPECT_EQ(layer(a, "max_pool2d").kind, "max_pool2d");
  EXPECT_EQ(layer(a, "input").output_shape, (Shape{5, 1, 8, 8}));
  EXPECT_EQ(layer(a, "conv").output_shape, (Shape{5, 4, 6, 6}));
  EXPECT_EQ(layer(a, "relu").output_shape, (Shape{5, 4, 6, 6}));
  EXPECT_EQ(layer(a, "max_pool2d").output_shape, (Shape{5, 4, 3, 3}));
  EXPECT_EQ(layer(a, "flatten").output_shape, (Shape{5, 36}));
  EXPECT_EQ(layer(a, "fc").output_shape, (Shape{5, 3}));
  // Every layer's activation is captured with the shape the graph reports.
  for (const auto& l : a.layers) {
    ASSERT_TRUE(snap->activations.count(l.name)) << l.name;
    EXPECT_EQ(snap->activations.at(l.name).sizes().vec(), l.output_shape) << l.name;
  }
}

TEST(Tracer, ResidualAddHasTwoIncomingEdges) {
  test::Residual model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2);
  auto snap = capture_first(model, data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  EXPECT_EQ(names(a),
            (std::vector<std::string>{"input", "stem", "block.fc1", "block.relu", "block.fc2", "add", "relu", "head"}))
      << "an op between two calls of block's modules is scoped under block; one after its last module call "
         "cannot be told from one outside it";
  EXPECT_EQ(incoming(a, "add"), (std::vector<std::string>{"block.fc2", "stem"}));
  EXPECT_EQ(incoming(a, "block.fc1"), (std::vector<std::string>{"stem"}));
  EXPECT_EQ(incoming(a, "relu"), (std::vector<std::string>{"add"}));
  EXPECT_EQ(incoming(a, "head"), (std::vector<std::string>{"relu"}));
  EXPECT_EQ(layer(a, "add").kind, "add");
  EXPECT_EQ(layer(a, "add").role, LayerInfo::Role::kOp);
  EXPECT_EQ(layer(a, "block.relu").kind, "relu");
  EXPECT_EQ(layer(a, "block.relu").role, LayerInfo::Role::kOp);
  EXPECT_EQ(layer(a, "block.fc2").module, "block.fc2");
  EXPECT_EQ(a.edges.size(), 8u);
}

TEST(Tracer, TwoInputModelHasTwoInputLayers) {
  test::TwoInput model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  std::vector<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>> data;
  for (int i = 0; i < 2; ++i) data.emplace_back(torch::randn({5, 4}), torch::randn({5, 2}), torch::randint(3, {5}));
  auto snap = capture_first(model, data, [&](auto& item) {
    auto& [x1, x2, y] = item;
    opt.zero_grad();
    torch::cross_entropy_loss(model->forward(x1, x2), y).backward();
    opt.step();
  });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  EXPECT_EQ(a.inputs, (std::vector<std::string>{"input", "input_1"}));
  EXPECT_EQ(names(a), (std::vector<std::string>{"input", "input_1", "fa", "relu", "fb", "add", "head"}));
  EXPECT_EQ(incoming(a, "fa"), (std::vector<std::string>{"input"}));
  EXPECT_EQ(incoming(a, "fb"), (std::vector<std::string>{"input_1"}));
  EXPECT_EQ(incoming(a, "add"), (std::vector<std::string>{"fb", "relu"}));
  EXPECT_EQ(layer(a, "input").output_shape, (Shape{5, 4}));
  EXPECT_EQ(layer(a, "input_1").output_shape, (Shape{5, 2}));
  ASSERT_EQ(snap->inputs.size(), 2u) << "the target (last tuple element) is not an input";
  EXPECT_TRUE(torch::equal(snap->inputs[0], std::get<0>(data[0])));
  EXPECT_TRUE(torch::equal(snap->inputs[1], std::get<1>(data[0])));
}

TEST(Tracer, FunctionalModelNamesOpsByOperator) {
  test::Functional model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2);
  auto snap = capture_first(model, data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;

  EXPECT_EQ(names(a), (std::vector<std::string>{"input", "linear", "relu", "linear_1"}));
  const auto& l0 = layer(a, "linear");
  EXPECT_EQ(l0.role, LayerInfo::Role::kOp) << "root-module parameters do not make a module layer";
  EXPECT_EQ(l0.kind, "linear");
  EXPECT_TRUE(l0.module.empty());
  EXPECT_EQ(l0.parameters, (std::vector<std::string>{"w1", "b1"}));
  EXPECT_EQ(layer(a, "linear_1").parameters, (std::vector<std::string>{"w2", "b2"}));
  EXPECT_EQ(layer(a, "linear_1").output_shape, (Shape{5, 3}));
  EXPECT_EQ(a.edges, (std::vector<Edge>{{"input", "linear"}, {"linear", "relu"}, {"relu", "linear_1"}}));
}

struct SharedImpl : torch::nn::Module {
  SharedImpl() : fc(register_module("fc", torch::nn::Linear(4, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(torch::relu(fc(x))); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Shared);

TEST(Tracer, AModuleCalledTwiceIsOneLayerPerCall) {
  Shared model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2, 5, {4}, 4);
  auto snap = capture_first(model, data, [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); });
  ASSERT_TRUE(snap && snap->architecture);
  const Architecture& a = *snap->architecture;
  EXPECT_EQ(names(a), (std::vector<std::string>{"input", "fc", "relu", "fc#2"}));
  EXPECT_EQ(layer(a, "fc#2").module, "fc");
  EXPECT_EQ(incoming(a, "fc#2"), (std::vector<std::string>{"relu"}));
  EXPECT_FALSE(torch::equal(snap->activations.at("fc"), snap->activations.at("fc#2")));
  ASSERT_TRUE(snap->activation_gradients.count("fc") && snap->activation_gradients.count("fc#2"))
      << "every call's gradient is captured";
  EXPECT_FALSE(torch::equal(snap->activation_gradients.at("fc"), snap->activation_gradients.at("fc#2")));
}

TEST(Tracer, NamesAreStableAcrossBatchesAndSessions) {
  test::Residual model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(3);
  auto body = [&](test::Batch& b) { test::train_step(model, opt, b.first, b.second); };

  std::shared_ptr<const Architecture> first, second;
  {
    auto session = start(model);
    TrainingThread thread(session, [&] {
      for (auto& b : session.batches(data, "train")) body(b);
      session.close();
    });
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    first = session.architecture();
    session.step_batch();
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    ASSERT_EQ(session.live_position()->batch_idx, 1);
    second = session.architecture();
  }
  auto other = capture_first(model, data, body);
  ASSERT_TRUE(first && second && other);
  EXPECT_NE(first, second) << "each capture publishes its own graph";
  EXPECT_EQ(names(*first), names(*second));
  EXPECT_EQ(first->edges, second->edges);
  EXPECT_EQ(names(*first), names(*other->architecture));
  EXPECT_EQ(first->edges, other->architecture->edges);
}

TEST(Tracer, UncapturedBatchesInstallNoCallback) {
  test::Mlp model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(8);
  std::vector<bool> installed;  // per batch, read after join
  bool installed_after_loop = true;
  test::Gate reached, go;
  auto session = start(model);
  TrainingThread thread(session, [&] {
    int i = 0;
    for (auto& b : session.batches(data, "train")) {
      installed.push_back(at::hasThreadLocalCallbacks());
      test::train_step(model, opt, b.first, b.second);
      if (i++ == 3) {
        reached.open();
        go.wait();
      }
    }
    installed_after_loop = at::hasThreadLocalCallbacks();
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  session.detach();
  ASSERT_TRUE(reached.wait());
  session.refresh();  // batch 4 is captured without pausing
  go.open();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();

  EXPECT_EQ(installed, (std::vector<bool>{true, false, false, false, true, false, false, false}));
  EXPECT_FALSE(installed_after_loop);
  ASSERT_TRUE(session.snapshot());
  EXPECT_EQ(session.snapshot()->position.batch_idx, 4);
  EXPECT_EQ(session.snapshot()->sequence, 2u);
}

// Identity needs the TensorImpl objects, not their values: a value the loop
// drops during a traced batch is freed then, as it is without tracing (the
// conv output here: relu saves its own output for backward, not its input).
TEST(Tracer, ATracedBatchFreesTheValuesTheLoopDrops) {
  test::Cnn model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(1, 5, {1, 8, 8});
  bool traced = false, freed_on_drop = false, kept_while_held = false;
  auto session = start(model);
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(data, "train")) {
      traced = at::hasThreadLocalCallbacks();
      opt.zero_grad();
      auto conv_out = model->conv(b.first);
      auto storage = conv_out.storage().getWeakStorageImpl();
      auto h = torch::relu(conv_out);
      kept_while_held = !storage.expired();
      conv_out = torch::Tensor();
      freed_on_drop = storage.expired();
      auto loss = torch::nn::functional::cross_entropy(model->fc(torch::max_pool2d(h, 2).flatten(1)), b.second);
      loss.backward();
      opt.step();
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  ASSERT_TRUE(session.snapshot() && session.snapshot()->architecture);
  EXPECT_TRUE(session.snapshot()->architecture->find("conv")) << "the conv call was traced as a layer";
  session.run();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
  EXPECT_TRUE(traced);
  EXPECT_TRUE(kept_while_held);
  EXPECT_TRUE(freed_on_drop) << "the tracer held the conv output's storage after the loop dropped it";
}

}  // namespace
}  // namespace nansense
