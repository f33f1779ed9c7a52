// Experiments checked against their definitions (each computed here the
// direct way, independently of the batched implementation), their isolation
// (the model bit for bit as it was), and their queue on a real training loop.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "capture/tracer.h"
#include "experiments/engine.h"
#include "experiments/experiments.h"
#include "fashion_mnist/model.h"
#include "observer/observer.h"
#include "session/session_access.h"
#include "state/isolation.h"
#include "state/rng_state.h"
#include "test_models.h"

namespace nansense {
namespace {

using experiments::json;
using experiments::Result;
using test::kWait;
using test::NormNet;
using test::TrainingThread;

// The demo CNN on a batch of 28x28 images in [0,1], normalised as the demo does.
struct Demo {
  FashionCnn model;
  torch::Tensor x;
  Demo(int64_t batch = 4) {
    torch::manual_seed(7);
    model = FashionCnn();
    x = (torch::rand({batch, 1, 28, 28}) - 0.286) / 0.353;
  }
  experiments::ForwardFn forward() {
    auto m = model;
    return [m](const std::vector<torch::Tensor>& in) mutable { return m->forward(in[0]); };
  }
  // features.0 .. features.`last` applied to `h`, the direct way.
  torch::Tensor features(torch::Tensor h, int last) {
    int i = 0;
    for (auto& m : *model->features) {
      if (i++ > last) break;
      h = m.forward(h);
    }
    return h;
  }
};

Result run_kind(const std::string& kind, const std::string& layer, const json& params, torch::nn::Module& model,
                experiments::ForwardFn forward, std::vector<torch::Tensor> inputs, std::vector<double> mean = {},
                std::vector<double> std = {}, std::vector<int64_t>* published = nullptr) {
  const auto* spec = experiments::find_kind(kind);
  EXPECT_TRUE(spec) << kind;
  auto resolved = experiments::resolve_params(*spec, {params});
  experiments::Context ctx;
  ctx.model = &model;
  ctx.forward = std::move(forward);
  ctx.inputs = std::move(inputs);
  ctx.mean = std::move(mean);
  ctx.std = std::move(std);
  ctx.seed = 3;
  if (published) ctx.progress = [published](const Result& r) { published->push_back(r.step); };
  Result r;
  state::ModelIsolation isolation(model);
  experiments::run(*spec, layer, resolved.params, ctx, r);
  return r;
}

// The names the tracer gives a model's layers, as the session would show them.
std::vector<LayerInfo> traced_layers(torch::nn::Module& model, const std::function<torch::Tensor()>& forward,
                                     const torch::Tensor& input) {
  observer::Observer observer;
  capture::Tracer tracer(
      model, observer, capture::Tracer::Keep{.cpu = false, .device = false, .device_layer = nullptr, .take = nullptr});
  tracer.set_inputs({input}, false);
  forward();
  return tracer.finish()->architecture->layers;
}

TEST(Experiments, IntegratedGradientsAreComplete) {
  Demo demo;
  demo.model->eval();
  for (int channel : {2, -1}) {
    auto r = run_kind("neuron_ig", "features.3", {{"channel", channel}, {"ig_steps", 64}, {"batch", 4}}, *demo.model,
                      demo.forward(), {demo.x});
    ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
    ASSERT_EQ(r.attributions.sizes(), demo.x.sizes());
    // F(x) - F(0) computed directly from the layer's definition.
    torch::NoGradGuard no_grad;
    auto f = [&](const torch::Tensor& in) {
      auto a = demo.features(in, 3);
      return channel < 0 ? a.reshape({a.size(0), -1}).mean(1) : a.select(1, channel).reshape({a.size(0), -1}).mean(1);
    };
    auto delta = f(demo.x) - f(torch::zeros_like(demo.x));
    auto sums = r.attributions.reshape({4, -1}).sum(1);
    for (int64_t i = 0; i < 4; ++i) {
      const double d = delta[i].item<double>();
      EXPECT_NEAR(sums[i].item<double>(), d, 0.01 * std::abs(d) + 1e-6) << "channel " << channel << " sample " << i;
      EXPECT_NEAR(r.target_values[static_cast<size_t>(i)], d, 1e-4 * std::abs(d) + 1e-6);
    }
  }
}

TEST(Experiments, IntegratedGradientsOnAParameterlessAddAreComplete) {
  torch::manual_seed(3);
  test::Residual model;
  auto x = torch::randn({3, 4});
  std::string add;
  for (const auto& l : traced_layers(
           *model, [&] { return model->forward(x); }, x)) {
    if (l.kind == "add") add = l.name;
  }
  ASSERT_FALSE(add.empty());
  auto r = run_kind("neuron_ig", add, {{"channel", 1}, {"ig_steps", 64}}, *model,
                    [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0]); }, {x});
  ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
  torch::NoGradGuard no_grad;
  auto f = [&](const torch::Tensor& in) {
    auto s = model->stem(in);
    auto h = model->block->fc2(torch::relu(model->block->fc1(s))) + s;
    return h.select(1, 1);
  };
  auto delta = f(x) - f(torch::zeros_like(x));
  auto sums = r.attributions.sum(1);
  for (int64_t i = 0; i < 3; ++i) {
    const double d = delta[i].item<double>();
    EXPECT_NEAR(sums[i].item<double>(), d, 0.01 * std::abs(d) + 1e-6) << "sample " << i;
  }
}

TEST(Experiments, GradCamIsTheWeightedReluSumOfTheActivationMaps) {
  Demo demo;
  demo.model->eval();
  for (int target : {-1, 3}) {
    auto r =
        run_kind("gradcam", "features.3", {{"target", target}, {"batch", 3}}, *demo.model, demo.forward(), {demo.x});
    ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
    // Directly: A = the layer's maps, y = the class score, alpha_k = mean of dy/dA_k.
    auto x = demo.x.narrow(0, 0, 3);
    auto a = demo.features(x, 3).detach().requires_grad_(true);
    auto rest = a;
    int i = 0;
    for (auto& m : *demo.model->features) {
      if (i++ > 3) rest = m.forward(rest);
    }
    auto out = torch::log_softmax(demo.model->classifier->forward(rest), 1);
    auto targets = target < 0 ? out.argmax(1) : torch::full({3}, target, torch::kLong);
    auto y = out.gather(1, targets.unsqueeze(1)).sum();
    auto g = torch::autograd::grad({y}, {a})[0];
    auto expected = torch::relu((g.mean({2, 3}, true) * a.detach()).sum(1));
    ASSERT_EQ(r.attributions.sizes(), expected.sizes());
    EXPECT_TRUE(torch::allclose(r.attributions, expected, 1e-5, 1e-7)) << (r.attributions - expected).abs().max();
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(r.targets[static_cast<size_t>(s)], targets[s].item<int64_t>());
    EXPECT_GT(r.attributions.abs().sum().item<double>(), 0);
  }
}

TEST(Experiments, NeuronGradientIsTheGradientOfTheChannelMean) {
  Demo demo;
  demo.model->eval();
  // features.4 is a parameterless ReLU module.
  for (int channel : {5, -1}) {
    auto r = run_kind("neuron_gradient", "features.4", {{"channel", channel}, {"batch", 2}}, *demo.model,
                      demo.forward(), {demo.x});
    ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
    auto x = demo.x.narrow(0, 0, 2).clone().requires_grad_(true);
    auto a = demo.features(x, 4);
    auto f = channel < 0 ? a.mean() * a.size(0) : a.select(1, channel).mean({1, 2}).sum();
    auto g = torch::autograd::grad({f}, {x})[0];
    EXPECT_TRUE(torch::allclose(r.attributions, g, 1e-5, 1e-8)) << (r.attributions - g).abs().max();
    EXPECT_GT(g.abs().sum().item<double>(), 0);
  }
}

TEST(Experiments, NeuronGradientWorksOnAFunctionalReluOp) {
  torch::manual_seed(5);
  test::Cnn model;
  auto x = torch::randn({2, 1, 8, 8});
  auto r = run_kind("neuron_gradient", "relu", {{"channel", 1}}, *model,
                    [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0]); }, {x});
  ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
  auto xg = x.clone().requires_grad_(true);
  auto g = torch::autograd::grad({torch::relu(model->conv(xg)).select(1, 1).mean({1, 2}).sum()}, {xg})[0];
  EXPECT_TRUE(torch::allclose(r.attributions, g, 1e-5, 1e-8));
}

TEST(Experiments, AModelWithTwoInputsIsAttributedOnItsFirstWithTheOtherHeldFixed) {
  torch::manual_seed(8);
  test::TwoInput model;
  auto a = torch::randn({4, 4});
  auto b = torch::randn({4, 2});
  auto forward = [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0], in[1]); };
  // F(a) = head's channel 1 with b held fixed, sample by sample.
  auto f = [&](const torch::Tensor& x, int64_t n) { return model->forward(x, b.narrow(0, 0, n)).select(1, 1); };

  // The path crosses ReLU kinks in fa: quadrature needs more nodes than on
  // the demo CNN to come within 1%.
  auto ig = run_kind("neuron_ig", "head", {{"channel", 1}, {"batch", 3}, {"ig_steps", 512}}, *model, forward, {a, b});
  ASSERT_EQ(ig.stage, Result::Stage::kDone) << ig.error;
  ASSERT_EQ(ig.attributions.sizes(), (std::vector<int64_t>{3, 4}));
  {
    torch::NoGradGuard no_grad;
    auto x = a.narrow(0, 0, 3);
    auto delta = f(x, 3) - f(torch::zeros_like(x), 3);
    auto sums = ig.attributions.sum(1);
    for (int64_t i = 0; i < 3; ++i) {
      const double d = delta[i].item<double>();
      EXPECT_NEAR(sums[i].item<double>(), d, 0.01 * std::abs(d) + 1e-6) << "sample " << i;
    }
  }
  auto grad = run_kind("neuron_gradient", "head", {{"channel", 1}, {"batch", 2}}, *model, forward, {a, b});
  ASSERT_EQ(grad.stage, Result::Stage::kDone) << grad.error;
  auto x = a.narrow(0, 0, 2).clone().requires_grad_(true);
  auto g = torch::autograd::grad({f(x, 2).sum()}, {x})[0];
  EXPECT_TRUE(torch::allclose(grad.attributions, g, 1e-5, 1e-8)) << (grad.attributions - g).abs().max();

  auto dream = run_kind("deep_dream", "head", {{"steps", 3}, {"channels", 2}, {"start", "sample"}, {"sample", 3}},
                        *model, forward, {a, b});
  ASSERT_EQ(dream.stage, Result::Stage::kDone) << dream.error;
  EXPECT_EQ(dream.images.sizes(), (std::vector<int64_t>{2, 4}));

  // Another input without the first one's samples cannot be held per sample.
  auto msg = test::message_of<std::invalid_argument>([&] {
    run_kind("neuron_gradient", "head", {{"channel", 1}}, *model, forward, {a, torch::randn({3, 2})});
  });
  EXPECT_NE(msg.find("hold its other inputs fixed"), std::string::npos) << msg;
}

TEST(Experiments, OcclusionEqualsABruteForceLoopOverWindows) {
  torch::manual_seed(5);
  test::Cnn model;
  model->eval();
  auto x = torch::randn({2, 1, 8, 8});
  const int64_t window = 3, stride = 2, channel = 2;
  auto r = run_kind("occlusion", "relu", {{"channel", channel}, {"window", window}, {"stride", stride}}, *model,
                    [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0]); }, {x});
  ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
  torch::NoGradGuard no_grad;
  auto f = [&](const torch::Tensor& in) {
    return torch::relu(model->conv(in)).select(1, channel).mean().item<double>();
  };
  for (int64_t s = 0; s < 2; ++s) {
    auto xs = x.narrow(0, s, 1);
    const double base = f(xs);
    std::vector<double> sum(64, 0), count(64, 0);
    for (int64_t y = 0; y + window <= 8; y += stride) {
      for (int64_t xx = 0; xx + window <= 8; xx += stride) {
        auto occluded = xs.clone();
        for (int64_t dy = 0; dy < window; ++dy) {
          for (int64_t dx = 0; dx < window; ++dx) occluded[0][0][y + dy][xx + dx] = 0;
        }
        const double diff = base - f(occluded);
        for (int64_t dy = 0; dy < window; ++dy) {
          for (int64_t dx = 0; dx < window; ++dx) {
            sum[static_cast<size_t>((y + dy) * 8 + xx + dx)] += diff;
            count[static_cast<size_t>((y + dy) * 8 + xx + dx)] += 1;
          }
        }
      }
    }
    for (int64_t p = 0; p < 64; ++p) {
      const double expected =
          count[static_cast<size_t>(p)] > 0 ? sum[static_cast<size_t>(p)] / count[static_cast<size_t>(p)] : 0;
      EXPECT_NEAR(r.attributions[s][0][p / 8][p % 8].item<double>(), expected, 1e-5)
          << "sample " << s << " pixel " << p;
    }
  }
  EXPECT_EQ(r.total, 9);  // 3 x 3 window positions
}

TEST(Experiments, DeepDreamRaisesItsObjectiveAndRespectsClamp) {
  Demo demo;
  std::vector<double> mean{0.286}, std{0.353};
  std::vector<int64_t> published;
  auto r = run_kind("deep_dream", "features.3", {{"channels", 3}, {"steps", 60}, {"lr", 0.05}}, *demo.model,
                    demo.forward(), {demo.x}, mean, std, &published);
  ASSERT_EQ(r.stage, Result::Stage::kDone) << r.error;
  // The start, then 20 evenly spaced steps.
  std::vector<int64_t> expected{0};
  for (int64_t s = 3; s <= 60; s += 3) expected.push_back(s);
  EXPECT_EQ(published, expected);
  ASSERT_EQ(r.objectives.size(), 60u);
  ASSERT_EQ(r.images.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  ASSERT_EQ(r.channels, (std::vector<int64_t>{0, 1, 2}));
  // Monotone on average: each later quarter beats the one before.
  auto quarter = [&](int q) {
    double s = 0;
    for (int i = q * 15; i < (q + 1) * 15; ++i) s += r.objectives[static_cast<size_t>(i)];
    return s / 15;
  };
  for (int q = 1; q < 4; ++q) EXPECT_GT(quarter(q), quarter(q - 1)) << "quarter " << q;
  // Clamp: every value maps back into [0, 1].
  auto shown = r.images * 0.353 + 0.286;
  EXPECT_GE(shown.min().item<double>(), -1e-5);
  EXPECT_LE(shown.max().item<double>(), 1 + 1e-5);
  EXPECT_GT(shown.max().item<double>() - shown.min().item<double>(), 0.1);  // not a flat picture
  // The same seed dreams the same picture.
  auto again = run_kind("deep_dream", "features.3", {{"channels", 3}, {"steps", 60}, {"lr", 0.05}}, *demo.model,
                        demo.forward(), {demo.x}, mean, std);
  EXPECT_TRUE(torch::equal(again.images, r.images));
  // minimize descends.
  auto down = run_kind("deep_dream", "features.3",
                       {{"channels", 2}, {"steps", 30}, {"minimize", true}, {"start", "sample"}, {"sample", 1}},
                       *demo.model, demo.forward(), {demo.x}, mean, std);
  ASSERT_EQ(down.stage, Result::Stage::kDone) << down.error;
  EXPECT_LT(down.objectives.back(), down.objectives.front());
  EXPECT_TRUE(torch::equal(down.start[0], demo.x[1]));
}

TEST(Experiments, BadLayersAndParametersAreRefusedClearly) {
  const auto* gradcam = experiments::find_kind("gradcam");
  ASSERT_TRUE(gradcam);
  LayerInfo fc;
  fc.name = "classifier.1";
  fc.output_shape = {8, 64};
  fc.dtype = "float32";
  auto why = experiments::why_unusable(*gradcam, fc);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("spatial"), std::string::npos) << *why;
  EXPECT_FALSE(experiments::why_unusable(*experiments::find_kind("neuron_gradient"), fc));
  LayerInfo input;
  input.name = "input";
  input.role = LayerInfo::Role::kInput;
  input.output_shape = {8, 1, 28, 28};
  EXPECT_TRUE(experiments::why_unusable(*gradcam, input));

  auto msg = test::message_of<std::invalid_argument>([&] {
    experiments::resolve_params(*experiments::find_kind("neuron_ig"), {json{{"ig_steps", 1}}});
  });
  EXPECT_NE(msg.find("ig_steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at least 2"), std::string::npos) << msg;
  msg = test::message_of<std::invalid_argument>([&] {
    experiments::resolve_params(*experiments::find_kind("deep_dream"), {json{{"start", "video"}}});
  });
  EXPECT_NE(msg.find("noise, sample"), std::string::npos) << msg;
  auto r = experiments::resolve_params(*experiments::find_kind("occlusion"),
                                       {json{{"window", 6}}, json{{"stride", 3}, {"colour", 1}}});
  EXPECT_EQ(r.params["window"], 6);
  EXPECT_EQ(r.params["stride"], 3);
  EXPECT_EQ(r.params["batch"], 8);
  EXPECT_EQ(r.ignored, std::vector<std::string>{"colour"});
}

// --- isolation -----------------------------------------------------------

TEST(Experiments, EveryKindLeavesTheModelBitForBitAsItWas) {
  torch::manual_seed(11);
  NormNet model;
  auto x = torch::randn({4, 1, 8, 8});
  // Mid-training state: gradients from a backward, one parameter without one,
  // running statistics moved, the dropout module alone in eval mode.
  torch::cross_entropy_loss(model->forward(x), torch::tensor({0, 1, 2, 0})).backward();
  model->fc->bias.mutable_grad().reset();
  model->drop->eval();
  auto forward = [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0]); };
  for (const auto& kind : experiments::kinds()) {
    std::map<std::string, torch::Tensor> before;
    for (const auto& p : model->named_parameters()) {
      before[p.key()] = p.value().detach().clone();
      if (p.value().grad().defined()) before[p.key() + ".grad"] = p.value().grad().clone();
    }
    for (const auto& b : model->named_buffers()) before[b.key()] = b.value().clone();
    std::vector<const void*> grad_storage;
    for (const auto& p : model->parameters())
      grad_storage.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
    const auto rng = state::RngState::capture();
    json params = kind.kind == "deep_dream" ? json{{"steps", 5}, {"channels", 2}} : json::object();
    if (kind.kind == "occlusion") params = {{"window", 4}, {"stride", 4}};
    auto r = run_kind(kind.kind, "norm", params, *model, forward, {x});
    EXPECT_EQ(r.stage, Result::Stage::kDone) << kind.kind << ": " << r.error;

    for (const auto& p : model->named_parameters()) {
      EXPECT_TRUE(torch::equal(p.value(), before[p.key()])) << kind.kind << " " << p.key();
      const bool had = before.count(p.key() + ".grad") > 0;
      ASSERT_EQ(p.value().grad().defined(), had) << kind.kind << " " << p.key();
      if (had) EXPECT_TRUE(torch::equal(p.value().grad(), before[p.key() + ".grad"])) << kind.kind << " " << p.key();
    }
    size_t i = 0;
    for (const auto& p : model->parameters()) {
      EXPECT_EQ(p.grad().defined() ? p.grad().data_ptr() : nullptr, grad_storage[i++]) << kind.kind;
    }
    for (const auto& b : model->named_buffers()) EXPECT_TRUE(torch::equal(b.value(), before[b.key()])) << b.key();
    EXPECT_TRUE(model->is_training());
    EXPECT_TRUE(model->conv->is_training());
    EXPECT_TRUE(model->norm->is_training());
    EXPECT_FALSE(model->drop->is_training());
    EXPECT_TRUE(torch::equal(state::RngState::capture().cpu, rng.cpu)) << kind.kind;
    EXPECT_TRUE(torch::GradMode::is_enabled());
  }
}

// --- the queue on a real training loop ------------------------------------

// The queue's tests pause between batches (see test::quiet_checks).
using test::quiet_server;
DebugSettings queue_checks() { return test::quiet_checks(); }

TEST(ExperimentQueue, RunsOnThePausedLoopAndTrainingReplaysUnchanged) {
  // Two identical runs of 3 batches; the first runs experiments while paused
  // after each batch. Weights at the end must be bit-identical.
  auto train = [](bool experiment, std::vector<std::string>* errors) {
    torch::manual_seed(1);
    NormNet model;
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto data = test::make_batches(3, 4, {1, 8, 8});
    auto session = start(model, StartOptions().optimizer(&opt).debug(queue_checks()));
    EXPECT_TRUE(serve(session, quiet_server()));
    TrainingThread loop(session, [&] {
      for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
      session.close();
    });
    auto& engine = detail::core_of(session)->experiments();
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
      if (experiment) {
        for (const std::string kind : {"deep_dream", "gradcam", "neuron_ig", "occlusion"}) {
          json params = kind == "deep_dream" ? json{{"steps", 4}} : json::object();
          auto sub = engine.submit(kind, "conv", params);
          auto r = engine.wait(sub.seq, kWait);
          if (!r || r->stage != Result::Stage::kDone) errors->push_back(kind + ": " + (r ? r->error : "no result"));
        }
      }
      session.step_batch();
    }
    loop.join();
    std::vector<torch::Tensor> weights;
    for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
    for (const auto& b : model->buffers()) weights.push_back(b.clone());
    return weights;
  };
  std::vector<std::string> errors;
  auto with = train(true, &errors);
  auto without = train(false, nullptr);
  EXPECT_TRUE(errors.empty()) << errors.front();
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(torch::equal(with[i], without[i])) << i;
}

TEST(ExperimentQueue, RequestsQueueWhileAnotherExperimentTracesItsForwards) {
  // A running experiment's forwards install an op observer of their own; a
  // request made meanwhile queues behind it (it was once refused as if the
  // loop were paused inside a traced batch, depending on the moment).
  torch::manual_seed(3);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  std::vector<test::Batch> data;
  for (int i = 0; i < 2; ++i) data.emplace_back(torch::rand({4, 1, 28, 28}), torch::randint(10, {4}));
  auto session = start(model, StartOptions().optimizer(&opt).debug(queue_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& engine = detail::core_of(session)->experiments();
  auto dream = engine.submit("deep_dream", "features.3", {{"steps", 10000}, {"channels", 2}});
  for (uint64_t seen = 0; engine.result(dream.seq)->stage == Result::Stage::kQueued;) {
    seen = detail::core_of(session)->control().wait_for_change(seen, kWait);
  }
  ASSERT_EQ(engine.result(dream.seq)->stage, Result::Stage::kRunning);
  int queued = 0;
  std::string refusal;
  for (int i = 0; i < 300 && engine.result(dream.seq)->stage == Result::Stage::kRunning; ++i) {
    try {
      engine.submit("neuron_gradient", "features.0", {{"batch", 1}});
      ++queued;
    } catch (const common::Refusal& e) {
      refusal = e.what();
      break;
    }
  }
  EXPECT_EQ(refusal, "");
  EXPECT_GT(queued, 0);
  EXPECT_GE(engine.cancel(std::nullopt), 1);
  session.detach();
  loop.join();
}

TEST(ExperimentQueue, CancelTimeLimitResumeAutoRunAndRefusals) {
  torch::manual_seed(2);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  std::vector<test::Batch> data;
  for (int i = 0; i < 3; ++i) data.emplace_back(torch::rand({4, 1, 28, 28}), torch::randint(10, {4}));
  auto session = start(model, StartOptions().optimizer(&opt).debug(queue_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  auto& engine = detail::core_of(session)->experiments();
  // Before any batch: nothing captured.
  auto msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "features.0", {}); });
  EXPECT_NE(msg.find("captured"), std::string::npos) << msg;
  test::Gate in_batch_1, release_batch_1;
  TrainingThread loop(session, [&] {
    int i = 0;
    for (auto& batch : session.batches(data, "train")) {
      if (i++ == 1) {
        in_batch_1.open();
        release_batch_1.wait();
      }
      test::train_step(model, opt, batch.first, batch.second);
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);

  // Refusals name what is wrong.
  msg = test::message_of<common::Refusal>([&] { engine.submit("dream", "features.0", {}); });
  EXPECT_NE(msg.find("deep_dream"), std::string::npos) << msg;
  msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "nope", {}); });
  EXPECT_NE(msg.find("features.3"), std::string::npos) << msg;
  msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "classifier.1", {}); });
  EXPECT_NE(msg.find("spatial"), std::string::npos) << msg;
  msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "input", {}); });
  EXPECT_NE(msg.find("model input"), std::string::npos) << msg;
  msg = test::message_of<common::Refusal>([&] { engine.submit("neuron_gradient", "features.0", {{"channel", 16}}); });
  EXPECT_NE(msg.find("16 channels"), std::string::npos) << msg;
  msg = test::message_of<common::Refusal>([&] { engine.submit("occlusion", "features.0", {{"window", 0}}); });
  EXPECT_NE(msg.find("window"), std::string::npos) << msg;

  // A long dream runs; the request queued behind it waits; a cancel stops
  // the dream early and the next one runs. Params: defaults, session, caller.
  engine.set_defaults("deep_dream", {{"steps", 10000}, {"channels", 2}});
  auto dream = engine.submit("deep_dream", "features.3", {{"lr", 0.02}, {"colour", "red"}});
  EXPECT_EQ(dream.ignored, std::vector<std::string>{"colour"});
  EXPECT_EQ(dream.params["steps"], 10000);
  EXPECT_EQ(dream.params["lr"], 0.02);
  EXPECT_EQ(dream.params["jitter"], 2);
  auto behind = engine.submit("neuron_gradient", "features.4", {{"channel", 3}});
  EXPECT_EQ(behind.queued_ahead, 1);
  auto wait_running = [&](uint64_t seq) {
    for (uint64_t seen = 0;;) {
      auto r = engine.result(seq);
      if (!r || r->stage != Result::Stage::kQueued) return r;
      seen = detail::core_of(session)->control().wait_for_change(seen, kWait);
    }
  };
  auto running = wait_running(dream.seq);
  ASSERT_TRUE(running);
  EXPECT_EQ(running->stage, Result::Stage::kRunning);
  EXPECT_EQ(engine.queued_ahead(behind.seq), 1);
  EXPECT_EQ(engine.result(behind.seq)->stage, Result::Stage::kQueued);
  EXPECT_EQ(engine.cancel(dream.seq), 1);
  auto stopped = engine.wait(dream.seq, kWait);
  ASSERT_TRUE(stopped && stopped->finished());
  EXPECT_EQ(stopped->stage, Result::Stage::kStopped);
  EXPECT_EQ(stopped->stop_reason, "cancelled");
  EXPECT_LT(stopped->step, 10000);
  ASSERT_TRUE(stopped->images.defined());  // what it had dreamed so far
  auto next = engine.wait(behind.seq, kWait);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->stage, Result::Stage::kDone) << next->error;

  // The wall-clock limit stops a run.
  engine.set_time_limit_seconds(0.2);
  auto limited = engine.submit("deep_dream", "features.3", {});
  auto r = engine.wait(limited.seq, kWait);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stage, Result::Stage::kStopped);
  EXPECT_NE(r->stop_reason.find("time limit"), std::string::npos) << r->stop_reason;
  engine.set_time_limit_seconds(90);

  // An error becomes an error result.
  auto failing = engine.submit("deep_dream", "features.3", {{"start", "sample"}, {"sample", 7}});
  r = engine.wait(failing.seq, kWait);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stage, Result::Stage::kFailed);
  EXPECT_NE(r->error.find("sample 7 is out of range"), std::string::npos) << r->error;

  // Only the 8 most recent finished results are kept.
  std::vector<uint64_t> seqs;
  for (int i = 0; i < 9; ++i) seqs.push_back(engine.submit("neuron_gradient", "features.0", {{"batch", 1}}).seq);
  ASSERT_TRUE(engine.wait(seqs.back(), kWait)->finished());
  EXPECT_EQ(engine.kept().size(), 8u);
  EXPECT_FALSE(engine.result(seqs[0]));
  EXPECT_TRUE(engine.result(seqs.back()));

  // A resume stops the running dream.
  auto resumed = engine.submit("deep_dream", "features.3", {});
  ASSERT_EQ(wait_running(resumed.seq)->stage, Result::Stage::kRunning);
  session.step_batch();
  r = engine.wait(resumed.seq, kWait);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stage, Result::Stage::kStopped);
  EXPECT_NE(r->stop_reason.find("resumed"), std::string::npos) << r->stop_reason;

  // While the loop runs (batch 1 held), a request without auto-run is refused;
  // with auto-run it waits and runs at the next captured batch.
  ASSERT_TRUE(in_batch_1.wait());
  EXPECT_EQ(session.state(), RunState::kRunning);
  msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "features.3", {}); });
  EXPECT_NE(msg.find("auto-run"), std::string::npos) << msg;
  engine.set_auto_run(true);
  auto later = engine.submit("gradcam", "features.3", {{"batch", 2}});
  EXPECT_EQ(engine.result(later.seq)->stage, Result::Stage::kQueued);
  release_batch_1.open();
  r = engine.wait(later.seq, kWait);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->stage, Result::Stage::kDone) << r->error;
  EXPECT_EQ(r->attributions.sizes(), (std::vector<int64_t>{2, 14, 14}));
  session.detach();
  loop.join();
  EXPECT_FALSE(loop.error());
}

}  // namespace
}  // namespace nansense
