// Optimizer state and hyperparameters read back against the optimizer's own state.
#include "capture/optimizer_state.h"
#include "session/session_access.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <future>
#include <set>
#include <string>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using capture::read_optimizer;
using test::kWait;
using test::TrainingThread;

const std::vector<std::string> kParams{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"};

// Runs `steps` optimizer steps of a TwoLayer on random batches.
void train(test::TwoLayer& model, torch::optim::Optimizer& opt, int steps = 3) {
  for (const auto& [x, y] : test::make_batches(steps)) test::train_step(model, opt, x, y);
}

template <class ParamState>
const ParamState& state_of(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  // Keyed by the parameter's TensorImpl address (LibTorch 2.2+).
  auto it = opt.state().find(static_cast<void*>(p.unsafeGetTensorImpl()));
  if (it == opt.state().end()) throw std::runtime_error("the optimizer has no state for this parameter");
  return static_cast<const ParamState&>(*it->second);
}

std::set<std::string> keys_of(const std::map<std::string, torch::Tensor>& m) {
  std::set<std::string> out;
  for (const auto& [k, v] : m) out.insert(k);
  return out;
}

// The view's tensor equals `want` and is a CPU copy of it, not an alias.
void expect_copy_of(const capture::OptimizerView& view, const std::string& param, const std::string& key,
                    const torch::Tensor& want) {
  ASSERT_TRUE(view.state.count(param)) << param;
  const auto& state = view.state.at(param);
  auto it = state.find(key);
  ASSERT_NE(it, state.end()) << param << " has no '" << key << "'";
  ASSERT_TRUE(want.defined()) << param << "." << key;
  EXPECT_TRUE(torch::equal(it->second, want)) << param << "." << key;
  EXPECT_TRUE(it->second.device().is_cpu());
  EXPECT_NE(it->second.data_ptr(), want.data_ptr()) << param << "." << key << " aliases live optimizer state";
}

void expect_step(const capture::OptimizerView& view, const std::string& param, int64_t step) {
  ASSERT_TRUE(view.state.count(param) && view.state.at(param).count("step")) << param;
  const auto& t = view.state.at(param).at("step");
  EXPECT_EQ(t.dim(), 0) << "scalars are 0-dim tensors";
  EXPECT_EQ(t.item<int64_t>(), step) << param;
}

TEST(OptimizerState, SgdMomentumBuffer) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-4));
  train(model, opt);
  auto view = read_optimizer(opt, *model);

  for (const auto& p : model->named_parameters()) {
    SCOPED_TRACE(p.key());
    EXPECT_EQ(keys_of(view.state.at(p.key())), (std::set<std::string>{"momentum_buffer"}));
    expect_copy_of(view, p.key(), "momentum_buffer",
                   state_of<torch::optim::SGDParamState>(opt, p.value()).momentum_buffer());
    const auto& h = view.hyperparams.at(p.key());
    EXPECT_DOUBLE_EQ(h.at("lr"), 0.05);
    EXPECT_DOUBLE_EQ(h.at("momentum"), 0.9);
    EXPECT_DOUBLE_EQ(h.at("dampening"), 0.0);
    EXPECT_DOUBLE_EQ(h.at("weight_decay"), 1e-4);
    EXPECT_DOUBLE_EQ(h.at("nesterov"), 1.0);
  }
}

TEST(OptimizerState, SgdWithoutMomentumHasNoState) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  train(model, opt);
  auto view = read_optimizer(opt, *model);
  for (const auto& [name, state] : view.state) EXPECT_TRUE(state.empty()) << name;
  EXPECT_EQ(view.hyperparams.size(), 4u) << "hyperparameters are reported even without state";
  EXPECT_DOUBLE_EQ(view.hyperparams.at("fc2.weight").at("momentum"), 0.0);
}

template <class Optim, class Options, class ParamState>
void check_adam_like(bool amsgrad) {
  SCOPED_TRACE(amsgrad ? "amsgrad" : "plain");
  test::TwoLayer model;
  Optim opt(model->parameters(),
            Options(2e-3).betas(std::make_tuple(0.8, 0.95)).eps(1e-7).weight_decay(0.01).amsgrad(amsgrad));
  train(model, opt, 3);
  auto view = read_optimizer(opt, *model);

  ASSERT_EQ(view.state.size(), 4u);
  for (const auto& p : model->named_parameters()) {
    SCOPED_TRACE(p.key());
    const auto& own = state_of<ParamState>(opt, p.value());
    std::set<std::string> want{"step", "exp_avg", "exp_avg_sq"};
    if (amsgrad) want.insert("max_exp_avg_sq");
    EXPECT_EQ(keys_of(view.state.at(p.key())), want);
    expect_step(view, p.key(), 3);
    EXPECT_EQ(own.step(), 3);
    expect_copy_of(view, p.key(), "exp_avg", own.exp_avg());
    expect_copy_of(view, p.key(), "exp_avg_sq", own.exp_avg_sq());
    if (amsgrad) expect_copy_of(view, p.key(), "max_exp_avg_sq", own.max_exp_avg_sq());

    const auto& h = view.hyperparams.at(p.key());
    EXPECT_DOUBLE_EQ(h.at("lr"), 2e-3);
    EXPECT_DOUBLE_EQ(h.at("beta1"), 0.8);
    EXPECT_DOUBLE_EQ(h.at("beta2"), 0.95);
    EXPECT_DOUBLE_EQ(h.at("eps"), 1e-7);
    EXPECT_DOUBLE_EQ(h.at("weight_decay"), 0.01);
    EXPECT_DOUBLE_EQ(h.at("amsgrad"), amsgrad ? 1.0 : 0.0);
  }
}

TEST(OptimizerState, Adam) {
  check_adam_like<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(false);
  check_adam_like<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(true);
}

TEST(OptimizerState, AdamW) {
  check_adam_like<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(false);
  check_adam_like<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(true);
}

TEST(OptimizerState, RmsProp) {
  {
    SCOPED_TRACE("no momentum");
    test::TwoLayer model;
    torch::optim::RMSprop opt(model->parameters(), torch::optim::RMSpropOptions(0.01).alpha(0.9));
    train(model, opt, 2);
    auto view = read_optimizer(opt, *model);
    for (const auto& p : model->named_parameters()) {
      EXPECT_EQ(keys_of(view.state.at(p.key())), (std::set<std::string>{"step", "square_avg"})) << p.key();
      expect_copy_of(view, p.key(), "square_avg",
                     state_of<torch::optim::RMSpropParamState>(opt, p.value()).square_avg());
      expect_step(view, p.key(), 2);
      EXPECT_DOUBLE_EQ(view.hyperparams.at(p.key()).at("alpha"), 0.9);
      EXPECT_DOUBLE_EQ(view.hyperparams.at(p.key()).at("momentum"), 0.0);
    }
  }
  {
    SCOPED_TRACE("momentum, centered");
    test::TwoLayer model;
    torch::optim::RMSprop opt(model->parameters(),
                              torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true).eps(1e-6));
    train(model, opt, 3);
    auto view = read_optimizer(opt, *model);
    for (const auto& p : model->named_parameters()) {
      const auto& own = state_of<torch::optim::RMSpropParamState>(opt, p.value());
      EXPECT_EQ(keys_of(view.state.at(p.key())),
                (std::set<std::string>{"step", "square_avg", "momentum_buffer", "grad_avg"}))
          << p.key();
      expect_copy_of(view, p.key(), "square_avg", own.square_avg());
      expect_copy_of(view, p.key(), "momentum_buffer", own.momentum_buffer());
      expect_copy_of(view, p.key(), "grad_avg", own.grad_avg());
      const auto& h = view.hyperparams.at(p.key());
      EXPECT_DOUBLE_EQ(h.at("momentum"), 0.5);
      EXPECT_DOUBLE_EQ(h.at("centered"), 1.0);
      EXPECT_DOUBLE_EQ(h.at("eps"), 1e-6);
    }
  }
}

TEST(OptimizerState, Adagrad) {
  test::TwoLayer model;
  torch::optim::Adagrad opt(model->parameters(),
                            torch::optim::AdagradOptions(0.05).lr_decay(0.01).initial_accumulator_value(0.1));
  train(model, opt, 3);
  auto view = read_optimizer(opt, *model);
  for (const auto& p : model->named_parameters()) {
    SCOPED_TRACE(p.key());
    const auto& own = state_of<torch::optim::AdagradParamState>(opt, p.value());
    EXPECT_EQ(keys_of(view.state.at(p.key())), (std::set<std::string>{"step", "sum"}));
    expect_copy_of(view, p.key(), "sum", own.sum());
    expect_step(view, p.key(), 3);
    const auto& h = view.hyperparams.at(p.key());
    EXPECT_DOUBLE_EQ(h.at("lr"), 0.05);
    EXPECT_DOUBLE_EQ(h.at("lr_decay"), 0.01);
    EXPECT_DOUBLE_EQ(h.at("initial_accumulator_value"), 0.1);
  }
}

TEST(OptimizerState, SchedulerChangedLearningRateIsReflected) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  torch::optim::StepLR scheduler(opt, /*step_size=*/1, /*gamma=*/0.5);
  EXPECT_DOUBLE_EQ(read_optimizer(opt, *model).hyperparams.at("fc1.weight").at("lr"), 0.1);
  train(model, opt, 1);
  // LibTorch's StepLR leaves its first step() alone (Python's constructor step).
  for (int i = 0; i < 3; ++i) scheduler.step();
  const double lr = opt.param_groups()[0].options().get_lr();
  ASSERT_DOUBLE_EQ(lr, 0.025);
  auto view = read_optimizer(opt, *model);
  for (const auto& name : kParams) EXPECT_DOUBLE_EQ(view.hyperparams.at(name).at("lr"), lr) << name;
}

TEST(OptimizerState, ParamGroupsKeepTheirOwnHyperparameters) {
  test::TwoLayer model;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(model->fc1->parameters(), std::make_unique<torch::optim::AdamOptions>(1e-2));
  groups.emplace_back(model->fc2->parameters(), std::make_unique<torch::optim::AdamOptions>(1e-4));
  torch::optim::Adam opt(std::move(groups), torch::optim::AdamOptions(1e-3));
  train(model, opt, 1);
  auto view = read_optimizer(opt, *model);
  EXPECT_DOUBLE_EQ(view.hyperparams.at("fc1.weight").at("lr"), 1e-2);
  EXPECT_DOUBLE_EQ(view.hyperparams.at("fc1.bias").at("lr"), 1e-2);
  EXPECT_DOUBLE_EQ(view.hyperparams.at("fc2.weight").at("lr"), 1e-4);
  expect_step(view, "fc2.bias", 1);
}

TEST(OptimizerState, ParametersOutsideTheModelAreSkipped) {
  test::TwoLayer model;
  auto extra = torch::zeros({3}, torch::requires_grad());
  auto params = model->parameters();
  params.push_back(extra);
  torch::optim::Adam opt(params, 1e-3);
  opt.zero_grad();
  (torch::cross_entropy_loss(model->forward(torch::randn({2, 4})), torch::tensor({0, 1}, torch::kLong)) + extra.sum())
      .backward();
  opt.step();
  auto view = read_optimizer(opt, *model);
  EXPECT_EQ(view.state.size(), 4u);
  EXPECT_EQ(view.hyperparams.size(), 4u);
}

TEST(OptimizerState, UnknownOptimizerReportsOnlyTheLearningRate) {
  test::TwoLayer model;
  torch::optim::LBFGS opt(model->parameters(), torch::optim::LBFGSOptions(0.5));
  auto view = read_optimizer(opt, *model);
  ASSERT_EQ(view.hyperparams.size(), 4u);
  for (const auto& [name, h] : view.hyperparams) {
    EXPECT_EQ(h.size(), 1u) << name;
    EXPECT_DOUBLE_EQ(h.at("lr"), 0.5) << name;
  }
}

TEST(OptimizerState, SnapshotCarriesStateAtThePausedBatch) {
  test::TwoLayer model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-2).betas(std::make_tuple(0.85, 0.99)));
  torch::optim::StepLR scheduler(opt, 1, 0.5);
  auto data = test::make_batches(4);
  std::vector<double> lrs;  // the lr each batch ended with, per the optimizer itself
  auto session = start(model, StartOptions().optimizer(&opt).scheduler(&scheduler));
  TrainingThread thread(session, [&] {
    for (auto& b : session.batches(data, "train")) {
      test::train_step(model, opt, b.first, b.second);
      scheduler.step();
      lrs.push_back(opt.param_groups()[0].options().get_lr());
    }
    session.close();
  });

  // The optimizer's own state, read where it lives: on the paused training thread.
  auto own_state = [&] {
    std::promise<std::map<std::string, torch::Tensor>> p;
    auto f = p.get_future();
    detail::core_of(session)->control().post([&] {
      std::map<std::string, torch::Tensor> out;
      for (const auto& q : model->named_parameters()) {
        out[q.key()] = state_of<torch::optim::AdamParamState>(opt, q.value()).exp_avg_sq().clone();
      }
      p.set_value(std::move(out));
    });
    EXPECT_EQ(f.wait_for(kWait), std::future_status::ready);
    return f.get();
  };

  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto first = session.snapshot();
  ASSERT_TRUE(first);
  EXPECT_EQ(keys_of(first->weights).size(), 4u);
  ASSERT_EQ(first->optimizer_state.size(), 4u);
  auto own = own_state();
  for (const auto& name : kParams) {
    SCOPED_TRACE(name);
    const auto& state = first->optimizer_state.at(name);
    EXPECT_EQ(state.at("step").item<int64_t>(), 1);
    EXPECT_TRUE(torch::equal(state.at("exp_avg_sq"), own.at(name)));
    const auto& h = first->optimizer_hyperparams.at(name);
    EXPECT_DOUBLE_EQ(h.at("beta1"), 0.85);
    EXPECT_DOUBLE_EQ(h.at("lr"), lrs.at(0)) << "read after the loop body's scheduler step";
  }

  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto second = session.snapshot();
  own = own_state();
  for (const auto& name : kParams) {
    SCOPED_TRACE(name);
    EXPECT_EQ(second->optimizer_state.at(name).at("step").item<int64_t>(), 2);
    EXPECT_TRUE(torch::equal(second->optimizer_state.at(name).at("exp_avg_sq"), own.at(name)));
    EXPECT_DOUBLE_EQ(second->optimizer_hyperparams.at(name).at("lr"), lrs.at(1));
    EXPECT_DOUBLE_EQ(lrs.at(1), 5e-3) << "the scheduler changed the lr";
    // The earlier snapshot kept its own values.
    EXPECT_EQ(first->optimizer_state.at(name).at("step").item<int64_t>(), 1);
    EXPECT_FALSE(torch::equal(first->optimizer_state.at(name).at("exp_avg_sq"), own.at(name)));
  }
}

}  // namespace
}  // namespace nansense
