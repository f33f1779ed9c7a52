// The guard inside a real training loop: it trips in every mode, pauses before
// the optimizer step, re-runs an untraced batch to name the producer, merges
// later hits, and writes a NaN capsule that replays bit for bit.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "nansense/nansense.h"
#include "session/session_access.h"
#include "state/training_state.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::DropNet;
using test::kWait;
using test::message_of;
using test::TrainingThread;

// The scheme's toy loss: per-class BCE divided by the class's count, which
// is 0 when a batch lacks the class.
torch::Tensor per_class_bce(const torch::Tensor& logits, const torch::Tensor& target) {
  std::vector<torch::Tensor> losses;
  for (int64_t c = 0; c < logits.size(1); ++c) {
    auto count = (target == c).sum();
    auto loss = torch::binary_cross_entropy_with_logits(logits.select(1, c), (target == c).to(logits.dtype()), {}, {},
                                                        at::Reduction::Sum);
    losses.push_back(loss / count);
  }
  return torch::stack(losses).mean();
}

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("nansense-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

using test::quiet_server;

// Batches 0 and 1 hold every class; batch 2 lacks class 2 and goes non-finite.
std::vector<std::pair<torch::Tensor, torch::Tensor>> class_batches(int64_t n = 5) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (int64_t i = 0; i < n; ++i) {
    auto y = i == 2 ? torch::tensor({0, 1, 1, 0}) : torch::tensor({0, 1, 2, 2});
    out.emplace_back(torch::randn({4, 4}), y);
  }
  return out;
}

TEST(NumericsSession, TripsInDetachPausesBeforeTheStepAndNamesTheProducer) {
  torch::manual_seed(1);
  DropNet model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  auto data = class_batches();
  const auto dir = temp_dir("detach");
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir(dir)));
  ASSERT_TRUE(serve(session, quiet_server()));
  session.detach();

  std::mutex mu;
  std::map<std::string, torch::Tensor> before;  // weights as each body began
  std::atomic<int> bodies{0};
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) {
      {
        std::lock_guard lock(mu);
        for (const auto& p : model->named_parameters()) before[p.key()] = p.value().detach().clone();
      }
      ++bodies;
      opt.zero_grad();
      per_class_bce(model->forward(batch.first), batch.second).backward();
      opt.step();
    }
    session.close();
  });

  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  // Batch 2 ran untraced, tripped, and ran again traced: 2 + 2 bodies.
  EXPECT_EQ(bodies.load(), 4);
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->position.batch_idx, 2);
  EXPECT_EQ(session.live_position()->batch_idx, 2);
  EXPECT_NE(std::find(error->reasons.begin(), error->reasons.end(), "nan"), error->reasons.end());
  ASSERT_TRUE(error->root_cause);
  ASSERT_EQ(error->root_cause->status, RootCause::Status::kFound) << error->root_cause->summary;
  const auto& producer = *error->root_cause->producer;
  EXPECT_EQ(producer.op, "aten::div");
  EXPECT_EQ(producer.pass, "forward");
  EXPECT_EQ(producer.layer, std::nullopt);  // the loss, outside the model
  ASSERT_EQ(producer.inputs.size(), 2u);
  EXPECT_EQ(producer.inputs[1].max, 0.0);  // the class count
  EXPECT_EQ(producer.outputs[0].pos_inf, 1);
  EXPECT_GT(error->root_cause->propagator_count, 0);
  EXPECT_EQ(error->root_cause->summary,
            "aten::div in the forward, outside the model's layers (the loss?), produced Inf from finite inputs");
  // Paused inside backward: gradients are non-finite, weights still pre-step.
  {
    std::lock_guard lock(mu);
    for (const auto& p : model->named_parameters()) {
      EXPECT_TRUE(torch::equal(p.value(), before[p.key()])) << p.key() << " changed before the pause";
    }
  }
  EXPECT_FALSE(torch::isfinite(model->fc1->weight.grad()).all().item<bool>());
  // Paused inside the batch: an experiment waits for a pause between batches, and says so.
  const auto refused = test::message_of<common::Refusal>(
      [&] { detail::core_of(session)->experiments().submit("neuron_gradient", "fc1", {}); });
  EXPECT_NE(refused.find("paused inside a traced batch"), std::string::npos) << refused;
  // The traced re-run was published as the snapshot the UI shows.
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->position.batch_idx, 2);
  EXPECT_TRUE(snap->architecture->find("fc1"));
  // Per-layer rows name the model's layers.
  std::vector<std::string> layers;
  for (const auto& row : error->layers) layers.push_back(row.layer);
  EXPECT_NE(std::find(layers.begin(), layers.end(), "fc1"), layers.end());
  EXPECT_FALSE(error->capsule.empty());
  EXPECT_TRUE(std::filesystem::exists(error->capsule));

  // Later hits merge without pausing; the first position stays.
  session.detach();
  loop.join();
  auto merged = session.debug_error();
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->position.batch_idx, 2);
  EXPECT_GT(merged->hits, 1);
  EXPECT_EQ(session.state(), RunState::kFinished);
  std::filesystem::remove_all(dir);
}

// What one run of the batch body saw around its optimizer step.
struct StepRecord {
  std::map<std::string, torch::Tensor> before, after;   // weights
  int64_t adam_step_before = -1, adam_step_after = -1;  // fc1.weight's Adam step count
};

int64_t adam_step(torch::optim::Adam& opt, const torch::Tensor& p) {
  auto it = opt.state().find(static_cast<void*>(p.unsafeGetTensorImpl()));
  if (it == opt.state().end()) return 0;
  return static_cast<torch::optim::AdamParamState&>(*it->second).step();
}

TEST(NumericsSession, ASkippedUpdateChangesNothingAndANewProblemPausesAgain) {
  torch::manual_seed(3);
  DropNet model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  auto data = class_batches();
  data[1].first[0][0] = NAN;  // batch 1: NaN from the data; batch 2: a division by zero in the loss
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir("")));
  ASSERT_TRUE(serve(session, quiet_server()));
  session.detach();

  std::mutex mu;
  std::vector<StepRecord> records;  // per body run
  auto weights = [&] {
    std::map<std::string, torch::Tensor> w;
    for (const auto& p : model->named_parameters()) w[p.key()] = p.value().detach().clone();
    return w;
  };
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) {
      StepRecord r;
      opt.zero_grad();
      per_class_bce(model->forward(batch.first), batch.second).backward();
      r.before = weights();
      r.adam_step_before = adam_step(opt, model->fc1->weight);
      opt.step();
      r.after = weights();
      r.adam_step_after = adam_step(opt, model->fc1->weight);
      std::lock_guard lock(mu);
      records.push_back(std::move(r));
    }
    session.close();
  });

  // Batch 1 ran untraced, tripped, ran again traced and paused in its backward.
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto first = session.debug_error();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->position.batch_idx, 1);
  EXPECT_EQ(first->reasons, (std::vector<std::string>{"nan"}));
  EXPECT_EQ(first->update, "held");
  detail::core_of(session)->debug().choose_update(/*skip=*/true);
  EXPECT_TRUE(detail::core_of(session)->debug().skip_chosen());
  session.detach();

  // Batch 2's Inf is a new problem: it pauses again although a warning stands.
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto second = session.debug_error();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->position.batch_idx, 2);
  EXPECT_NE(std::find(second->reasons.begin(), second->reasons.end(), "inf"), second->reasons.end());
  ASSERT_TRUE(second->root_cause && second->root_cause->producer)
      << (second->root_cause ? second->root_cause->summary : "");
  EXPECT_EQ(second->root_cause->producer->op, "aten::div");
  EXPECT_EQ(second->update, "held");
  session.detach();  // applied this time
  loop.join();
  EXPECT_EQ(session.debug_error()->update, "applied");

  std::lock_guard lock(mu);
  // Bodies: batch 0, batch 1 untraced, batch 1 traced (skipped), batch 2 untraced, batch 2 traced, batches 3, 4.
  ASSERT_EQ(records.size(), 7u);
  const auto& skipped = records[2];
  for (const auto& [name, w] : skipped.before) {
    EXPECT_TRUE(torch::equal(w, skipped.after.at(name))) << name << " changed by the skipped update";
  }
  EXPECT_EQ(skipped.adam_step_after, skipped.adam_step_before) << "Adam's step count moved";
  EXPECT_EQ(skipped.adam_step_before, 1);
  const auto& applied = records[4];
  EXPECT_FALSE(torch::isfinite(applied.after.at("fc1.weight")).all().item<bool>()) << "the applied update is poisoned";
}

TEST(NumericsSession, ChoosingAnUpdateWithNoneHeldIsRefused) {
  DropNet model;
  auto session = start(model, StartOptions().enabled(true));
  auto& debug = detail::core_of(session)->debug();
  const auto message = test::message_of<std::logic_error>([&] { debug.choose_update(true); });
  EXPECT_NE(message.find("no numerical error stands"), std::string::npos) << message;
}

TEST(NumericsSession, ABatchThatStaysFiniteWhenRunAgainIsReportedAsNotReproduced) {
  torch::manual_seed(6);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(4);
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir("")));
  ASSERT_TRUE(serve(session, quiet_server()));
  session.detach();
  int bodies = 0;
  std::vector<bool> rerunning;
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) {
      rerunning.push_back(session.rerunning());
      // A fault outside torch's RNG: only the first time batch 2 runs.
      auto x = ++bodies == 3 ? batch.first * INFINITY : batch.first;
      test::train_step(model, opt, x, batch.second);
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  EXPECT_EQ(bodies, 4);  // batch 2 twice
  EXPECT_EQ(session.live_position()->batch_idx, 2);
  auto error = session.debug_error();
  ASSERT_TRUE(error && error->root_cause);
  EXPECT_EQ(error->position.batch_idx, 2);
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kNotReproduced);
  // The second run of batch 2 was told, and the error says it ran twice.
  EXPECT_EQ(rerunning, (std::vector<bool>{false, false, false, true}));
  EXPECT_TRUE(error->rerun);
  EXPECT_NE(error->root_cause->summary.find("loop body"), std::string::npos) << error->root_cause->summary;
  // The re-run stayed finite, so its step left finite weights.
  EXPECT_TRUE(torch::isfinite(model->fc1->weight).all().item<bool>());
}

TEST(NumericsSession, ATracedBatchPausesAtOnceAndPublishesPreStepWeights) {
  torch::manual_seed(2);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(4);
  data[1].first[0][0] = NAN;
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir("")));
  ASSERT_TRUE(serve(session, quiet_server()));
  std::map<std::string, torch::Tensor> before;
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);  // after batch 0 (step mode)
  EXPECT_FALSE(session.debug_error());
  for (const auto& p : model->named_parameters()) before[p.key()] = p.value().detach().clone();
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->position.batch_idx, 1);
  ASSERT_TRUE(error->root_cause);
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kFromOutside);
  EXPECT_NE(error->root_cause->summary.find("the batch's tensor #0"), std::string::npos);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->position.batch_idx, 1);
  for (const auto& [name, w] : snap->weights) EXPECT_TRUE(torch::equal(w, before[name])) << name;
  // Activations are checked too on a traced batch: the input layer is NaN.
  bool input_row = false;
  for (const auto& row : error->layers) input_row = input_row || row.layer == "input";
  EXPECT_TRUE(input_row);
  // A step from here does not pause again at the end of the same batch.
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  EXPECT_EQ(session.live_position()->batch_idx, 2);
}

TEST(NumericsSession, AForwardOnlyBatchTripsOnItsActivationsAndPausesAtItsEnd) {
  test::TwoLayer model;
  auto data = test::make_batches(3);
  data[1].first[2][1] = INFINITY;
  auto session = start(model, StartOptions().debug(DebugSettings().capsule_dir("")));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    torch::NoGradGuard no_grad;
    for (auto& batch : session.batches(data, "val")) model->forward(batch.first);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  session.step_batch();  // batch 1 is captured (step mode), so traced
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->position.phase, "val");
  EXPECT_EQ(error->position.batch_idx, 1);
  EXPECT_EQ(error->checks_used, (std::vector<std::string>{"nan_inf", "under_over"}));
  ASSERT_FALSE(error->layers.empty());
  EXPECT_EQ(error->layers[0].layer, "input");
  EXPECT_DOUBLE_EQ(error->layers[0].inf, 1.0 / 20);
  EXPECT_EQ(error->layers[0].sources, (std::vector<std::string>{"activation"}));
  ASSERT_TRUE(error->root_cause);
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kFromOutside);
  EXPECT_EQ(session.snapshot()->position.batch_idx, 1);
}

TEST(NumericsSession, WithoutAUiTheRunGoesOnAndTheIntervalIsHonoured) {
  torch::manual_seed(3);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(6);
  data[0].first[0][0] = NAN;  // at interval 2 batches 1, 3 and 5 are checked, not batch 0
  auto session = start(model, StartOptions().optimizer(&opt).debug(
                                  DebugSettings().interval_batches(2).capsule_dir("").rerun_to_trace(false)));
  session.detach();
  for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
  session.close();
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  // Batch 0's NaN step poisoned the weights; the next checked batch caught it.
  EXPECT_EQ(error->position.batch_idx, 1);
  ASSERT_TRUE(error->root_cause);
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kNotTraced);
  EXPECT_EQ(detail::core_of(session)->debug().checked_batches(), 3);
}

TEST(NumericsSession, ABatchSettlesOnceItsOneBackwardIsCheckedClean) {
  // Served and detached, the guard on: a NaN could pause any batch until its
  // backward is checked. A batch's first backward, after a batch of one,
  // settles it (a distributed rank 0 then lets the followers past the next
  // boundary); the batch after one of two backwards does not settle, nor
  // does the first batch.
  torch::manual_seed(4);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(6);
  auto session = start(model, StartOptions().optimizer(&opt).debug(test::quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  session.detach();
  auto* core = detail::core_of(session);
  int batch = -1;
  std::vector<std::pair<int, bool>> settled;  // (batch, runs through the next boundary then)
  core->set_on_settled([&] { settled.emplace_back(batch, core->runs_through_next_boundary()); });
  std::vector<bool> through_at_start;
  for (auto& b : session.batches(data, "train")) {
    ++batch;
    through_at_start.push_back(core->runs_through_next_boundary());
    opt.zero_grad();
    if (batch == 3) {
      // Two backwards in one batch (a GAN's, gradient accumulation).
      torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
    }
    torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
    opt.step();
  }
  session.close();
  const std::vector<std::pair<int, bool>> expected = {{1, true}, {2, true}, {3, true}, {5, true}};
  EXPECT_EQ(settled, expected);
  // Until it settles, a batch the checks could pause is not run through.
  EXPECT_EQ(through_at_start, std::vector<bool>(6, false));
}

// The gradients of a distributed run averaged inside backward, as DDP does
// in a final callback queued once its last bucket is ready (after the
// guard's): a hook of the test's queues one that writes another rank's NaN
// into one gradient of `poisoned_batch`, or (`own`) the batch's data holds it.
// `peer_note`: that callback also notes the other rank's trip first, as rank
// 0's reader of a follower's news may while this rank's backward runs, or
// (`note_ahead`) it is noted as the batch before ends, ahead of this rank's
// start of the poisoned one (a peer running ahead into static_graph's first
// batch, whose gradients DDP averages only at its end).
struct AveragedRun {
  int waits = 0;               // the waits for the leader's choice
  std::vector<float> weights;  // fc1's weight sum after each batch
  std::vector<bool> decided;   // each batch's update: skipped
  std::optional<DebugError> error;
  bool in_average = false;
};

AveragedRun run_averaged(int poisoned_batch, bool own, std::optional<bool> leader_says,
                         const std::string& capsule_dir = "", const std::string& peer_note = "",
                         bool note_ahead = false) {
  torch::manual_seed(4);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(4);
  if (own) data[poisoned_batch].first[0][0] = NAN;
  // A rank's settings: no traced re-run (settings_for_rank).
  auto session = start(
      model, StartOptions().optimizer(&opt).debug(test::quiet_checks().capsule_dir(capsule_dir).rerun_to_trace(false)));
  session.detach();
  auto* core = detail::core_of(session);
  core->check_after_reduction(true);
  AveragedRun out;
  core->set_on_await_leader([&] {
    ++out.waits;
    return leader_says;
  });
  core->set_on_update_decided([&](bool skipped) { out.decided.push_back(skipped); });
  int batch = -1;
  torch::Tensor weight = model->fc1->weight;
  weight.register_hook([&](const torch::Tensor&) {
    if (batch != poisoned_batch || own) return;
    torch::autograd::Engine::get_default_engine().queue_callback([&] {
      torch::NoGradGuard no_grad;
      weight.mutable_grad().view(-1)[0].fill_(NAN);
      if (!peer_note.empty() && !note_ahead) {
        core->note_rank_trip(peer_note, {"nan"}, {"nan_inf"}, "/peer/rank_1.capsule");
      }
    });
  });
  for (auto& b : session.batches(data, "train")) {
    ++batch;
    test::train_step(model, opt, b.first, b.second);
    out.weights.push_back(model->fc1->weight.sum().item<float>());
    if (note_ahead && batch + 1 == poisoned_batch) {
      BatchPosition next;
      next.phase = "train";
      next.batch_idx = poisoned_batch;
      core->note_rank_trip(peer_note, {"nan"}, {"nan_inf"}, "/peer/rank_1.capsule", next);
    }
  }
  out.error = session.debug_error();
  out.in_average = core->standing_found_in_average();
  session.close();
  return out;
}

TEST(NumericsSession, AfterReductionANaNOnlyInTheAveragedGradientsWaitsForTheLeaderBeforeTheStep) {
  // This rank's own gradients are finite; the averaged ones are not. The
  // first check passes, the one after the averaging trips: no capsule (the
  // batch replays finite), the NaN said to come from another rank, and the
  // update skipped as the leader said, before the optimizer step.
  const auto run = run_averaged(2, /*own=*/false, /*leader_says=*/true);
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 2);
  EXPECT_EQ(run.waits, 1);
  EXPECT_TRUE(run.in_average);
  EXPECT_TRUE(run.error->capsule.empty());
  ASSERT_TRUE(run.error->root_cause);
  EXPECT_EQ(run.error->root_cause->status, RootCause::Status::kFromOutside);
  EXPECT_NE(run.error->root_cause->summary.find("gradient averaging"), std::string::npos);
  EXPECT_EQ(run.error->update, "skipped");
  // Every batch's update decided once its checks were over; batch 2's skipped.
  EXPECT_EQ(run.decided, (std::vector<bool>{false, false, true, false}));
  ASSERT_EQ(run.weights.size(), 4u);
  EXPECT_EQ(run.weights[2], run.weights[1]);  // skipped: no step
  EXPECT_TRUE(std::isfinite(run.weights[3]));
}

TEST(NumericsSession, AfterReductionARanksOwnNaNHoldsOnlyOnceTheAveragedGradientsAreIn) {
  // The rank's own NaN: found by the first check (its capsule holds this
  // rank's gradients), it waits for the leader only after the averaging
  // (whose writes a pause's skip would not survive); applied as told.
  const auto dir = temp_dir("after_reduction_own");
  const auto run = run_averaged(1, /*own=*/true, /*leader_says=*/false, dir);
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 1);
  EXPECT_EQ(run.waits, 1);
  EXPECT_FALSE(run.in_average);
  EXPECT_FALSE(run.error->capsule.empty());
  EXPECT_EQ(run.error->update, "applied");
  EXPECT_EQ(run.decided, (std::vector<bool>{false, false, false, false}));
  EXPECT_FALSE(std::isfinite(run.weights[1]));
  // No leader to wait for (the run is lost): the loop goes on, the update
  // neither held nor chosen.
  const auto lost = run_averaged(2, /*own=*/false, std::nullopt);
  ASSERT_TRUE(lost.error);
  EXPECT_EQ(lost.waits, 1);
  EXPECT_EQ(lost.error->update, "");
}

TEST(NumericsSession, AfterReductionAPeersTripNotedFirstStillHoldsTheUpdateAndKeepsItsNote) {
  // The other rank's trip was noted (a standing error of this batch) before
  // this rank's check of the averaged gradients ran: that check still holds
  // the update before the step, and the report keeps both findings and the
  // peer's capsule.
  const auto run = run_averaged(2, /*own=*/false, /*leader_says=*/true, "", "rank 1 tripped at batch 2");
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 2);
  EXPECT_EQ(run.waits, 1);
  EXPECT_EQ(run.error->update, "skipped");
  EXPECT_EQ(run.error->capsule, "/peer/rank_1.capsule");
  ASSERT_TRUE(run.error->root_cause);
  EXPECT_EQ(run.error->root_cause->status, RootCause::Status::kFromOutside);
  const auto& summary = run.error->root_cause->summary;
  EXPECT_NE(summary.find("gradient averaging"), std::string::npos) << summary;
  EXPECT_NE(summary.find("[distributed] rank 1 tripped at batch 2"), std::string::npos) << summary;
  EXPECT_EQ(run.error->hits, 1);
  EXPECT_EQ(run.decided, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(run.weights[2], run.weights[1]);  // skipped: no step
}

TEST(NumericsSession, AfterReductionAPeersTripNotedBeforeTheBatchBeganStillHoldsTheUpdate) {
  // The note stood as this rank began the batch (its peer was a batch
  // ahead): this rank's own finding there still holds the update and keeps
  // the note, where it once merged into the note without pausing.
  const auto run = run_averaged(2, /*own=*/false, /*leader_says=*/true, "", "rank 1 tripped at batch 2",
                                /*note_ahead=*/true);
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 2);
  EXPECT_EQ(run.waits, 1);
  EXPECT_EQ(run.error->update, "skipped");
  EXPECT_EQ(run.error->capsule, "/peer/rank_1.capsule");
  ASSERT_TRUE(run.error->root_cause);
  EXPECT_EQ(run.error->root_cause->status, RootCause::Status::kFromOutside);
  EXPECT_NE(run.error->root_cause->summary.find("[distributed] rank 1 tripped at batch 2"), std::string::npos)
      << run.error->root_cause->summary;
  EXPECT_EQ(run.decided, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(run.weights[2], run.weights[1]);  // skipped: no step
}

TEST(NumericsSession, DisabledChecksInstallNothingThatTrips) {
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(2);
  data[0].first[0][0] = NAN;
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().enabled(false)));
  session.detach();
  for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
  session.close();
  EXPECT_FALSE(session.debug_error());
  EXPECT_THROW(start(model, StartOptions().debug(DebugSettings().interval_batches(0))), ArgumentError);
}

// Runs the toy loop to its first trip without a UI (the loop goes on) and
// returns the capsule's path.
std::string record_capsule(const std::string& dir) {
  torch::manual_seed(4);
  DropNet model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  auto data = class_batches();
  auto session = start(model, StartOptions().optimizer(&opt).debug(DebugSettings().capsule_dir(dir)));
  session.detach();
  for (auto& batch : session.batches(data, "train")) {
    opt.zero_grad();
    per_class_bce(model->forward(batch.first), batch.second).backward();
    opt.step();
  }
  session.close();
  auto error = session.debug_error();
  EXPECT_TRUE(error);
  if (!error) return "";
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kFound);  // the in-process re-run reproduced it
  return error->capsule;
}

class CapsuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("capsule");
    path_ = record_capsule(dir_);
    ASSERT_FALSE(path_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(CapsuleTest, ReplaysBitForBitInAFreshModel) {
  torch::manual_seed(99);  // another initialisation, another RNG state
  DropNet model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  auto capsule = replay_capsule(path_, *model, &opt);
  EXPECT_EQ(capsule.position.phase, "train");
  EXPECT_EQ(capsule.position.batch_idx, 2);
  ASSERT_EQ(capsule.batch.size(), 2u);  // data, target
  EXPECT_NE(std::find(capsule.reasons.begin(), capsule.reasons.end(), "nan"), capsule.reasons.end());
  EXPECT_EQ(capsule.settings.capsule_dir(), dir_);
  EXPECT_TRUE(capsule.notes.empty());
  opt.zero_grad();
  per_class_bce(model->forward(capsule.batch[0]), capsule.batch[1]).backward();
  std::string difference;
  EXPECT_TRUE(capsule.gradients_match(*model, &difference)) << difference;
  // Dropout drew the same mask: a different RNG state would not match.
  torch::manual_seed(5);
  opt.zero_grad();
  per_class_bce(model->forward(capsule.batch[0]), capsule.batch[1]).backward();
  EXPECT_FALSE(capsule.gradients_match(*model));
}

TEST_F(CapsuleTest, ATruncatedCapsuleIsRefused) {
  auto bytes = read_file(path_);
  const auto cut = dir_ + "/cut.capsule";
  std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  DropNet model;
  try {
    replay_capsule(cut, *model);
    FAIL() << "a truncated capsule was accepted";
  } catch (const CapsuleError& e) {
    EXPECT_NE(std::string(e.what()).find(cut + " is truncated"), std::string::npos) << e.what();
  }
}

TEST_F(CapsuleTest, ACorruptCapsuleIsRefused) {
  auto bytes = read_file(path_);
  bytes[bytes.size() / 2] ^= 0x5a;
  const auto bad = dir_ + "/bad.capsule";
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  DropNet model;
  EXPECT_THROW(
      {
        try {
          replay_capsule(bad, *model);
        } catch (const CapsuleError& e) {
          EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
          throw;
        }
      },
      CapsuleError);
  std::ofstream(dir_ + "/other.capsule") << "not a capsule at all";
  EXPECT_THROW(replay_capsule(dir_ + "/other.capsule", *model), CapsuleError);
  EXPECT_THROW(replay_capsule(dir_ + "/missing.capsule", *model), CapsuleError);
}

TEST_F(CapsuleTest, ACapsuleFromAnotherModelIsRefusedNamingTheMismatch) {
  DropNet wider(16);
  const auto before = wider->fc1->weight.clone();
  try {
    replay_capsule(path_, *wider);
    FAIL() << "a capsule of another model was accepted";
  } catch (const CapsuleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("was recorded for another model"), std::string::npos) << what;
    EXPECT_NE(what.find("parameter 'fc1.weight' has shape [8, 4] in the capsule but [16, 4] in this model"),
              std::string::npos)
        << what;
  }
  EXPECT_TRUE(torch::equal(before, wider->fc1->weight));  // untouched
  DropNet same;
  torch::optim::SGD sgd(same->parameters(), 0.1);
  try {
    replay_capsule(path_, *same, &sgd);
    FAIL() << "Adam state was loaded into SGD";
  } catch (const CapsuleError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the optimizer is torch::optim::Adam in the capsule but torch::optim::SGD was given"),
              std::string::npos)
        << e.what();
  }
}

torch::Tensor exp_avg(torch::optim::Adam& adam, const torch::Tensor& p) {
  const auto& state = adam.state().at(static_cast<void*>(p.unsafeGetTensorImpl()));
  return static_cast<torch::optim::AdamParamState&>(*state).exp_avg().clone();
}

torch::Tensor momentum(torch::optim::SGD& sgd, const torch::Tensor& p) {
  const auto& state = sgd.state().at(static_cast<void*>(p.unsafeGetTensorImpl()));
  return static_cast<torch::optim::SGDParamState&>(*state).momentum_buffer().clone();
}

// A GAN-like pair of optimizers over disjoint parameters: the in-process
// re-run and the replay both restore each optimizer's state.
TEST(Capsule, EveryOptimizerIsSavedRestoredAndReplayed) {
  const auto dir = temp_dir("capsule_two");
  torch::manual_seed(4);
  DropNet model;
  torch::optim::Adam adam(model->fc1->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::SGD sgd(model->fc2->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto data = class_batches();
  auto session = start(model, StartOptions().optimizers({&adam, &sgd}).debug(DebugSettings().capsule_dir(dir)));
  session.detach();
  // Adam's and SGD's state each time batch 2 is about to step.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> before_step;
  for (auto& batch : session.batches(data, "train")) {
    adam.zero_grad();
    sgd.zero_grad();
    per_class_bce(model->forward(batch.first), batch.second).backward();
    if (session.live_position()->batch_idx == 2) {
      before_step.emplace_back(exp_avg(adam, model->fc1->weight), momentum(sgd, model->fc2->weight));
    }
    adam.step();
    sgd.step();
  }
  session.close();
  auto error = session.debug_error();
  ASSERT_TRUE(error);
  ASSERT_EQ(before_step.size(), 2u) << "batch 2 runs again, traced, from the recorded state";
  EXPECT_TRUE(torch::equal(before_step[1].first, before_step[0].first)) << "Adam's state was restored";
  EXPECT_TRUE(torch::equal(before_step[1].second, before_step[0].second)) << "SGD's momentum was restored";
  EXPECT_EQ(error->root_cause->status, RootCause::Status::kFound);

  torch::manual_seed(99);
  DropNet fresh;
  torch::optim::Adam adam2(fresh->fc1->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::SGD sgd2(fresh->fc2->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto why = message_of<CapsuleError>([&] { replay_capsule(error->capsule, *fresh, {&sgd2, &adam2}); });
  EXPECT_NE(why.find("optimizer #0 is torch::optim::Adam in the capsule but torch::optim::SGD was given"),
            std::string::npos)
      << why;
  why = message_of<CapsuleError>([&] { replay_capsule(error->capsule, *fresh, &adam2); });
  EXPECT_NE(why.find("the capsule holds the state of 2 optimizers (torch::optim::Adam, torch::optim::SGD) but 1 was "
                     "given"),
            std::string::npos)
      << why;
  EXPECT_TRUE(adam2.state().empty()) << "a refused replay changes nothing";

  auto capsule = replay_capsule(error->capsule, *fresh, {&adam2, &sgd2});
  EXPECT_TRUE(torch::equal(exp_avg(adam2, fresh->fc1->weight), before_step[0].first));
  EXPECT_TRUE(torch::equal(momentum(sgd2, fresh->fc2->weight), before_step[0].second));
  adam2.zero_grad();
  sgd2.zero_grad();
  per_class_bce(fresh->forward(capsule.batch[0]), capsule.batch[1]).backward();
  std::string difference;
  EXPECT_TRUE(capsule.gradients_match(*fresh, &difference)) << difference;
  std::filesystem::remove_all(dir);
}

TEST(Capsule, OlderFormatsAndOtherKindsAreRefusedSayingSo) {
  const auto dir = temp_dir("capsule_old");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/old.capsule", std::ios::binary) << "NANSENSE-CAPSULE" << std::string(64, '\1');
  DropNet model;
  auto why = message_of<CapsuleError>([&] { replay_capsule(dir + "/old.capsule", *model); });
  EXPECT_NE(why.find("old.capsule is a NaN capsule in an older nansense format"), std::string::npos) << why;
  state::StateFile checkpoint{std::string(state::kCheckpointKind)};
  state::save_state({model.ptr().get(), {}, nullptr}, checkpoint);
  state::write_state_file(dir + "/epoch_0.ckpt", checkpoint);
  why = message_of<CapsuleError>([&] { replay_capsule(dir + "/epoch_0.ckpt", *model); });
  EXPECT_NE(why.find("epoch_0.ckpt is a time-travel checkpoint, not a NaN capsule"), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

// Multiplies the gradient passing back through it by Inf: scaled
// gradients that overflow whatever the scale, while the forward and the loss
// stay finite (what fp16's range does to a GradScaler's scaled gradients).
struct Blowup : torch::autograd::Function<Blowup> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list g) {
    return {g[0] * std::numeric_limits<float>::infinity()};
  }
};

struct ScaledRun {
  std::optional<DebugError> error;
  LossScaleStatus scale;
  std::vector<bool> stepped;
};

// A loop with a loss scaler as GradScaler runs one: the loss times the scale,
// backward, the step skipped (and the scale halved) when a gradient is not
// finite. Batches in `blown` overflow in backward; `nan_loss` makes that
// batch's loss NaN with finite gradients (log of a negative number).
ScaledRun run_scaled(double scale, std::set<int> blown, int nan_loss = -1) {
  torch::manual_seed(4);
  test::TwoLayer model;
  torch::optim::SGD opt(model->parameters(), 0.1);
  auto data = test::make_batches(6);
  auto session = start(model, StartOptions().optimizer(&opt).debug(test::quiet_checks().rerun_to_trace(false)));
  session.detach();
  auto* core = detail::core_of(session);
  core->set_loss_scale_reader([&]() -> std::optional<double> { return scale; });
  ScaledRun out;
  int batch = -1;
  for (auto& b : session.batches(data, "train")) {
    ++batch;
    opt.zero_grad();
    auto y = model->forward(b.first);
    if (blown.count(batch)) y = Blowup::apply(y);
    auto loss = torch::cross_entropy_loss(y, b.second);
    if (batch == nan_loss) loss = torch::log(loss - 100.0);
    auto scaled = loss * scale;
    core->note_backward_roots({scaled.detach()});
    scaled.backward();
    bool finite = true;
    for (const auto& p : model->parameters()) finite = finite && torch::isfinite(p.grad()).all().item<bool>();
    if (finite) opt.step();
    out.stepped.push_back(finite);
    if (!finite) scale /= 2;
  }
  out.error = session.debug_error();
  out.scale = session.loss_scale();
  session.close();
  return out;
}

TEST(NumericsSession, ALossScalersOverflowIsCountedNotAnError) {
  const auto run = run_scaled(1024, {1, 2});
  EXPECT_FALSE(run.error) << (run.error ? run.error->position.to_string() : "");
  EXPECT_TRUE(run.scale.in_use);
  EXPECT_EQ(run.scale.skipped_steps, 2);
  EXPECT_EQ(run.scale.skips_in_row, 0);  // batch 3 stepped
  ASSERT_TRUE(run.scale.last_skipped);
  EXPECT_EQ(run.scale.last_skipped->batch_idx, 2);
  EXPECT_EQ(run.stepped, (std::vector<bool>{true, false, false, true, true, true}));
}

TEST(NumericsSession, ACollapsingLossScaleIsAnError) {
  // 4 -> 2 -> 1 -> 0.5: the step run at a scale below 1 trips.
  const auto run = run_scaled(4, {1, 2, 3, 4, 5});
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 4);
  EXPECT_NE(run.error->loss_scale.find("4 steps skipped in a row, scale 0.5 (below 1)"), std::string::npos)
      << run.error->loss_scale;
  EXPECT_EQ(run.scale.skipped_steps, 5);
}

TEST(NumericsSession, ANonFiniteLossIsAnErrorEvenWithFiniteGradientsAndAScaler) {
  const auto run = run_scaled(8, {}, /*nan_loss=*/3);
  ASSERT_TRUE(run.error);
  EXPECT_EQ(run.error->position.batch_idx, 3);
  ASSERT_EQ(run.error->layers.size(), 1u);
  EXPECT_EQ(run.error->layers[0].layer, "loss");
  EXPECT_EQ(run.error->layers[0].sources, (std::vector<std::string>{"loss"}));
  EXPECT_EQ(run.error->layers[0].nan, 1.0);
  EXPECT_EQ(run.scale.skipped_steps, 0);  // not the scaler's
}

}  // namespace
}  // namespace nansense
