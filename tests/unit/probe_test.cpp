// Probes on a real paused training loop: their results against a direct
// forward of the same model (and perturbed results against the difference of
// two), a pinned batch across steps, isolation bit for bit (the model, its
// gradients, buffers, training flags and the RNG within a pause, and the
// whole run's weights against a run without probes), and every refusal.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "experiments/probe.h"
#include "nansense/nansense.h"
#include "session/session_access.h"
#include "state/rng_state.h"
#include "test_models.h"

namespace nansense {
namespace {

using common::Refusal;
using experiments::Perturbation;
using experiments::ProbeMode;
using experiments::ProbeResult;
using experiments::Probes;
using test::kWait;
using test::NormNet;
using test::TrainingThread;

using test::quiet_checks;
using test::quiet_server;

Probes& probes_of(Session& session) { return detail::core_of(session)->probes(); }

// The result of the next run after `run` (fails the test when none comes or it failed).
std::shared_ptr<const ProbeResult> next_run(Session& session, uint64_t run) {
  auto r = probes_of(session).wait_for_run_after(run, kWait);
  EXPECT_TRUE(r && r->run > run) << "no probe run after run " << run;
  if (r) EXPECT_EQ(r->error, "") << r->error;
  return r && r->run > run ? r : nullptr;
}

// Everything a forward could change, copied.
struct ModelState {
  std::map<std::string, torch::Tensor> tensors;  // parameters, gradients, buffers
  std::map<std::string, const void*> grad_storage;
  std::vector<bool> training;
  torch::Tensor rng;

  explicit ModelState(torch::nn::Module& model) {
    for (const auto& p : model.named_parameters()) {
      tensors[p.key()] = p.value().detach().clone();
      if (p.value().grad().defined()) tensors[p.key() + ".grad"] = p.value().grad().clone();
      grad_storage[p.key()] = p.value().grad().defined() ? p.value().grad().data_ptr() : nullptr;
    }
    for (const auto& b : model.named_buffers()) tensors[b.key()] = b.value().clone();
    training.push_back(model.is_training());
    for (const auto& m : model.modules(/*include_self=*/false)) training.push_back(m->is_training());
    rng = state::RngState::capture().cpu;
  }

  void expect_same(const ModelState& other, const std::string& when) const {
    ASSERT_EQ(tensors.size(), other.tensors.size()) << when;
    for (const auto& [name, t] : tensors) {
      auto it = other.tensors.find(name);
      ASSERT_NE(it, other.tensors.end()) << when << ": " << name;
      EXPECT_TRUE(torch::equal(t, it->second)) << when << ": " << name << " changed";
    }
    EXPECT_EQ(grad_storage, other.grad_storage) << when << ": a gradient was replaced, not kept";
    EXPECT_EQ(training, other.training) << when << ": training flags changed";
    EXPECT_TRUE(torch::equal(rng, other.rng)) << when << ": the RNG moved";
  }
};

std::vector<test::Batch> image_batches(int n) { return test::make_batches(n, 4, {1, 8, 8}); }

TEST(Probes, PerturbationsThatDoNotFitTheInputAreRefusedSayingWhy) {
  const std::vector<torch::Tensor> image{torch::zeros({4, 3, 8, 6})};
  auto refusal = [&](const Perturbation& p, const std::vector<torch::Tensor>& inputs) {
    return test::message_of<std::invalid_argument>([&] { experiments::check_perturbation(p, inputs); });
  };
  EXPECT_NE(refusal({1, 0, {1, 1}, {0.5}}, image).find("input 1 does not exist: the model has 1 input"),
            std::string::npos);
  EXPECT_NE(refusal({0, 4, {1, 1}, {0.5}}, image).find("sample 4 is out of range"), std::string::npos);
  EXPECT_NE(refusal({0, 0, {1}, {0.5}}, image).find("it takes [y, x]"), std::string::npos);
  EXPECT_NE(refusal({0, 0, {8, 0}, {0.5}}, image).find("y in 0..7"), std::string::npos);
  EXPECT_NE(refusal({0, 0, {0, 6}, {0.5}}, image).find("x in 0..5"), std::string::npos);
  EXPECT_NE(refusal({0, 0, {1, 1}, {0.1, 0.2}}, image).find("1 value (every channel) or 3 (one per channel)"),
            std::string::npos);
  EXPECT_NE(refusal({0, 0, {1, 1}, {std::nan("")}}, image).find("finite"), std::string::npos);
  const std::vector<torch::Tensor> flat{torch::zeros({2, 5})};
  EXPECT_NE(refusal({0, 0, {1, 1}, {0.5}}, flat).find("it takes [feature]"), std::string::npos);
  EXPECT_NE(refusal({0, 0, {5}, {0.5}}, flat).find("feature in 0..4"), std::string::npos);
  const std::vector<torch::Tensor> ids{torch::zeros({2, 5}, torch::kLong)};
  EXPECT_NE(refusal({0, 0, {1}, {1}}, ids).find("not floating point"), std::string::npos);
  const std::vector<torch::Tensor> video{torch::zeros({2, 3, 4, 4, 4})};
  EXPECT_NE(refusal({0, 0, {1, 1}, {1}}, video).find("images [N,C,H,W]"), std::string::npos);

  // Applied by direct indexing, on copies: one value for every channel, or one each.
  auto x = torch::rand({4, 3, 8, 6});
  auto out = experiments::perturbed({x}, {{0, 2, {5, 1}, {7.0}}, {0, 3, {0, 4}, {1.0, 2.0, 3.0}}});
  auto want = x.clone();
  want.index_put_({2, torch::indexing::Slice(), 5, 1}, 7.0);
  want.index_put_({3, 0, 0, 4}, 1.0);
  want.index_put_({3, 1, 0, 4}, 2.0);
  want.index_put_({3, 2, 0, 4}, 3.0);
  EXPECT_TRUE(torch::equal(out[0], want));
  EXPECT_FALSE(torch::equal(out[0], x)) << "the input itself was changed";
  // One that does not fit this batch (sample 4 of 4) is skipped and not counted.
  int64_t applied = -1;
  auto some = experiments::perturbed({x}, {{0, 2, {5, 1}, {7.0}}, {0, 4, {0, 0}, {1.0}}}, &applied);
  EXPECT_EQ(applied, 1);
  auto only = x.clone();
  only.index_put_({2, torch::indexing::Slice(), 5, 1}, 7.0);
  EXPECT_TRUE(torch::equal(some[0], only));
}

TEST(Probes, ResultsMatchADirectForwardAndPerturbedOnesAreTheDifference) {
  torch::manual_seed(3);
  NormNet model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto data = image_batches(3);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, test::train_phase(session, model, opt, data));
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& probes = probes_of(session);
  EXPECT_EQ(probes.result(), nullptr) << "no probe is active yet";

  // Eval mode re-runs the captured batch: each layer as a direct forward computes it.
  probes.set_mode(ProbeMode::kEval);
  auto r = next_run(session, 0);
  ASSERT_TRUE(r && r->view);
  EXPECT_FALSE(r->diff);
  EXPECT_TRUE(r->view->activation_gradients.empty()) << "a probe runs no backward";
  const torch::Tensor x = session.snapshot()->inputs.at(0);
  EXPECT_TRUE(torch::equal(r->view->inputs.at(0), x));
  EXPECT_TRUE(r->position.same_batch(session.snapshot()->position));
  // The model is paused: the test thread may read it (the loop waits).
  auto direct = [&](const torch::Tensor& in) {
    torch::NoGradGuard no_grad;
    model->eval();
    std::map<std::string, torch::Tensor> out;
    out["conv"] = model->conv(in);
    out["norm"] = model->norm(out["conv"]);
    out["fc"] = model->fc(torch::relu(out["norm"]).flatten(1));
    model->train();
    return out;
  };
  auto plain = direct(x);
  for (const auto& name : {"conv", "norm", "fc"}) {
    ASSERT_TRUE(r->view->activations.count(name)) << name;
    EXPECT_TRUE(torch::allclose(r->view->activations.at(name), plain[name], 0, 1e-6)) << name;
  }

  // A perturbation: the cards get perturbed - unperturbed, the input pane the perturbed input.
  probes.add_perturbation({0, 1, {3, 4}, {2.5}});
  r = next_run(session, r->run);
  ASSERT_TRUE(r && r->view);
  EXPECT_TRUE(r->diff);
  EXPECT_EQ(r->perturbations_applied, 1);
  auto x2 = x.clone();
  x2.index_put_({1, 0, 3, 4}, 2.5);
  EXPECT_TRUE(torch::equal(r->view->inputs.at(0), x2));
  auto changed = direct(x2);
  for (const auto& name : {"conv", "norm", "fc"}) {
    const auto& diff = r->view->activations.at(name);
    EXPECT_TRUE(torch::allclose(diff, changed[name] - plain[name], 0, 1e-5)) << name;
    // Eval mode: samples do not meet, so only sample 1 moved.
    EXPECT_EQ(diff[0].abs().max().item<float>(), 0.f) << name;
    EXPECT_GT(diff[1].abs().max().item<float>(), 0.f) << name;
  }
  // The same value again replaces it; Clear ends the diff.
  probes.add_perturbation({0, 1, {3, 4}, {-1.0}});
  EXPECT_EQ(probes.settings().perturbations.size(), 1u);
  r = next_run(session, r->run);
  EXPECT_EQ(probes.clear_perturbations(), 1);
  r = next_run(session, r->run);
  ASSERT_TRUE(r && r->view);
  EXPECT_FALSE(r->diff);

  // The UI is shown the probe's result in the snapshot's place, under a
  // sequence of its own.
  auto* core = detail::core_of(session);
  auto shown = core->shown_snapshot();
  ASSERT_TRUE(shown && shown->probe);
  EXPECT_EQ(shown->probe->run, r->run);
  EXPECT_EQ(shown->probe->mode, "eval");
  EXPECT_GT(shown->sequence, session.snapshot()->sequence);
  EXPECT_TRUE(torch::equal(shown->activations.at("fc"), r->view->activations.at("fc")));

  // Back to unchanged with nothing pinned: no probe, no result, the live
  // snapshot shown again under a newer sequence (sequences only grow).
  probes.set_mode(ProbeMode::kUnchanged);
  EXPECT_FALSE(probes.settings().active());
  EXPECT_EQ(probes.result(), nullptr);
  auto live = core->shown_snapshot();
  ASSERT_TRUE(live);
  EXPECT_FALSE(live->probe);
  EXPECT_GT(live->sequence, shown->sequence);
  EXPECT_TRUE(torch::equal(live->activations.at("fc"), session.snapshot()->activations.at("fc")));
  session.detach();
  loop.join();
}

TEST(Probes, APinnedBatchIsReRunAtEveryCaptureUntilUnpinned) {
  torch::manual_seed(4);
  NormNet model;
  torch::optim::SGD opt(model->parameters(), 0.05);
  auto data = image_batches(4);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, test::train_phase(session, model, opt, data));
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& probes = probes_of(session);
  const BatchPosition pinned = probes.pin();
  EXPECT_EQ(pinned.batch_idx, 0);
  auto r = next_run(session, 0);
  ASSERT_TRUE(r && r->view);
  const torch::Tensor batch0 = r->view->inputs.at(0);
  EXPECT_TRUE(torch::equal(batch0, data[0].first));
  for (int64_t b = 1; b <= 2; ++b) {
    const uint64_t seen = probes.runs_completed();
    session.step_batch();
    ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
    ASSERT_EQ(session.snapshot()->position.batch_idx, b);
    r = next_run(session, seen);
    ASSERT_TRUE(r && r->view);
    // The capture re-ran the pinned batch on the model as it is now.
    EXPECT_EQ(r->snapshot_sequence, session.snapshot()->sequence);
    EXPECT_EQ(r->position.batch_idx, 0);
    EXPECT_TRUE(torch::equal(r->view->inputs.at(0), batch0));
    EXPECT_FALSE(torch::equal(session.snapshot()->inputs.at(0), batch0));
  }
  EXPECT_TRUE(probes.unpin());
  EXPECT_FALSE(probes.unpin());
  EXPECT_EQ(probes.result(), nullptr);
  session.detach();
  loop.join();
}

TEST(Probes, LeaveTheModelBitForBitAsItWasAndTrainingUnchanged) {
  // Two identical runs; the first probes in every pause, in every mode, with
  // a perturbation and a pin (so captures re-run it too). The model's state
  // must be exactly as before each probe, and the final weights identical.
  auto train = [](bool probe) {
    torch::manual_seed(1);
    NormNet model;
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
    auto data = image_batches(4);
    auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
    EXPECT_TRUE(serve(session, quiet_server()));
    TrainingThread loop(session, [&] {
      for (auto& batch : session.batches(data, "train")) {
        test::train_step(model, opt, batch.first, batch.second);
        // One module in eval mode, one parameter without a gradient: each
        // must come back as it was.
        model->drop->eval();
        model->fc->bias.mutable_grad().reset();
      }
      session.close();
    });
    auto& probes = probes_of(session);
    for (int b = 0; b < 4; ++b) {
      EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
      if (probe) {
        const ModelState before(*model);
        const uint64_t seen = probes.runs_completed();
        switch (b) {
          case 0:
            probes.pin();
            break;
          case 1:
            probes.set_mode(ProbeMode::kTrain);
            break;
          case 2:
            probes.add_perturbation({0, 2, {4, 4}, {3.0}});
            break;
          default:
            probes.set_mode(ProbeMode::kEval);
            break;
        }
        auto r = next_run(session, seen);
        if (r && b == 1) EXPECT_EQ(r->settings.mode, ProbeMode::kTrain);
        ModelState(*model).expect_same(before, "after the probe in pause " + std::to_string(b));
      }
      session.step_batch();
    }
    loop.join();
    std::vector<torch::Tensor> state;
    for (const auto& p : model->parameters()) state.push_back(p.detach().clone());
    for (const auto& b : model->buffers()) state.push_back(b.clone());
    state.push_back(state::RngState::capture().cpu);
    return state;
  };
  auto with = train(true);
  auto without = train(false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(torch::equal(with[i], without[i])) << "tensor " << i;
}

TEST(Probes, RefusalsSayWhatToDo) {
  torch::manual_seed(5);
  NormNet model;
  torch::optim::SGD opt(model->parameters(), 0.05);
  auto data = image_batches(2);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  auto& probes = probes_of(session);
  test::Gate in_batch_1, release_batch_1;
  TrainingThread loop(session, test::train_phase(session, model, opt, data, [&](int i) {
                        if (i == 1) {
                          in_batch_1.open();
                          release_batch_1.wait();
                        }
                      }));
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  // Not fitting the captured input: the engine's refusal says what does.
  auto msg = test::message_of<Refused>([&] { probes.add_perturbation({0, 0, {9, 0}, {1.0}}); });
  EXPECT_NE(msg.find("y in 0..7"), std::string::npos) << msg;
  EXPECT_TRUE(probes.settings().perturbations.empty());
  // While the loop runs.
  session.step_batch();
  ASSERT_TRUE(in_batch_1.wait());
  msg = test::message_of<Refused>([&] { probes.pin(); });
  EXPECT_NE(msg.find("pause the loop first"), std::string::npos) << msg;
  msg = test::message_of<Refused>([&] { probes.set_mode(ProbeMode::kEval); });
  EXPECT_NE(msg.find("pause the loop first"), std::string::npos) << msg;
  release_batch_1.open();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  session.detach();
  loop.join();
  // After the run.
  msg = test::message_of<Refused>([&] { probes.pin(); });
  EXPECT_NE(msg.find("training has finished"), std::string::npos) << msg;
  EXPECT_FALSE(probes.unpin());
  EXPECT_EQ(probes.clear_perturbations(), 0);
}

}  // namespace
}  // namespace nansense
