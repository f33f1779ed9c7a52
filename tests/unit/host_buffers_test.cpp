// Snapshot copies in recycled memory: a copy is exact, a buffer anyone holds
// is never written, a released one is written again instead of fresh memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "capture/host_buffers.h"
#include "capture/sample_budget.h"
#include "capture/tracer.h"
#include "numerics/bands.h"
#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using capture::HostBuffers;
using test::kWait;
using test::TrainingThread;

uintptr_t address(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

TEST(HostBuffers, CopiesAreExactWithTheLayoutOfACopyToTheCpu) {
  HostBuffers pool;
  const auto x = torch::randn({4, 3, 5, 5});
  const std::vector<torch::Tensor> sources = {
      x,
      x.contiguous(at::MemoryFormat::ChannelsLast),  // dense, other strides: kept
      x.transpose(0, 1),                             // dense, permuted: kept
      x.narrow(3, 1, 3),                             // not dense: contiguous
      torch::arange(10, torch::kInt64),
      torch::tensor(2.5),  // 0-dim
      x.to(torch::kBFloat16),
      x.select(0, 2),                                                  // dense, from an offset into the storage
      x.gt(0),                                                         // bool
      torch::randn({3, 4}, torch::kComplexFloat).conj(),               // a conjugate view: resolved
      torch::imag(torch::randn({3, 4}, torch::kComplexFloat).conj()),  // a negative view: resolved
  };
  ASSERT_TRUE(sources[sources.size() - 2].is_conj());
  ASSERT_TRUE(sources.back().is_neg());
  for (const auto& t : sources) {
    const auto want = t.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
    const auto got = pool.copy(t);
    EXPECT_TRUE(torch::equal(got, t));
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_EQ(got.strides(), want.strides());
    EXPECT_EQ(got.scalar_type(), t.scalar_type());
    EXPECT_NE(got.data_ptr(), t.data_ptr());
    EXPECT_FALSE(got.requires_grad());
    EXPECT_FALSE(got.is_conj() || got.is_neg());
  }
  // A tensor that requires grad is copied detached.
  const auto w = torch::randn({3, 3}, torch::requires_grad());
  const auto copied = pool.copy(w);
  EXPECT_FALSE(copied.requires_grad());
  EXPECT_TRUE(torch::equal(copied, w.detach()));
  std::optional<double> sum;
  const auto summed = pool.copy(w, &sum);
  EXPECT_FALSE(summed.requires_grad());
  EXPECT_TRUE(sum.has_value());
  // Copied in inference mode (a caller's torch.inference_mode()), a copy is
  // a normal tensor: written outside it, it counts its versions.
  torch::Tensor normal;
  {
    c10::InferenceMode inference;
    normal = pool.copy(torch::randn({2, 3}), &sum);
  }
  EXPECT_FALSE(normal.is_inference());
  const auto version = normal._version();
  normal.add_(1);
  EXPECT_EQ(normal._version(), version + 1);
}

// The numerical checks' |x| sum, taken as a dense float32 tensor is copied:
// the copy is bit for bit (NaN payloads, -0) and the sum the checks' own.
TEST(HostBuffers, ACopyCanCarryItsAbsSumTakenAsItIsWritten) {
  HostBuffers pool;
  auto x = torch::randn({3, 5, 7, 11});  // 1155 values: blocks of 256 and a tail
  x.view(-1)[0] = -0.0;
  x.view(-1)[300] = 1e30;
  std::vector<torch::Tensor> sources = {x, x.contiguous(at::MemoryFormat::ChannelsLast), x.transpose(0, 2)};
  auto payload = x.clone();
  reinterpret_cast<uint32_t*>(payload.data_ptr<float>())[17] = 0x7fc12345u;    // a NaN with a payload
  reinterpret_cast<uint32_t*>(payload.data_ptr<float>())[1000] = 0xff800000u;  // -inf
  reinterpret_cast<uint32_t*>(payload.data_ptr<float>())[1100] = 0x7f812345u;  // a signalling NaN
  sources.push_back(payload);
  for (const auto& t : sources) {
    std::optional<double> sum;
    const auto got = pool.copy(t, &sum);
    ASSERT_TRUE(sum.has_value());
    EXPECT_EQ(got.strides(), t.strides());
    EXPECT_EQ(std::memcmp(got.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()) * sizeof(float)), 0);
    const double want = numerics::abs_sums({t})[0];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(*sum));
    } else {
      EXPECT_EQ(*sum, want);  // the same lanes in the same order: equal, not close
    }
  }
  // Anything else is copied as before, with no sum.
  for (const auto& t : {x.narrow(3, 1, 3), x.to(torch::kDouble), x.to(torch::kBFloat16)}) {
    std::optional<double> sum = 1.0;
    const auto got = pool.copy(t, &sum);
    EXPECT_FALSE(sum.has_value());
    EXPECT_TRUE(torch::equal(got, t));
  }
}

// A capture's copy keeps its sum for the checks only while it is unchanged.
TEST(HostBuffers, ACapturesCopyKeepsItsSumUntilItIsWritten) {
  capture::TraceResult trace;
  trace.buffers = std::make_shared<HostBuffers>();
  const auto x = torch::randn({4, 8});
  capture::hold(trace, trace.activations, trace.activation_stats, "fc", x, /*gradient_follows=*/false);
  const auto copy = trace.activations.at("fc");
  ASSERT_EQ(trace.copied_abs_sum(copy), std::optional<double>(numerics::abs_sums({x})[0]));
  EXPECT_FALSE(trace.copied_abs_sum(x).has_value()) << "the original is not the copy";
  copy.mul_(2);
  EXPECT_FALSE(trace.copied_abs_sum(copy).has_value()) << "written since: summed again";
}

TEST(HostBuffers, AHeldCopyIsNeverWrittenAReleasedOneIsReused) {
  HostBuffers pool;
  const auto a = torch::randn({64, 16});
  const auto b = torch::randn({64, 16});
  auto first = pool.copy(a);
  const auto first_at = address(first);
  // Held: the next copy of the same size goes elsewhere and the first keeps its values.
  auto second = pool.copy(b);
  EXPECT_NE(address(second), first_at);
  EXPECT_TRUE(torch::equal(first, a));
  EXPECT_TRUE(torch::equal(second, b));
  // Released: its memory takes the next copy.
  first = torch::Tensor();
  auto third = pool.copy(b);
  EXPECT_EQ(address(third), first_at);
  EXPECT_TRUE(torch::equal(third, b));
  EXPECT_TRUE(torch::equal(second, b));
}

TEST(HostBuffers, AViewOfACopyKeepsItsBufferHeld) {
  HostBuffers pool;
  const auto a = torch::randn({8, 8});
  auto copy = pool.copy(a);
  auto row = copy[3];  // shares the storage: a viewer's slice
  const auto view = copy.view({64});
  copy = torch::Tensor();
  const auto row_before = row.clone();
  auto next = pool.copy(torch::zeros({8, 8}));
  EXPECT_NE(next.data_ptr(), view.data_ptr());
  EXPECT_TRUE(torch::equal(row, row_before));
  EXPECT_TRUE(torch::equal(view, a.view({64})));
}

TEST(HostBuffers, CopiesFromOtherThreadsNeverShareABuffer) {
  HostBuffers pool;
  constexpr int kThreads = 4, kCopies = 200;
  std::vector<std::vector<torch::Tensor>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kCopies; ++k) {
        auto c = pool.copy(torch::full({32}, static_cast<float>(i * kCopies + k)));
        if (k % 2 == 0) kept[static_cast<size_t>(i)].push_back(c);  // held; the others released at once
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    for (size_t k = 0; k < kept[static_cast<size_t>(i)].size(); ++k) {
      const float want = static_cast<float>(i * kCopies + static_cast<int>(k) * 2);
      EXPECT_TRUE(kept[static_cast<size_t>(i)][k].eq(want).all().item<bool>()) << i << " " << k;
    }
  }
}

TEST(HostBuffers, BuffersNoCaptureTookForTwoCapturesAreLetGo) {
  HostBuffers pool;
  { auto copy = pool.copy(torch::randn({1024})); }
  const int64_t one = 1024 * 4;
  EXPECT_EQ(pool.bytes(), one);
  pool.end_capture();  // taken in this capture
  pool.end_capture();  // not taken in the next one
  EXPECT_EQ(pool.bytes(), one);
  pool.end_capture();  // nor in the one after: let go
  EXPECT_EQ(pool.bytes(), 0);
  // Taken every other capture (the published snapshot's and the next
  // capture's buffers alternate): kept.
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 0) pool.copy(torch::randn({1024}));
    pool.end_capture();
    EXPECT_EQ(pool.bytes(), one) << i;
  }
}

// Trains a TwoLayer in step mode: every batch is captured and published.
TEST(HostBuffers, ASessionsCapturesReuseTheMemoryOfSnapshotsNoOneHolds) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto data = test::make_batches(8);
  auto session = start(model, StartOptions().optimizer(&opt));
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(data, "train")) test::train_step(model, opt, b.first, b.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  // Snapshot 1 is dropped here; snapshot 2 is held throughout.
  uintptr_t first_at = address(session.snapshot()->activations.at("fc1"));
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  const auto held = session.snapshot();
  ASSERT_EQ(held->sequence, 2u);
  const auto held_values = held->activations.at("fc1").clone();
  const auto held_weights = held->weights.at("fc1.weight").clone();
  const auto held_momentum = held->optimizer_state.at("fc1.weight").at("momentum_buffer").clone();
  const uintptr_t held_at = address(held->activations.at("fc1"));
  EXPECT_NE(held_at, first_at);
  // Snapshot 3 writes into snapshot 1's memory; 4 cannot take 2's (held)
  // nor 3's (published) and gets fresh memory.
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  EXPECT_EQ(address(session.snapshot()->activations.at("fc1")), first_at);
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  const auto fourth = session.snapshot();
  EXPECT_NE(address(fourth->activations.at("fc1")), held_at);
  EXPECT_NE(address(fourth->activations.at("fc1")), first_at);
  // The held snapshot kept its own values all along.
  EXPECT_TRUE(torch::equal(held->activations.at("fc1"), held_values));
  EXPECT_TRUE(torch::equal(held->weights.at("fc1.weight"), held_weights));
  EXPECT_TRUE(torch::equal(held->optimizer_state.at("fc1.weight").at("momentum_buffer"), held_momentum));
  session.detach();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
}

}  // namespace
}  // namespace nansense
