// The one training state: saved and restored into fresh objects it continues
// training bit for bit (two optimizers, a schedule, buffers, dropout's RNG),
// for every optimizer LibTorch ships; a state for another setup is refused
// naming the first difference, with nothing changed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nansense/time_travel.h"
#include "state/fingerprint.h"
#include "state/training_state.h"
#include "test_models.h"

namespace nansense::state {
namespace {

using test::message_of;

// Buffers (BatchNorm's running statistics) and dropout (the CPU generator).
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden = 8, bool norm = true)
      : a(register_module("a", torch::nn::Linear(4, hidden))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        b(register_module("b", torch::nn::Linear(hidden, 3))) {
    if (norm) bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = a(x);
    if (bn) x = bn(x);
    return b(drop(torch::relu(x)));
  }
  torch::nn::Linear a;
  torch::nn::Dropout drop;
  torch::nn::Linear b;
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> params_except(Net& net, const std::string& prefix, bool keep) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net->named_parameters()) {
    if ((p.key().rfind(prefix, 0) == 0) == keep) out.push_back(p.value());
  }
  return out;
}

// A GAN-like split: Adam trains everything but `b`, SGD with momentum trains
// `b`; a StepLR halves Adam's rate every second step.
struct Training {
  explicit Training(int64_t hidden = 8)
      : net(hidden),
        adam(params_except(net, "b.", false), torch::optim::AdamOptions(0.01)),
        sgd(params_except(net, "b.", true), torch::optim::SGDOptions(0.05).momentum(0.9)),
        step_lr(adam, 2, 0.5),
        adapter(adapt_scheduler(step_lr)) {}
  LiveState live() { return {net.ptr().get(), {&adam, &sgd}, adapter.get()}; }
  // One batch and one schedule step; returns the loss.
  float step(const test::Batch& batch) {
    adam.zero_grad();
    sgd.zero_grad();
    auto loss = torch::cross_entropy_loss(net->forward(batch.first), batch.second);
    loss.backward();
    adam.step();
    sgd.step();
    step_lr.step();
    return loss.item<float>();
  }
  Net net;
  torch::optim::Adam adam;
  torch::optim::SGD sgd;
  torch::optim::StepLR step_lr;
  std::shared_ptr<SchedulerAdapter> adapter;
};

std::vector<float> flat(torch::nn::Module& m) {
  std::vector<float> out;
  for (const auto& t : m.parameters()) {
    auto f = t.detach().flatten().contiguous();
    out.insert(out.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  for (const auto& t : m.buffers()) {
    auto f = t.detach().to(torch::kFloat).flatten().contiguous();
    out.insert(out.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  return out;
}

TEST(TrainingState, TwoOptimizersAndASchedulerContinueBitForBitInFreshObjects) {
  torch::manual_seed(1);
  const auto batches = test::make_batches(8, 6);
  Training original;
  for (int i = 0; i < 3; ++i) original.step(batches[i]);
  original.net->eval();  // the mode is part of the state...
  StateFile file{std::string(kCheckpointKind)};
  save_state(original.live(), file);
  const std::string bytes = encode(file);
  original.net->train();  // ...and is restored below
  std::vector<float> expected;
  for (int i = 3; i < 8; ++i) expected.push_back(original.step(batches[i]));

  torch::manual_seed(77);  // other weights, another generator state
  Training fresh;
  fresh.step(batches[0]);  // optimizer state that the restore must replace
  restore_state(decode(bytes, "mem"), fresh.live());
  EXPECT_FALSE(fresh.net->is_training());
  EXPECT_DOUBLE_EQ(fresh.adam.param_groups()[0].options().get_lr(), 0.005) << "the rate StepLR had set";
  fresh.net->train();
  std::vector<float> replayed;
  for (int i = 3; i < 8; ++i) replayed.push_back(fresh.step(batches[i]));
  EXPECT_EQ(replayed, expected);
  EXPECT_EQ(flat(*fresh.net), flat(*original.net));
  EXPECT_DOUBLE_EQ(fresh.adam.param_groups()[0].options().get_lr(), original.adam.param_groups()[0].options().get_lr());
}

// One optimizer of each kind LibTorch ships, saved mid-training and restored
// into a fresh copy: the next steps match bit for bit.
TEST(TrainingState, EveryLibTorchOptimizerRoundTrips) {
  using Make = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
  namespace optim = torch::optim;
  const std::vector<std::pair<std::string, Make>> kinds = {
      {"SGD",
       [](auto p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9).nesterov(true)); }},
      {"Adam", [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01).amsgrad(true)); }},
      {"AdamW", [](auto p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.01)); }},
      {"RMSprop",
       [](auto p) {
         return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
       }},
      {"Adagrad", [](auto p) { return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions(0.1)); }},
      {"LBFGS",
       [](auto p) { return std::make_unique<optim::LBFGS>(p, optim::LBFGSOptions(0.5).max_iter(3).history_size(4)); }},
  };
  torch::manual_seed(2);
  const auto batches = test::make_batches(6, 6);
  for (const auto& [name, make] : kinds) {
    SCOPED_TRACE(name);
    auto run = [&](Net& net, torch::optim::Optimizer& opt, int from, int to) {
      std::vector<float> losses;
      for (int i = from; i < to; ++i) {
        auto loss = opt.step([&] {
          opt.zero_grad();
          auto l = torch::cross_entropy_loss(net->forward(batches[i].first), batches[i].second);
          l.backward();
          return l;
        });
        losses.push_back(loss.item<float>());
      }
      return losses;
    };
    torch::manual_seed(3);
    Net net(8, /*norm=*/false);
    auto opt = make(net->parameters());
    run(net, *opt, 0, 3);
    StateFile file{std::string(kCheckpointKind)};
    save_state({net.ptr().get(), {opt.get()}, nullptr}, file);
    const auto expected = run(net, *opt, 3, 6);

    torch::manual_seed(4);
    Net other(8, /*norm=*/false);
    auto other_opt = make(other->parameters());
    restore_state(file, {other.ptr().get(), {other_opt.get()}, nullptr});
    EXPECT_EQ(run(other, *other_opt, 3, 6), expected);
    EXPECT_EQ(flat(*other), flat(*net));
  }
}

TEST(TrainingState, AStateForAnotherSetupIsRefusedNamingTheFirstDifference) {
  torch::manual_seed(5);
  Training saved;
  saved.step(test::make_batches(1, 6)[0]);
  StateFile file{std::string(kCheckpointKind)};
  save_state(saved.live(), file);
  auto mismatch = [&](const LiveState& live, Parts parts = {}) { return check_state(file, live, "the cache", parts); };

  Training same;
  EXPECT_EQ(mismatch(same.live()), "");
  Training wider(16);
  EXPECT_EQ(mismatch(wider.live()), "parameter 'a.weight' has shape [8, 4] in the cache but [16, 4] in this model");

  Net plain(8, /*norm=*/false);
  EXPECT_EQ(mismatch({plain.ptr().get(), {}, nullptr}), "the cache has parameter 'bn.weight' that this model lacks");

  EXPECT_EQ(mismatch({same.net.ptr().get(), {&same.sgd, &same.adam}, same.adapter.get()}),
            "optimizer #0 is torch::optim::Adam in the cache but torch::optim::SGD was given (optimizers are "
            "matched in the order given)");
  EXPECT_EQ(mismatch({same.net.ptr().get(), {&same.adam}, same.adapter.get()}),
            "the cache holds the state of 2 optimizers (torch::optim::Adam, torch::optim::SGD) but 1 was given "
            "(torch::optim::Adam)");
  torch::optim::Adam adam_all(same.net->parameters(), torch::optim::AdamOptions(0.01));
  EXPECT_EQ(mismatch({same.net.ptr().get(), {&adam_all, &same.sgd}, same.adapter.get()}),
            "optimizer #0's param groups hold [4] parameters in the cache but [6] in the one given");
  EXPECT_EQ(mismatch({same.net.ptr().get(), {&same.adam, &same.sgd}, nullptr}),
            "the scheduler is torch::optim::StepLR in the cache but none was given");
  // A replay that leaves the optimizers and the schedule alone checks the rest.
  Parts model_only;
  model_only.optimizers = model_only.scheduler = false;
  EXPECT_EQ(mismatch({same.net.ptr().get(), {}, nullptr}, model_only), "");

  // Refused whole: nothing of the live objects changes.
  const auto before = flat(*wider.net);
  auto why = message_of<StateError>([&] { restore_state(file, wider.live()); });
  EXPECT_NE(why.find("was saved for another setup: parameter 'a.weight' has shape [8, 4]"), std::string::npos) << why;
  EXPECT_EQ(flat(*wider.net), before);
}

}  // namespace
}  // namespace nansense::state
