// A served training loop of a small CNN (conv 1->4 3x3, relu, pool, fc) on
// [6, 1, 8, 8] images, "conv" and "fc" watched, two epochs of train batches,
// pausing at the first: the fixture of the tests about pictures of a conv
// layer (patches, recordings).
#pragma once

#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include "integration/training_fixture.h"
#include "unit/test_models.h"

namespace nansense::testing {

class CnnServerTest : public TrainingServerTest {
 protected:
  void start_cnn(int train_batches) {
    torch::manual_seed(0);
    cnn_ = nansense::test::Cnn();
    sgd_ = std::make_unique<torch::optim::SGD>(cnn_->parameters(), torch::optim::SGDOptions(0.05));
    for (int i = 0; i < train_batches; ++i) data_.emplace_back(torch::rand({6, 1, 8, 8}), torch::randint(3, {6}));
    session_ = std::make_unique<nansense::Session>(
        nansense::start(cnn_, nansense::StartOptions()
                                  .epochs(2)
                                  .phases(nansense::PhaseCounts{{"train", train_batches}})
                                  .watch({"conv", "fc"})
                                  .optimizer(sgd_.get())
                                  .debug(nansense::test::quiet_checks())));
    ASSERT_TRUE(nansense::serve(*session_, nansense::ServeOptions().port(0).open_browser(false).print_banner(false)));
    port_ = port_of(session_->url());
    trainer_ = std::thread([this] {
      try {
        for (int e = 0; e < 2; ++e) {
          for (auto& batch : session_->batches(data_, "train")) {
            nansense::test::train_step(cnn_, *sgd_, batch.first, batch.second);
          }
        }
        session_->close();
      } catch (const std::exception&) {
      }
    });
  }
  void step() { ASSERT_EQ(post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).json()["state"], "paused"); }

  nansense::test::Cnn cnn_{nullptr};
  std::unique_ptr<torch::optim::SGD> sgd_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> data_;
};

}  // namespace nansense::testing
