// The engine on a CUDA device: a model that trains on the GPU is traced,
// published as host copies, checked by the guard (which names the producer
// on the device), and its state round-trips through a checkpoint. Built
// always; registered with ctest only in a NANSENSE_CUDA build
// (scripts/gpu-check), and each test skips where no GPU is visible.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::kWait;
using test::TrainingThread;

#define REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible"

std::vector<test::Batch> on_device(std::vector<test::Batch> batches, torch::Device device) {
  for (auto& [x, y] : batches) {
    x = x.to(device);
    y = y.to(device);
  }
  return batches;
}

TEST(Cuda, SnapshotOfAGpuModelIsAHostCopyOfItsTensors) {
  REQUIRE_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(0);
  test::Cnn model;
  model->to(gpu);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  auto data = on_device(test::make_batches(3, 4, {1, 8, 8}), gpu);
  auto session = start(model, StartOptions().optimizer(&opt).debug(test::quiet_checks()));
  ASSERT_TRUE(serve(session, test::quiet_server()));
  TrainingThread loop(session, test::train_phase(session, model, opt, data));
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  for (const auto& name : {"input", "conv", "fc"}) {
    ASSERT_TRUE(snap->activations.count(name)) << name;
    EXPECT_TRUE(snap->activations.at(name).device().is_cpu()) << name << " is not a host copy";
  }
  EXPECT_TRUE(torch::equal(snap->activations.at("input"), data[0].first.cpu()));
  ASSERT_TRUE(snap->activation_gradients.count("conv"));
  EXPECT_TRUE(snap->activation_gradients.at("conv").device().is_cpu());
  // The weights as the step left them, copied from the device.
  EXPECT_TRUE(torch::equal(snap->weights.at("fc.weight"), model->fc->weight.detach().cpu()));
  EXPECT_TRUE(model->fc->weight.device().is_cuda()) << "the model must stay on the GPU";
  session.detach();
  loop.join();
  EXPECT_EQ(session.state(), RunState::kFinished);
}

TEST(Cuda, GuardNamesTheProducerOfANanOnTheGpu) {
  REQUIRE_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(1);
  test::TwoLayer model;
  model->to(gpu);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  auto data = on_device(test::make_batches(4, 4), gpu);
  const auto dir = (std::filesystem::temp_directory_path() / ("nansense-cuda-" + std::to_string(::getpid()))).string();
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir(dir)));
  ASSERT_TRUE(serve(session, test::quiet_server()));
  session.detach();
  TrainingThread loop(session, [&] {
    int i = 0;
    for (auto& batch : session.batches(data, "train")) {
      opt.zero_grad();
      auto out = model->forward(batch.first);
      // Batch 2: log of a negative number on the device.
      if (i++ == 2) out = torch::log(out - out.abs().max() - 1);
      torch::cross_entropy_loss(out, batch.second).backward();
      opt.step();
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->position.batch_idx, 2);
  ASSERT_TRUE(error->root_cause);
  ASSERT_EQ(error->root_cause->status, RootCause::Status::kFound) << error->root_cause->summary;
  EXPECT_EQ(error->root_cause->producer->op, "aten::log");
  EXPECT_TRUE(model->fc1->weight.device().is_cuda());
  session.detach();
  loop.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nansense
