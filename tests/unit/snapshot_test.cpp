// Snapshot values against a direct computation with the same weights and input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::kWait;
using test::TrainingThread;
using TensorMap = std::map<std::string, torch::Tensor>;

TensorMap clone_params(const torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  TensorMap out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

TensorMap clone_grads(const torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  TensorMap out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().grad().detach().clone();
  return out;
}

void load_params(torch::nn::Module& m, const TensorMap& values) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) p.value().copy_(values.at(p.key()));
}

std::vector<std::string> keys(const TensorMap& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

void expect_close(const TensorMap& got, const std::string& key, const torch::Tensor& want) {
  auto it = got.find(key);
  ASSERT_NE(it, got.end()) << "missing '" << key << "'";
  ASSERT_EQ(it->second.sizes(), want.sizes()) << key;
  EXPECT_TRUE(torch::allclose(it->second, want.detach(), 1e-5, 1e-6)) << key << ": got\n"
                                                                      << it->second << "\nwant\n"
                                                                      << want;
}

void expect_cpu_copy(const torch::Tensor& t, const std::string& what) {
  EXPECT_TRUE(t.device().is_cpu()) << what;
  EXPECT_FALSE(t.requires_grad()) << what;
}

// Trains a TwoLayer on `data` in step mode; remembers the weights before the
// first batch and the weights and gradients right after its optimizer step.
struct FirstBatch {
  test::TwoLayer model;
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  std::vector<test::Batch> data = test::make_batches(6);
  TensorMap before, after, grads;

  void run(Session& session) {
    before = clone_params(*model);  // outside any batch: nothing is traced
    bool first = true;
    for (auto& b : session.batches(data, "train")) {
      test::train_step(model, opt, b.first, b.second);
      if (first) {
        after = clone_params(*model);
        grads = clone_grads(*model);
        first = false;
      }
    }
    session.close();
  }
};

TEST(Snapshot, ValuesMatchADirectComputation) {
  FirstBatch t;
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->sequence, 1u);
  EXPECT_TRUE(snap->position.same_batch(*session.live_position()));

  // Replay the batch on a replica holding the pre-step weights.
  test::TwoLayer replica;
  load_params(*replica, t.before);
  const auto& [x, y] = t.data[0];
  auto h1 = replica->fc1(x);
  h1.retain_grad();
  auto a = torch::relu(h1);
  a.retain_grad();
  auto out = replica->fc2(a);
  out.retain_grad();
  torch::cross_entropy_loss(out, y).backward();

  EXPECT_EQ(keys(snap->activations), (std::vector<std::string>{"fc1", "fc2", "input", "relu"}));
  EXPECT_TRUE(torch::equal(snap->activations.at("input"), x));
  expect_close(snap->activations, "fc1", h1);
  expect_close(snap->activations, "relu", a);
  expect_close(snap->activations, "fc2", out);

  EXPECT_EQ(keys(snap->activation_gradients), (std::vector<std::string>{"fc1", "fc2", "relu"}))
      << "the input does not require grad: it has no gradient";
  expect_close(snap->activation_gradients, "fc1", h1.grad());
  expect_close(snap->activation_gradients, "relu", a.grad());
  expect_close(snap->activation_gradients, "fc2", out.grad());

  // Weights and their gradients are read after the user's optimizer step.
  std::vector<std::string> params{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"};
  EXPECT_EQ(keys(snap->weights), params);
  EXPECT_EQ(keys(snap->weight_gradients), params);
  for (const auto& name : params) {
    EXPECT_TRUE(torch::equal(snap->weights.at(name), t.after.at(name))) << name;
    EXPECT_FALSE(torch::equal(snap->weights.at(name), t.before.at(name))) << name << ": the step happened";
    EXPECT_TRUE(torch::equal(snap->weight_gradients.at(name), t.grads.at(name))) << name;
  }
  expect_close(snap->weight_gradients, "fc1.weight", replica->fc1->weight.grad());
  expect_close(snap->weight_gradients, "fc2.bias", replica->fc2->bias.grad());

  ASSERT_EQ(snap->inputs.size(), 1u);
  EXPECT_TRUE(torch::equal(snap->inputs[0], x));
  EXPECT_TRUE(snap->optimizer_state.empty()) << "no optimizer was given to start()";

  for (const auto& [k, v] : snap->activations) expect_cpu_copy(v, "activation " + k);
  for (const auto& [k, v] : snap->activation_gradients) expect_cpu_copy(v, "gradient " + k);
  for (const auto& [k, v] : snap->weights) expect_cpu_copy(v, "weight " + k);
  for (const auto& [k, v] : snap->weight_gradients) expect_cpu_copy(v, "weight gradient " + k);
}

TEST(Snapshot, TensorsAreIndependentOfLaterTraining) {
  FirstBatch t;
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);

  auto frozen = [](const TensorMap& m) {
    TensorMap out;
    for (const auto& [k, v] : m) out[k] = v.clone();
    return out;
  };
  auto activations = frozen(snap->activations);
  auto gradients = frozen(snap->activation_gradients);
  auto weights = frozen(snap->weights);
  auto weight_grads = frozen(snap->weight_gradients);

  for (int i = 1; i <= 3; ++i) {
    session.step_batch();
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  }
  EXPECT_EQ(session.snapshot()->sequence, 4u);
  EXPECT_NE(session.snapshot(), snap);

  auto same = [](const TensorMap& a, const TensorMap& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a) {
      if (!b.count(k) || !torch::equal(v, b.at(k))) return false;
    }
    return true;
  };
  EXPECT_TRUE(same(snap->activations, activations));
  EXPECT_TRUE(same(snap->activation_gradients, gradients));
  EXPECT_TRUE(same(snap->weights, weights));
  EXPECT_TRUE(same(snap->weight_gradients, weight_grads));

  session.detach();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
  // Training moved the live weights; the old snapshot still holds its own.
  for (const auto& p : t.model->named_parameters()) {
    EXPECT_FALSE(torch::equal(p.value(), snap->weights.at(p.key()))) << p.key();
    EXPECT_NE(p.value().data_ptr(), snap->weights.at(p.key()).data_ptr()) << p.key();
  }
}

TEST(Snapshot, StackedExamplesFormOneInputLayer) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  using Example = torch::data::Example<>;
  std::vector<std::vector<Example>> data(3);
  for (auto& batch : data) {
    for (int i = 0; i < 5; ++i) batch.emplace_back(torch::randn({4}), torch::tensor(i % 3, torch::kLong));
  }
  auto session = start(model);
  TrainingThread thread(session, [&] {
    for (auto& examples : session.batches(data, "train")) {
      std::vector<torch::Tensor> xs, ys;
      for (const auto& e : examples) {
        xs.push_back(e.data);
        ys.push_back(e.target);
      }
      test::train_step(model, opt, torch::stack(xs), torch::stack(ys));
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap && snap->architecture);

  std::vector<torch::Tensor> xs;
  for (const auto& e : data[0]) xs.push_back(e.data);
  auto stacked = torch::stack(xs);
  EXPECT_EQ(snap->architecture->inputs, (std::vector<std::string>{"input"}));
  const LayerInfo* in = snap->architecture->find("input");
  ASSERT_TRUE(in);
  EXPECT_EQ(in->output_shape, (std::vector<int64_t>{5, 4}));
  ASSERT_EQ(snap->inputs.size(), 1u);
  EXPECT_TRUE(torch::equal(snap->inputs[0], stacked));
  EXPECT_TRUE(torch::equal(snap->activations.at("input"), stacked));
  // The loop's own stacking of the examples is the input, not a layer of the model.
  std::vector<std::string> names;
  for (const auto& l : snap->architecture->layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"input", "fc1", "relu", "fc2"}));
  EXPECT_EQ(snap->architecture->edges.front(), (std::pair<std::string, std::string>{"input", "fc1"}));
}

TEST(Snapshot, EvalBatchesHaveActivationsButNoGradients) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto train = test::make_batches(2), val = test::make_batches(2);
  auto session = start(model);
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(train, "train")) test::train_step(model, opt, b.first, b.second);
    for (auto& b : session.batches(val, "val")) {
      torch::NoGradGuard no_grad;
      model->forward(b.first);
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  session.step_phase();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->position.phase, "val");
  EXPECT_EQ(keys(snap->activations), (std::vector<std::string>{"fc1", "fc2", "input", "relu"}));
  EXPECT_TRUE(snap->activation_gradients.empty());
  test::TwoLayer replica;
  load_params(*replica, snap->weights);
  torch::NoGradGuard no_grad;
  expect_close(snap->activations, "fc2", replica->forward(val[0].first));
}

struct InplaceImpl : torch::nn::Module {
  InplaceImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 6))), fc2(register_module("fc2", torch::nn::Linear(6, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = fc1(x);
    h.relu_();  // like ReLU(inplace=true): overwrites fc1's output
    return fc2(h);
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Inplace);

TEST(Snapshot, ActivationIsCopiedBeforeAnInPlaceOpOverwritesIt) {
  Inplace model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2);
  TensorMap before;
  auto session = start(model);
  TrainingThread thread(session, [&] {
    before = clone_params(*model);
    for (auto& b : session.batches(data, "train")) test::train_step(model, opt, b.first, b.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap && snap->architecture);

  test::TwoLayer replica;  // same parameter names and forward, without the in-place op
  load_params(*replica, before);
  auto h1 = replica->fc1(data[0].first);
  h1.retain_grad();
  auto a = torch::relu(h1);
  a.retain_grad();
  torch::cross_entropy_loss(replica->fc2(a), data[0].second).backward();
  ASSERT_TRUE((h1 < 0).any().item<bool>()) << "the test needs negative pre-activations";
  expect_close(snap->activations, "fc1", h1);
  expect_close(snap->activations, "relu", a);
  expect_close(snap->activation_gradients, "relu", a.grad());
  expect_close(snap->activation_gradients, "fc1", h1.grad());
}

TEST(Snapshot, PublishIsAtomicForConcurrentReaders) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  // Every value of batch i's input is i: a snapshot is consistent when its
  // position, input and activations all come from the same batch.
  std::vector<test::Batch> data;
  for (int i = 0; i < 12; ++i) data.emplace_back(torch::full({5, 4}, static_cast<float>(i)), torch::randint(3, {5}));
  auto session = start(model);
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(data, "train")) test::train_step(model, opt, b.first, b.second);
    session.close();
  });

  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, backwards{0};
  std::mutex reads_mu;
  std::condition_variable reads_cv;
  int reads = 0;
  std::thread reader([&] {
    uint64_t last_seq = 0;
    int64_t last_batch = -1;
    while (!done.load()) {
      auto snap = session.snapshot();
      if (!snap) continue;
      {
        std::lock_guard lock(reads_mu);
        ++reads;
      }
      reads_cv.notify_all();
      if (snap->sequence < last_seq || (snap->sequence > last_seq && snap->position.batch_idx <= last_batch)) {
        ++backwards;
      }
      last_seq = snap->sequence;
      last_batch = snap->position.batch_idx;
      const float b = static_cast<float>(snap->position.batch_idx);
      bool ok = snap->architecture && snap->inputs.size() == 1 && snap->inputs[0].eq(b).all().item<bool>() &&
                snap->activations.count("input") && snap->activations.at("input").eq(b).all().item<bool>() &&
                snap->weights.size() == 4;
      if (ok) {
        for (const auto& l : snap->architecture->layers) ok = ok && snap->activations.count(l.name);
      }
      if (!ok) ++torn;
    }
  });

  // The reader must have read since the last pause before the next step, so
  // its reads overlap the training of every batch.
  auto reader_caught_up = [&] {
    std::unique_lock lock(reads_mu);
    int seen = reads;
    return reads_cv.wait_for(lock, kWait, [&] { return reads > seen; });
  };
  auto drive = [&] {
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    for (int i = 1; i < 12; ++i) {
      ASSERT_TRUE(reader_caught_up());
      session.step_batch();
      ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
      EXPECT_EQ(session.snapshot()->position.batch_idx, i);
    }
  };
  drive();
  done = true;
  reader.join();
  EXPECT_GE(reads, 11);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(backwards.load(), 0);
  EXPECT_EQ(session.snapshot()->sequence, 12u);
}

}  // namespace
}  // namespace nansense
