// Root cause at op level: the producer of the first non-finite value, told
// apart from the ops that only passed it on, in forward and in backward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ThreadLocalState.h>
#include <ATen/ScalarOps.h>

#include <cmath>
#include <thread>

#include "numerics/op_tracer.h"

namespace nansense::numerics {
namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(3, 4))) {}
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

RootCause trace(const Net& net, const std::function<void()>& body, std::vector<std::string> allow = {}) {
  observer::Observer observer;
  OpTracer tracer(*net, std::move(allow), nullptr, {}, observer);
  body();
  tracer.stop();
  EXPECT_EQ(tracer.error(), "");
  return tracer.result();
}

TEST(RootCause, LogOfANegativeInTheForward) {
  torch::manual_seed(0);
  Net net;
  torch::Tensor out;
  auto cause = trace(net, [&] {
    auto h = net->fc(torch::ones({2, 3}));
    auto shifted = h - 100;                  // finite, all negative
    out = torch::log(shifted).relu().sum();  // log makes NaN; relu and sum pass it on
  });
  ASSERT_EQ(cause.status, RootCause::Status::kFound) << cause.summary;
  ASSERT_TRUE(cause.producer);
  const auto& p = *cause.producer;
  EXPECT_EQ(p.op, "aten::log");
  EXPECT_EQ(p.pass, "forward");
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_EQ(p.inputs[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(p.inputs[0].dtype, "float32");
  ASSERT_TRUE(p.inputs[0].max);
  EXPECT_LT(*p.inputs[0].max, 0);  // the finite range shows why
  EXPECT_EQ(p.inputs[0].nan, 0);
  ASSERT_EQ(p.outputs.size(), 1u);
  EXPECT_EQ(p.outputs[0].nan, 8);
  EXPECT_GE(cause.propagator_count, 2);
  ASSERT_FALSE(cause.propagators.empty());
  EXPECT_EQ(cause.propagators[0].op, "aten::relu");
  EXPECT_TRUE(std::isnan(out.item<double>()));
  EXPECT_EQ(cause.summary, "aten::log in the forward, produced NaN from finite inputs");
}

// Gradient accumulation: the step's second micro-batch runs its forward after
// the first one's backward. Told that it began, the tracer takes its ops for a
// forward again; untold, an op after a backward is the optimizer step's.
TEST(RootCause, ASecondMicroBatchsForwardIsAForwardOnceItsStartIsSaid) {
  for (const bool said : {true, false}) {
    torch::manual_seed(0);
    Net net;
    observer::Observer observer;
    OpTracer tracer(*net, {}, nullptr, {}, observer);
    net->fc(torch::ones({2, 3})).sum().backward();  // micro-batch 1: clean
    tracer.mark_backward_done();
    if (said) tracer.begin_micro_batch();
    (void)torch::log(net->fc(torch::ones({2, 3})) - 100).sum();  // micro-batch 2: NaN
    tracer.stop();
    auto cause = tracer.result();
    ASSERT_TRUE(cause.producer) << cause.summary;
    EXPECT_EQ(cause.producer->op, "aten::log");
    EXPECT_EQ(cause.producer->pass, said ? "forward" : "step") << (said ? "told" : "untold");
  }
}

TEST(RootCause, ZeroOverZeroNamesTheDivAndItsLayer) {
  Net net;
  auto cause = trace(net, [&] {
    auto h = net->fc(torch::zeros({1, 3})) * 0;  // zeros, through the layer
    (void)(h / torch::zeros({1, 4})).exp();
  });
  ASSERT_EQ(cause.status, RootCause::Status::kFound);
  EXPECT_EQ(cause.producer->op, "aten::div");
  EXPECT_EQ(cause.producer->inputs.size(), 2u);
  EXPECT_EQ(cause.producer->inputs[1].max, 0.0);
  EXPECT_EQ(cause.propagator_count, 1);  // exp
}

TEST(RootCause, TheSameFaultAgainCountsAsAnotherProducerNotAPropagator) {
  Net net;
  auto cause = trace(net, [&] {
    auto a = torch::zeros({2}) / torch::zeros({2});  // the producer
    auto b = torch::ones({2}) / torch::zeros({2});   // made again, from finite inputs
    (void)(a + b);                                   // passes it on
  });
  ASSERT_EQ(cause.status, RootCause::Status::kFound);
  EXPECT_EQ(cause.producer->outputs[0].nan, 2);
  EXPECT_EQ(cause.other_producer_count, 1);
  EXPECT_EQ(cause.propagator_count, 1);
  ASSERT_EQ(cause.propagators.size(), 1u);
  EXPECT_EQ(cause.propagators[0].op, "aten::add");
  EXPECT_EQ(cause.propagators[0].inputs[1].pos_inf, 2);  // propagators show what they received
}

TEST(RootCause, AParameterAlreadyNonFiniteIsBlamedOnItsModule) {
  Net net;
  {
    torch::NoGradGuard no_grad;
    net->fc->bias.fill_(INFINITY);  // set before the batch: no op of the batch makes it
  }
  auto cause = trace(net, [&] { (void)net->fc(torch::ones({1, 3})); });
  ASSERT_EQ(cause.status, RootCause::Status::kFromOutside) << cause.summary;
  EXPECT_EQ(cause.producer->layer, "fc");
  EXPECT_NE(cause.summary.find("'fc.bias' already held non-finite values"), std::string::npos) << cause.summary;
}

// A number literal is part of its op: `x * float("nan")` in Python reaches
// aten::mul as a wrapped 0-dim tensor (C++'s `x * NAN` as a Scalar). Either
// way the mul made the NaN; the literal is not a tensor from outside.
TEST(RootCause, ANanLiteralMakesItsOpTheProducer) {
  Net net;
  for (bool wrapped : {true, false}) {
    auto cause = trace(net, [&] {
      auto h = net->fc(torch::ones({2, 3}));
      auto nan = wrapped ? at::native::wrapped_scalar_tensor(c10::Scalar(NAN)) : torch::Tensor();
      ASSERT_TRUE(!wrapped || nan.unsafeGetTensorImpl()->is_wrapped_number());
      (void)(wrapped ? h * nan : h * NAN).relu();
    });
    ASSERT_EQ(cause.status, RootCause::Status::kFound) << (wrapped ? "wrapped: " : "scalar: ") << cause.summary;
    EXPECT_EQ(cause.producer->op, "aten::mul") << cause.summary;
    EXPECT_EQ(cause.summary.find("outside"), std::string::npos) << cause.summary;
  }
}

TEST(RootCause, NonFiniteDataIsBlamedOnTheBatch) {
  Net net;
  auto x = torch::ones({2, 3});
  x[1][2] = NAN;
  observer::Observer observer;
  OpTracer tracer(*net, {}, nullptr, {x}, observer);
  (void)net->fc(x);
  tracer.stop();
  auto cause = tracer.result();
  ASSERT_EQ(cause.status, RootCause::Status::kFromOutside);
  EXPECT_NE(cause.summary.find("the batch's tensor #0"), std::string::npos) << cause.summary;
}

TEST(RootCause, SqrtAtZeroInTheBackward) {
  Net net;
  auto w = torch::zeros({4}, torch::requires_grad());
  auto cause = trace(net, [&] {
    auto y = torch::sqrt(w).sum();  // sqrt(0) = 0: the forward is finite
    ASSERT_TRUE(std::isfinite(y.item<double>()));
    y.backward();  // d sqrt / dx at 0 = 1 / (2 * 0) = Inf
  });
  ASSERT_EQ(cause.status, RootCause::Status::kFound) << cause.summary;
  const auto& p = *cause.producer;
  EXPECT_EQ(p.pass, "backward");
  EXPECT_EQ(p.backward_node, "SqrtBackward0");
  EXPECT_EQ(p.forward_op, "aten::sqrt");
  EXPECT_EQ(p.op, "aten::div");
  EXPECT_EQ(p.outputs[0].pos_inf, 4);
  EXPECT_TRUE(torch::isinf(w.grad()).all().item<bool>());
  EXPECT_EQ(
      cause.summary,
      "aten::div in the backward, in SqrtBackward0 (the gradient of aten::sqrt), produced Inf from finite inputs");
}

TEST(RootCause, AnExplicitInfFillIsIntended) {
  Net net;
  auto mask = torch::tensor({{false, true, false}, {false, false, true}});
  // Every way an attention mask writes -inf, and arithmetic carrying it along.
  const std::vector<std::pair<std::string, std::function<torch::Tensor()>>> fills = {
      {"masked_fill",
       [&] {
         return torch::ones({2, 3}).masked_fill(mask, -INFINITY);
       }},
      {"masked_fill (tensor value)",
       [&] {
         return torch::ones({2, 3}).masked_fill(mask, torch::tensor(-INFINITY));
       }},
      {"where",
       [&] {
         return torch::where(mask, torch::full({2, 3}, -INFINITY), torch::ones({2, 3}));
       }},
      {"full + add",
       [&] {
         return torch::full({2, 3}, INFINITY) * -1 + torch::zeros({2, 3}).masked_fill(mask, 1);
       }},
      {"fill_",
       [&] {
         return torch::ones({2, 3}).fill_(-INFINITY);
       }},
  };
  for (const auto& [what, fill] : fills) {
    SCOPED_TRACE(what);
    auto cause = trace(net, [&fill = fill] {
      auto scores = fill();
      (void)torch::softmax(scores.masked_fill(scores.isinf().all(1, true), 0) + 1, 1);
    });
    EXPECT_EQ(cause.status, RootCause::Status::kNotTraced) << cause.summary;
  }
}

TEST(RootCause, ANanFillOrAnArithmeticInfStillTrips) {
  Net net;
  auto mask = torch::tensor({{false, true, false}});
  auto nan_fill = trace(net, [&] { (void)torch::ones({1, 3}).masked_fill(mask, NAN); });
  ASSERT_EQ(nan_fill.status, RootCause::Status::kFound);
  EXPECT_EQ(nan_fill.producer->op, "aten::masked_fill");
  auto overflow = trace(net, [&] { (void)(torch::full({1, 3}, 1e30) * 1e30); });
  ASSERT_EQ(overflow.status, RootCause::Status::kFound);
  EXPECT_EQ(overflow.producer->op, "aten::mul");
  auto log_zero = trace(net, [&] { (void)torch::log(torch::zeros({1, 3}).masked_fill(mask, 1)); });
  ASSERT_EQ(log_zero.status, RootCause::Status::kFound);
  EXPECT_EQ(log_zero.producer->op, "aten::log");
}

TEST(RootCause, AFillCarryingANanCountsTheNanNotItsInf) {
  Net net;
  observer::Observer observer;
  OpTracer tracer(*net, {}, nullptr, {}, observer);
  auto poisoned = torch::log(torch::full({1, 3}, -1.0));  // NaN made here
  (void)poisoned.masked_fill(torch::tensor({{false, true, false}}), -INFINITY);
  tracer.stop();
  EXPECT_TRUE(tracer.saw_nan());
  EXPECT_FALSE(tracer.saw_inf()) << "the mask's -inf is intended even where a NaN passes through";
  EXPECT_EQ(tracer.result().producer->op, "aten::log");
}

TEST(RootCause, TheAllowListCoversOtherIntendedValues) {
  Net net;
  auto body = [&] { (void)torch::log(torch::zeros({1, 3})); };  // -inf on purpose
  EXPECT_EQ(trace(net, body).status, RootCause::Status::kFound);
  EXPECT_EQ(trace(net, body, {"log"}).status, RootCause::Status::kNotTraced);
  EXPECT_EQ(trace(net, body, {"aten::log"}).status, RootCause::Status::kNotTraced);
}

TEST(RootCause, AnAllowedInfTurningIntoNanStillTrips) {
  Net net;
  auto cause = trace(net,
                     [&] {
                       auto scores = torch::ones({1, 3}).masked_fill(torch::ones({1, 3}, torch::kBool), -INFINITY);
                       (void)torch::softmax(scores, 1);  // a fully masked row: 0/0
                     },
                     {"masked_fill"});
  ASSERT_EQ(cause.status, RootCause::Status::kFound) << cause.summary;
  EXPECT_EQ(cause.producer->op, "aten::softmax");
}

TEST(RootCause, AllowListedLayersCoverTheirOps) {
  Net net;
  {
    torch::NoGradGuard no_grad;
    net->fc->weight.fill_(1e38);
  }
  auto body = [&] { (void)net->fc(torch::full({1, 3}, 10.0)); };  // overflows to Inf inside fc
  auto cause = trace(net, body);
  ASSERT_EQ(cause.status, RootCause::Status::kFound);
  EXPECT_EQ(cause.producer->layer, "fc");
  EXPECT_EQ(trace(net, body, {"fc"}).status, RootCause::Status::kNotTraced);
}

TEST(RootCause, ABackwardRunOnAnotherThreadIsSeen) {
  Net net;
  observer::Observer observer;
  OpTracer tracer(*net, {}, nullptr, {}, observer);
  auto h = net->fc(torch::ones({2, 3}));
  auto loss = torch::sqrt(h - h.detach()).sum();  // sqrt(0) = 0; its gradient 1/(2·0) is not finite
  // Autograd runs a CUDA tensor's backward on a device thread with the
  // training thread's thread-local state, callbacks included: so does this.
  at::ThreadLocalState training_thread_state;
  std::thread device([&] {
    at::ThreadLocalStateGuard guard(training_thread_state);
    loss.backward();
  });
  device.join();
  tracer.stop();
  auto cause = tracer.result();
  ASSERT_EQ(cause.status, RootCause::Status::kFound) << cause.summary;
  EXPECT_EQ(cause.producer->pass, "backward");
  EXPECT_NE(cause.producer->backward_node.find("SqrtBackward"), std::string::npos) << cause.producer->backward_node;
  EXPECT_EQ(cause.producer->forward_op, "aten::sqrt");
}

TEST(RootCause, FiniteRunsFindNothing) {
  Net net;
  auto cause = trace(net, [&] { net->fc(torch::ones({2, 3})).sum().backward(); });
  EXPECT_EQ(cause.status, RootCause::Status::kNotTraced);
  EXPECT_FALSE(cause.producer);
  EXPECT_EQ(cause.propagator_count, 0);
}

}  // namespace
}  // namespace nansense::numerics
