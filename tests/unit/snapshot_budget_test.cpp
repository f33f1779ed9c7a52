// The snapshot budget (StartOptions::snapshot_budget): a snapshot too big for
// it keeps the leading samples of each batch tensor, stays under the budget,
// and still reports statistics and numerical checks over the whole batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/tensor_stats.h"
#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::kWait;
using test::TrainingThread;

constexpr int64_t kBatch = 32;

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// The Cnn's first batch, paused in step mode, under `budget`; every session
// starts from the same weights and data.
std::shared_ptr<const BatchSnapshot> first_snapshot(int64_t budget, int64_t steps = 0,
                                                    double share = StartOptions::kDefaultSnapshotShare) {
  torch::manual_seed(7);
  test::Cnn model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(4, kBatch, {1, 8, 8});
  auto session = start(model, StartOptions().optimizer(&opt).snapshot_budget(budget).snapshot_share(share));
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(data, "train")) test::train_step(model, opt, b.first, b.second);
    session.close();
  });
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  for (int64_t i = 0; i < steps; ++i) {
    session.step_batch();
    EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  }
  auto snap = session.snapshot();
  session.detach();
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
  return snap;
}

int64_t batch_bytes(const BatchSnapshot& snap) {
  int64_t total = 0;
  for (const auto& [_, t] : snap.activations) total += bytes_of(t);
  for (const auto& [_, t] : snap.activation_gradients) total += bytes_of(t);
  return total;
}

void expect_same_stats(const TensorStats& got, const TensorStats& want, const std::string& what) {
  EXPECT_EQ(got.shape, want.shape) << what;
  EXPECT_EQ(got.numel, want.numel) << what;
  EXPECT_EQ(got.n, want.n) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.pos_inf, want.pos_inf) << what;
  EXPECT_EQ(got.min, want.min) << what;
  EXPECT_EQ(got.max, want.max) << what;
  EXPECT_EQ(got.mean, want.mean) << what;
}

TEST(SnapshotBudget, ATightBudgetKeepsTheLeadingSamplesAndWholeBatchStatistics) {
  auto whole = first_snapshot(0);
  ASSERT_TRUE(whole);
  const int64_t everything = batch_bytes(*whole);
  EXPECT_EQ(whole->batch_size, kBatch);
  EXPECT_EQ(whole->samples_kept, kBatch);
  EXPECT_FALSE(whole->trimmed());
  EXPECT_EQ(whole->held_bytes, everything);
  EXPECT_EQ(whole->full_bytes, everything);

  const int64_t budget = everything / 5;
  auto snap = first_snapshot(budget);
  ASSERT_TRUE(snap);
  ASSERT_TRUE(snap->trimmed());
  EXPECT_EQ(snap->batch_size, kBatch);
  EXPECT_GE(snap->samples_kept, 1);
  EXPECT_LT(snap->samples_kept, kBatch);
  EXPECT_EQ(snap->budget_bytes, budget);
  EXPECT_EQ(snap->held_bytes, batch_bytes(*snap));
  EXPECT_LE(snap->held_bytes, budget);
  EXPECT_EQ(snap->full_bytes, everything);
  EXPECT_GT(snap->parameter_bytes, 0) << "weights, their gradients and momentum are held whole";

  const int64_t k = snap->samples_kept;
  auto check = [&](const std::map<std::string, torch::Tensor>& got, const std::map<std::string, torch::Tensor>& full,
                   const std::map<std::string, TensorStats>& stats, const std::string& kind) {
    ASSERT_EQ(got.size(), full.size()) << kind;
    for (const auto& [name, t] : full) {
      ASSERT_TRUE(got.count(name)) << kind << " " << name;
      ASSERT_EQ(t.size(0), kBatch) << kind << " " << name << ": every tensor of this model is a batch tensor";
      EXPECT_TRUE(torch::equal(got.at(name), t.narrow(0, 0, k))) << kind << " " << name;
      ASSERT_TRUE(stats.count(name)) << kind << " " << name << " has no whole-batch statistics";
      expect_same_stats(stats.at(name), common::tensor_stats(t), kind + " " + name);
    }
  };
  check(snap->activations, whole->activations, snap->activation_stats, "activation");
  check(snap->activation_gradients, whole->activation_gradients, snap->activation_gradient_stats, "gradient");
  ASSERT_EQ(snap->inputs.size(), 1u);
  EXPECT_TRUE(torch::equal(snap->inputs[0], whole->inputs[0].narrow(0, 0, k)));
  EXPECT_TRUE(snap->inputs[0].is_same(snap->activations.at("input"))) << "an input is held once";
  for (const auto& [name, w] : whole->weights) EXPECT_TRUE(torch::equal(snap->weights.at(name), w)) << name;
}

// hold() keeps the held bytes and the bytes awaited for gradients as running
// totals; they stay equal to a walk over the copies through replacements,
// gradients arriving and a shrink.
TEST(SnapshotBudget, TheRunningTotalsStayEqualToTheCopiesTheyCount) {
  capture::TraceResult trace;
  auto& budget = trace.budget;
  budget.bytes = 8 * 16 * 4 * 8;  // eight whole [8, 16] float32 copies, counting those awaited
  budget.batch_size = 8;
  budget.kept = 8;
  auto expect_consistent = [&](const char* step) {
    EXPECT_EQ(budget.held_total, capture::held_bytes(trace)) << step;
    int64_t awaiting = 0;
    for (const auto& [_, bytes] : budget.awaiting_gradient) awaiting += bytes;
    EXPECT_EQ(budget.awaiting_total, awaiting) << step;
  };
  auto act = [&](const std::string& name, bool gradient_follows) {
    capture::hold(trace, trace.activations, trace.activation_stats, name, torch::randn({8, 16}), gradient_follows);
  };
  act("a", true);
  expect_consistent("an activation awaiting its gradient");
  act("a", true);
  expect_consistent("the same layer's later op replaced it");
  act("w", false);
  capture::hold(trace, trace.activations, trace.activation_stats, "bias", torch::randn({16}));
  expect_consistent("a tensor that is not the batch's");
  act("b", true);
  act("c", true);
  expect_consistent("more awaiting");
  EXPECT_EQ(budget.kept, 8);
  capture::hold(trace, trace.gradients, trace.gradient_stats, "c", torch::randn({8, 16}));
  expect_consistent("a gradient arrived");
  act("d", true);
  EXPECT_LT(budget.kept, 8) << "the budget was passed: the copies shrank";
  expect_consistent("after the shrink");
  EXPECT_LE(budget.held_total + budget.awaiting_total * budget.kept, budget.bytes);
}

TEST(SnapshotBudget, ALaterCaptureStartsAtTheFitAndStaysUnderTheBudget) {
  auto whole = first_snapshot(0, 2);
  const int64_t budget = batch_bytes(*whole) / 3;
  auto snap = first_snapshot(budget, 2);
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->position.batch_idx, 2);
  ASSERT_TRUE(snap->trimmed());
  EXPECT_LE(snap->held_bytes, budget);
  // The fit: one more sample per tensor would not have fitted.
  const int64_t per_sample = snap->full_bytes / kBatch;
  EXPECT_GT(snap->held_bytes + per_sample, budget);
  for (const auto& [name, t] : whole->activations) {
    EXPECT_TRUE(torch::equal(snap->activations.at(name), t.narrow(0, 0, snap->samples_kept))) << name;
  }
}

TEST(SnapshotBudget, ABudgetThatFitsKeepsEverythingBitIdentical) {
  auto whole = first_snapshot(0);
  auto snap = first_snapshot(StartOptions::kDefaultSnapshotBudget);
  ASSERT_TRUE(whole && snap);
  EXPECT_FALSE(snap->trimmed());
  EXPECT_EQ(snap->samples_kept, kBatch);
  EXPECT_TRUE(snap->activation_stats.empty());
  EXPECT_TRUE(snap->activation_gradient_stats.empty());
  auto same = [](const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [k, v] : a) {
      ASSERT_TRUE(b.count(k)) << k;
      EXPECT_EQ(v.sizes(), b.at(k).sizes()) << k;
      EXPECT_TRUE(torch::equal(v, b.at(k))) << k;
    }
  };
  same(snap->activations, whole->activations);
  same(snap->activation_gradients, whole->activation_gradients);
  same(snap->weights, whole->weights);
  same(snap->weight_gradients, whole->weight_gradients);
  EXPECT_EQ(snap->held_bytes, whole->held_bytes);
}

TEST(SnapshotBudget, ANegativeBudgetIsRefused) {
  test::Cnn model;
  try {
    start(model, StartOptions().snapshot_budget(-1));
    FAIL() << "a negative budget was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("snapshot_budget(-1)"), std::string::npos) << e.what();
  }
}

// The share of the step's memory (StartOptions::snapshot_share) binds where
// the byte budget would keep everything: a tiny share of this process's
// resident memory (hundreds of MiB) is a few KiB here, less than the batch.
TEST(SnapshotBudget, AShareOfTheStepsMemoryTrimsUnderAByteBudgetThatFits) {
  auto whole = first_snapshot(StartOptions::kDefaultSnapshotBudget, 0, /*share=*/0);
  ASSERT_TRUE(whole);
  EXPECT_FALSE(whole->trimmed());
  const double share = 1e-5;
  auto snap = first_snapshot(StartOptions::kDefaultSnapshotBudget, 1, share);
  ASSERT_TRUE(snap);
  ASSERT_TRUE(snap->trimmed()) << "held " << snap->held_bytes << " of " << snap->full_bytes;
  EXPECT_LT(snap->samples_kept, kBatch);
  // The budget the snapshot reports is the share's, under the byte budget,
  // and the copies kept to it.
  EXPECT_LT(snap->budget_bytes, StartOptions::kDefaultSnapshotBudget);
  EXPECT_GE(snap->budget_bytes, static_cast<int64_t>(share * (int64_t{16} << 20))) << "a share of at least 16 MiB";
  EXPECT_LE(snap->held_bytes, std::max(snap->budget_bytes, snap->full_bytes / kBatch));
  // A share of 1 is the byte budget again here.
  auto all = first_snapshot(StartOptions::kDefaultSnapshotBudget, 0, 1.0);
  ASSERT_TRUE(all);
  EXPECT_FALSE(all->trimmed());
}

TEST(SnapshotBudget, AShareOutsideZeroToOneIsRefused) {
  test::Cnn model;
  for (double share : {-0.1, 1.5, std::nan("")}) {
    try {
      start(model, StartOptions().snapshot_share(share));
      FAIL() << "snapshot_share(" << share << ") was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("snapshot_share("), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("between 0 and 1"), std::string::npos) << e.what();
    }
  }
}

// The checks see the whole batch: an Inf in a sample the budget left out
// still trips, at the layer it is in.
TEST(SnapshotBudget, AnInfInASampleLeftOutStillTrips) {
  torch::manual_seed(3);
  test::Cnn model;
  auto data = test::make_batches(3, kBatch, {1, 8, 8});
  data[1].first[kBatch - 1][0][2][2] = INFINITY;
  auto session = start(model, StartOptions().snapshot_budget(20000).debug(DebugSettings().capsule_dir("")));
  ASSERT_TRUE(serve(session, ServeOptions().port(0).open_browser(false).print_banner(false).mcp(false)));
  TrainingThread loop(session, [&] {
    torch::NoGradGuard no_grad;
    for (auto& batch : session.batches(data, "val")) model->forward(batch.first);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->position.batch_idx, 1);
  ASSERT_TRUE(snap->trimmed());
  ASSERT_LT(snap->samples_kept, kBatch - 1);
  EXPECT_FALSE(torch::isinf(snap->activations.at("input")).any().item<bool>()) << "the Inf's sample was left out";
  EXPECT_EQ(snap->activation_stats.at("input").pos_inf, 1);
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  bool input_row = false;
  for (const auto& row : error->layers) input_row = input_row || row.layer == "input";
  EXPECT_TRUE(input_row);
}

}  // namespace
}  // namespace nansense
