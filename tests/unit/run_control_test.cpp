// Run control driven from the test thread against a real training thread.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <future>
#include <map>
#include <string>
#include <thread>

#include "nansense/nansense.h"
#include "session/session_access.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::Gate;
using test::kWait;
using test::message_of;
using test::TrainingThread;

BatchPosition at(std::string phase, int64_t epoch, int64_t batch) {
  BatchPosition p;
  p.phase = std::move(phase);
  p.epoch = epoch;
  p.batch_idx = batch;
  return p;
}

// A small MLP trained on random batches; `phases` run in order every epoch.
// Epochs are inferred by the schedule (no explicit epoch argument).
struct Trainer {
  Trainer(PhaseCounts phases_, int64_t epochs_)
      : phases(std::move(phases_)), epochs(epochs_), opt(model->parameters(), 0.05) {
    for (const auto& [name, n] : phases) data[name] = test::make_batches(n);
  }

  void run(Session& session) {
    for (int64_t e = 0; e < epochs; ++e) {
      for (const auto& [name, n] : phases) {
        for (auto& batch : session.batches(data[name], name)) {
          if (name == "train") {
            test::train_step(model, opt, batch.first, batch.second);
          } else {
            torch::NoGradGuard no_grad;
            model->forward(batch.first);
          }
          body_thread = std::this_thread::get_id();
          int index = bodies++;
          if (on_body) on_body(index);
        }
      }
    }
    session.close();
  }

  int64_t total() const {
    int64_t n = 0;
    for (const auto& p : phases) n += p.second;
    return n * epochs;
  }

  PhaseCounts phases;
  int64_t epochs;
  test::Mlp model;
  torch::optim::SGD opt;
  std::map<std::string, std::vector<test::Batch>> data;
  std::atomic<int> bodies{0};
  std::atomic<std::thread::id> body_thread{};
  std::function<void(int)> on_body;  // runs on the training thread after each body

  // Holds the loop inside body `index` (counted from 0 over the whole run):
  // opens `reached` there, then waits for `go`.
  void hold_in_body(int index, Gate& reached, Gate& go) {
    on_body = [index, &reached, &go](int i) {
      if (i == index) {
        reached.open();
        go.wait();
      }
    };
  }
};

void expect_paused_at(const Session& s, const BatchPosition& want) {
  ASSERT_EQ(s.wait_until_stopped(kWait), RunState::kPaused) << "expected a pause at " << want.to_string();
  auto live = s.live_position();
  ASSERT_TRUE(live);
  EXPECT_TRUE(live->same_batch(want)) << "paused at " << live->to_string() << ", expected " << want.to_string();
  EXPECT_EQ(s.state(), RunState::kPaused);
}

TEST(RunControl, FirstBatchPauses) {
  Trainer t({{"train", 4}}, 1);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });

  expect_paused_at(session, at("train", 0, 0));
  EXPECT_EQ(t.bodies.load(), 1) << "the first batch's body runs, then the loop pauses";
  EXPECT_EQ(session.mode(), Mode::kStepBatch);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap) << "the paused batch is captured";
  EXPECT_TRUE(snap->position.same_batch(at("train", 0, 0)));
  // Waiting again on a paused loop returns at once with the same position.
  expect_paused_at(session, at("train", 0, 0));
}

TEST(RunControl, StepBatchAdvancesExactlyOneBatch) {
  Trainer t({{"train", 5}}, 1);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });

  expect_paused_at(session, at("train", 0, 0));
  for (int i = 1; i < 4; ++i) {
    session.step_batch();
    expect_paused_at(session, at("train", 0, i));
    EXPECT_EQ(t.bodies.load(), i + 1);
    ASSERT_TRUE(session.snapshot());
    EXPECT_EQ(session.snapshot()->position.batch_idx, i);
    EXPECT_EQ(session.snapshot()->sequence, static_cast<uint64_t>(i + 1));
  }
}

TEST(RunControl, StateIsRunningAsSoonAsAResumeIsAccepted) {
  // A client that resumes and then waits must wait for the next pause, even
  // when the training thread has not woken up yet. Queued work keeps the
  // training thread busy inside the pause loop while the command arrives.
  Trainer t({{"train", 3}}, 1);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  Gate in_work, release;
  detail::core_of(session)->control().post([&] {
    in_work.open();
    release.wait();
  });
  ASSERT_TRUE(in_work.wait());
  session.step_batch();
  EXPECT_EQ(session.state(), RunState::kRunning);
  EXPECT_EQ(session.wait_until_stopped(std::chrono::milliseconds(50)), RunState::kRunning)
      << "the old pause must not satisfy a wait that follows a step";
  release.open();
  expect_paused_at(session, at("train", 0, 1));
}

TEST(RunControl, CommandGivenWhileABatchRunsIsNotLost) {
  // Step batch, then detach while that batch is still running: the pause the
  // step asked for is superseded, and the run goes to the end.
  Trainer t({{"train", 4}}, 1);
  Gate reached, go;
  t.hold_in_body(1, reached, go);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.step_batch();
  ASSERT_TRUE(reached.wait());
  session.detach();
  go.open();
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  EXPECT_EQ(t.bodies.load(), 4);
}

TEST(RunControl, StepPhaseStopsAtTheFirstBatchOfTheNextPhase) {
  Trainer t({{"train", 4}, {"val", 2}}, 2);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.step_phase();
  expect_paused_at(session, at("val", 0, 0));
  EXPECT_EQ(t.bodies.load(), 5);
  session.step_phase();
  expect_paused_at(session, at("train", 1, 0));
  EXPECT_EQ(t.bodies.load(), 7);
  ASSERT_TRUE(session.snapshot());
  EXPECT_TRUE(session.snapshot()->position.same_batch(at("train", 1, 0)));
}

TEST(RunControl, StepEpochStopsAtBatchZeroOfTheNextEpoch) {
  Trainer t({{"train", 3}, {"val", 2}}, 3);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.step_batch();
  expect_paused_at(session, at("train", 0, 1));
  session.step_epoch();
  expect_paused_at(session, at("train", 1, 0));
  EXPECT_EQ(t.bodies.load(), 6);
  session.step_epoch();
  expect_paused_at(session, at("train", 2, 0));
  EXPECT_EQ(t.bodies.load(), 11);
}

TEST(RunControl, StepUntilPositionStopsExactlyAtTheTarget) {
  Trainer t({{"train", 4}, {"val", 2}}, 2);
  auto session = start(t.model, StartOptions().epochs(2).phases(PhaseCounts{{"train", 4}, {"val", 2}}));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.run_until(at("train", 0, 2));
  expect_paused_at(session, at("train", 0, 2));
  EXPECT_EQ(t.bodies.load(), 3);
  session.run_until(at("val", 1, 0));
  expect_paused_at(session, at("val", 1, 0));
  EXPECT_EQ(t.bodies.load(), 6 + 4 + 1);
  ASSERT_TRUE(session.snapshot());
  EXPECT_TRUE(session.snapshot()->position.same_batch(at("val", 1, 0)));
}

TEST(RunControl, StepUntilPositionRefusesImpossibleTargets) {
  Trainer t({{"train", 4}, {"val", 2}}, 2);
  auto session = start(t.model, StartOptions().epochs(2).phases(PhaseCounts{{"train", 4}, {"val", 2}}));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  session.run_until(at("train", 0, 2));
  expect_paused_at(session, at("train", 0, 2));

  auto past = message_of<ControlError>([&] { session.run_until(at("train", 0, 1)); });
  EXPECT_NE(past.find("epoch 0 | train batch 1"), std::string::npos) << past;
  EXPECT_NE(past.find("epoch 0 | train batch 2"), std::string::npos) << "names the current position: " << past;
  auto here = message_of<ControlError>([&] { session.run_until(at("train", 0, 2)); });
  EXPECT_NE(here.find("not after"), std::string::npos) << here;

  auto phase = message_of<ControlError>([&] { session.run_until(at("test", 0, 0)); });
  EXPECT_NE(phase.find("'test'"), std::string::npos) << phase;
  EXPECT_NE(phase.find("train, val"), std::string::npos) << "lists the known phases: " << phase;

  auto batch = message_of<ControlError>([&] { session.run_until(at("val", 0, 2)); });
  EXPECT_NE(batch.find("batch 2"), std::string::npos) << batch;
  EXPECT_NE(batch.find("2 batches"), std::string::npos) << batch;

  auto epoch = message_of<ControlError>([&] { session.run_until(at("train", 2, 0)); });
  EXPECT_NE(epoch.find("epoch 2"), std::string::npos) << epoch;
  EXPECT_NE(epoch.find("2 epochs"), std::string::npos) << epoch;

  EXPECT_THROW(session.run_until(at("train", 0, -1)), ControlError);

  // A refused command leaves the loop where it was.
  expect_paused_at(session, at("train", 0, 2));
  EXPECT_EQ(t.bodies.load(), 3);
}

TEST(RunControl, StepRunPausesAtTheLastBatchOfTheRun) {
  Trainer t({{"train", 3}, {"val", 2}}, 2);
  auto session = start(t.model, StartOptions().epochs(2).phases(PhaseCounts{{"train", 3}, {"val", 2}}));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.run();
  expect_paused_at(session, at("val", 1, 1));
  EXPECT_TRUE(session.live_position()->is_last_in_run);
  EXPECT_EQ(t.bodies.load(), 10);
  ASSERT_TRUE(session.snapshot());
  EXPECT_TRUE(session.snapshot()->position.is_last_in_run);

  // Stepping past the last batch ends the run; the loop's close() finishes it.
  session.step_batch();
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  EXPECT_EQ(session.state(), RunState::kFinished);
  auto msg = message_of<ControlError>([&] { session.step_batch(); });
  EXPECT_NE(msg.find("finished"), std::string::npos) << msg;
  EXPECT_THROW(session.run_until(at("val", 1, 1)), ControlError);
  EXPECT_THROW(session.detach(), ControlError);
}

TEST(RunControl, DetachRunsToCompletionWithoutPausing) {
  Trainer t({{"train", 6}, {"val", 2}}, 3);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.detach();
  EXPECT_EQ(session.mode(), Mode::kDetach);
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
  EXPECT_EQ(t.bodies.load(), t.total());
  ASSERT_TRUE(session.snapshot());
  EXPECT_EQ(session.snapshot()->sequence, 1u) << "a detached run captures nothing more";
  EXPECT_TRUE(session.live_position()->same_batch(at("val", 2, 1)));
}

TEST(RunControl, StopWhileRunningPausesAtTheNextBoundary) {
  Trainer t({{"train", 40}}, 1);
  Gate reached, go;
  t.hold_in_body(5, reached, go);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));

  session.detach();
  ASSERT_TRUE(reached.wait());  // the loop is inside batch 5
  EXPECT_EQ(session.state(), RunState::kRunning);
  session.pause();
  go.open();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto live = session.live_position();
  ASSERT_TRUE(live);
  // Batch 5's boundary decision was taken before stop(): the pause comes at
  // the end of batch 5 or, at the latest, of batch 6 — never near the end.
  EXPECT_GE(live->batch_idx, 5);
  EXPECT_LE(live->batch_idx, 6);
  EXPECT_EQ(t.bodies.load(), live->batch_idx + 1);
  EXPECT_EQ(session.mode(), Mode::kStepBatch);
  ASSERT_TRUE(session.snapshot());
  EXPECT_TRUE(session.snapshot()->position.same_batch(*live)) << "the batch paused on is the one captured";

  // stop() on a paused loop changes nothing.
  session.pause();
  expect_paused_at(session, *live);
}

TEST(RunControl, SteppingPastTheLastBatchFinishes) {
  Trainer t({{"train", 3}}, 1);
  auto session = start(t.model, StartOptions().epochs(1));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  session.step_batch();
  expect_paused_at(session, at("train", 0, 1));
  session.step_batch();
  expect_paused_at(session, at("train", 0, 2));
  session.step_batch();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  thread.join();
  EXPECT_EQ(t.bodies.load(), 3);
  EXPECT_EQ(session.state(), RunState::kFinished);
}

TEST(RunControl, CloseReleasesAWaiter) {
  Trainer t({{"train", 4}}, 1);
  Gate reached, go;
  t.hold_in_body(2, reached, go);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  session.detach();
  ASSERT_TRUE(reached.wait());

  // A waiter blocked while the loop runs; only close() can release it.
  std::promise<RunState> result;
  auto released = result.get_future();
  auto began = std::chrono::steady_clock::now();
  std::thread waiter([&] { result.set_value(session.wait_until_stopped(std::chrono::seconds(60))); });
  go.open();
  ASSERT_EQ(released.wait_for(kWait), std::future_status::ready) << "close() did not release the waiter";
  waiter.join();
  EXPECT_EQ(released.get(), RunState::kFinished);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(30));
}

TEST(RunControl, ALoopThatThrowsIsLost) {
  Trainer t({{"train", 5}}, 1);
  t.on_body = [&](int i) {
    if (i == 2) throw std::runtime_error("boom");
  };
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  session.step_batch();
  expect_paused_at(session, at("train", 0, 1));
  session.step_batch();

  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kLost);
  EXPECT_EQ(session.state(), RunState::kLost);
  thread.join();
  ASSERT_TRUE(thread.error()) << "the user's exception reaches the user's code";
  EXPECT_THROW(std::rethrow_exception(thread.error()), std::runtime_error);
  auto reason = detail::core_of(session)->control().lost_reason();
  EXPECT_NE(reason.find("epoch 0 | train batch 2"), std::string::npos) << reason;

  auto msg = message_of<ControlError>([&] { session.step_batch(); });
  EXPECT_NE(msg.find("lost"), std::string::npos) << msg;
  // close() after the loss keeps reporting the loss.
  session.close();
  EXPECT_EQ(session.state(), RunState::kLost);
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kLost);
}

TEST(RunControl, AScheduleViolationReachesTheLoopAndLosesTheRun) {
  Trainer t({{"train", 3}}, 1);
  auto session = start(t.model, StartOptions().phases(PhaseCounts{{"train", 2}}));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  session.detach();
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kLost);
  thread.join();
  ASSERT_TRUE(thread.error());
  auto msg = message_of<ScheduleError>([&] { std::rethrow_exception(thread.error()); });
  EXPECT_NE(msg.find("'train'"), std::string::npos) << msg;
  EXPECT_NE(detail::core_of(session)->control().lost_reason().find("declared schedule"), std::string::npos)
      << detail::core_of(session)->control().lost_reason();
  EXPECT_EQ(t.bodies.load(), 2);
}

TEST(RunControl, PostRunsWorkOnTheTrainingThread) {
  Trainer t({{"train", 4}}, 1);
  auto session = start(t.model);
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  auto& control = detail::core_of(session)->control();

  // Work queued while paused runs at once, inside the pause.
  std::promise<std::thread::id> ran_on;
  auto ran = ran_on.get_future();
  control.post([&] { ran_on.set_value(std::this_thread::get_id()); });
  ASSERT_EQ(ran.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(ran.get(), t.body_thread.load());
  EXPECT_NE(t.body_thread.load(), std::this_thread::get_id());
  expect_paused_at(session, at("train", 0, 0));

  // Work that throws is reported, not propagated into training; later work still runs.
  control.post([] { throw std::runtime_error("experiment failed"); });
  std::promise<int> next;
  auto next_ran = next.get_future();
  control.post([&] { next.set_value(t.bodies.load()); });
  ASSERT_EQ(next_ran.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(next_ran.get(), 1) << "the loop stayed paused while work ran";
  expect_paused_at(session, at("train", 0, 0));

  // The work can use the model: it runs where the model lives.
  std::promise<double> weight_sum;
  auto summed = weight_sum.get_future();
  control.post([&] {
    torch::NoGradGuard no_grad;
    weight_sum.set_value(t.model->net[0]->as<torch::nn::Linear>()->weight.sum().item<double>());
  });
  ASSERT_EQ(summed.wait_for(kWait), std::future_status::ready);
  EXPECT_TRUE(std::isfinite(summed.get()));

  session.detach();
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
  EXPECT_THROW(control.post([] {}), ControlError) << "no training thread is left to run it";
}

// Python's Ctrl-C: a pause check (off by default) runs on the training
// thread while paused and can leave the pause; the mode is kept.
TEST(RunControl, APauseCheckCanLeaveAPauseWhichKeepsItsMode) {
  Trainer t({{"train", 4}}, 1);
  auto session = start(t.model);
  auto& control = detail::core_of(session)->control();
  std::atomic<bool> leave{false}, left{false};
  std::promise<std::thread::id> checking_again;
  auto again = checking_again.get_future();
  control.set_pause_check(
      [&] {
        if (leave.exchange(false)) return left = true;
        if (left.exchange(false)) checking_again.set_value(std::this_thread::get_id());
        return false;
      },
      std::chrono::milliseconds(1));
  TrainingThread thread(session, [&] { t.run(session); });
  expect_paused_at(session, at("train", 0, 0));
  leave = true;
  ASSERT_EQ(again.wait_for(kWait), std::future_status::ready) << "the check did not run in the next pause";
  EXPECT_EQ(again.get(), t.body_thread.load());
  expect_paused_at(session, at("train", 0, 1));
  EXPECT_EQ(t.bodies.load(), 2);
  EXPECT_EQ(session.mode(), Mode::kStepBatch);
  session.detach();
  EXPECT_EQ(session.wait_until_stopped(kWait), RunState::kFinished);
}

TEST(RunControl, DisabledSessionIsAPassThrough) {
  Trainer t({{"train", 3}}, 2);
  auto session = start(t.model, StartOptions().enabled(false));
  EXPECT_FALSE(session.enabled());
  t.run(session);  // on this thread: nothing may pause
  EXPECT_EQ(t.bodies.load(), 6);
  EXPECT_FALSE(session.snapshot());
  EXPECT_FALSE(session.live_position());
  EXPECT_NO_THROW(session.step_batch());
}

}  // namespace
}  // namespace nansense

TEST(RunControl, BreakingOutOfALoopEndsItsPhase) {
  auto model = torch::nn::Linear(2, 2);
  auto session = nansense::start(model, nansense::StartOptions());
  session.detach();
  std::vector<torch::Tensor> data = {torch::randn({1, 2}), torch::randn({1, 2}), torch::randn({1, 2})};
  for (int epoch = 0; epoch < 2; ++epoch) {
    int seen = 0;
    for (auto& x : session.batches(data, "train")) {
      model->forward(x);
      if (++seen == 2) break;
    }
  }
  // The second loop is a new epoch (one phase, no epoch argument), not batches 2 and 3.
  auto pos = session.live_position();
  ASSERT_TRUE(pos);
  EXPECT_EQ(pos->epoch, 1);
  EXPECT_EQ(pos->batch_idx, 1);
  // A phase left early has no learned length.
  EXPECT_FALSE(session.schedule().phase_count("train"));
  session.close();
}

namespace {
// Eight random 3-feature examples with labels, as a torch::data dataset.
struct RandomExamples : torch::data::datasets::Dataset<RandomExamples> {
  torch::data::Example<> get(size_t index) override {
    return {torch::full({3}, static_cast<float>(index)), torch::tensor(static_cast<int64_t>(index % 2))};
  }
  torch::optional<size_t> size() const override { return 8; }
};
}  // namespace

TEST(Batches, DriveTorchDataLoadersDirectly) {
  auto model = torch::nn::Linear(3, 2);
  auto session = nansense::start(model, nansense::StartOptions());
  auto stacked = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      RandomExamples().map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(4));
  std::thread trainer([&] {
    for (auto& batch : session.batches(*stacked, "train")) model->forward(batch.data);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(std::chrono::seconds(20)), nansense::RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->inputs.size(), 1u);
  EXPECT_EQ(snap->inputs[0].sizes(), (std::vector<int64_t>{4, 3}));
  // A root Linear runs t(weight) then addmm: the transpose is no layer of its own;
  // parameters are listed in declaration order.
  ASSERT_EQ(snap->architecture->layers.size(), 2u);
  EXPECT_EQ(snap->architecture->layers[0].name, "input");
  EXPECT_EQ(snap->architecture->layers[1].name, "addmm");
  EXPECT_EQ(snap->architecture->layers[1].parameters, (std::vector<std::string>{"weight", "bias"}));
  session.detach();
  trainer.join();
  EXPECT_EQ(session.schedule().phase_count("train"), 2);
}

TEST(Batches, UnstackedExampleBatchesAreOneInputLayer) {
  auto model = torch::nn::Linear(3, 2);
  auto session = nansense::start(model, nansense::StartOptions());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      RandomExamples(), torch::data::DataLoaderOptions().batch_size(4));
  std::thread trainer([&] {
    for (auto& examples : session.batches(*loader, "train")) {
      std::vector<torch::Tensor> rows;
      for (auto& e : examples) rows.push_back(e.data);
      model->forward(torch::stack(rows));
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(std::chrono::seconds(20)), nansense::RunState::kPaused);
  auto arch = session.architecture();
  ASSERT_TRUE(arch);
  EXPECT_EQ(arch->inputs, (std::vector<std::string>{"input"}));
  EXPECT_EQ(session.snapshot()->inputs[0].sizes(), (std::vector<int64_t>{4, 3}));
  session.detach();
  trainer.join();
}

namespace {
// A model as LibTorch's MNIST example holds it: a plain object, no TORCH_MODULE.
struct StackNet : torch::nn::Module {
  StackNet() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{3, 4};
  torch::nn::Linear fc2{4, 2};
};

// A loop in a template function taking the loader by reference, as the MNIST
// example's train() and test() do; counts the batches it saw.
template <class Loader>
int run_loop(StackNet& model, Loader& loader, int stop_after = -1) {
  int seen = 0;
  for (const auto& batch : loader) {
    model.forward(batch.data);
    if (++seen == stop_after) break;
  }
  return seen;
}
}  // namespace

TEST(Batches, AModelOnTheStackIsTakenByReference) {
  StackNet model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto session = nansense::start(model, nansense::StartOptions().optimizer(&optimizer));
  std::vector<torch::data::Example<>> data;
  for (int i = 0; i < 2; ++i) data.push_back({torch::randn({4, 3}), torch::randint(2, {4})});
  std::thread trainer([&] {
    for (auto& batch : session.batches(data, "train")) {
      optimizer.zero_grad();
      torch::cross_entropy_loss(model.forward(batch.data), batch.target).backward();
      optimizer.step();
    }
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(std::chrono::seconds(20)), nansense::RunState::kPaused);
  auto snap = session.snapshot();
  ASSERT_TRUE(snap);
  std::vector<std::string> names;
  for (const auto& l : snap->architecture->layers) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"input", "fc1", "relu", "fc2"}));
  EXPECT_EQ(snap->optimizer_state.at("fc1.weight").count("momentum_buffer"), 1u);
  session.detach();
  trainer.join();
  EXPECT_EQ(session.state(), nansense::RunState::kFinished);
}

TEST(Batches, AWrapperMadeOnceServesEveryEpoch) {
  StackNet model;
  auto session = nansense::start(model, nansense::StartOptions());
  session.detach();
  std::vector<torch::data::Example<>> data;
  for (int i = 0; i < 3; ++i) data.push_back({torch::randn({2, 3}), torch::zeros({2}, torch::kLong)});
  auto train = session.batches(data, "train");
  EXPECT_EQ(run_loop(model, train), 3);
  EXPECT_EQ(session.schedule().phase_count("train"), 3);
  // A pass left early (a break) ends there; the next pass is a new epoch from batch 0.
  EXPECT_EQ(run_loop(model, train, /*stop_after=*/1), 1);
  auto pos = session.live_position();
  ASSERT_TRUE(pos);
  EXPECT_EQ(pos->epoch, 1);
  EXPECT_EQ(pos->batch_idx, 0);
  EXPECT_EQ(run_loop(model, train), 3);
  pos = session.live_position();
  ASSERT_TRUE(pos);
  EXPECT_EQ(pos->epoch, 2);
  EXPECT_EQ(pos->batch_idx, 2);
  EXPECT_EQ(session.schedule().phase_count("train"), 3);
  session.close();
}

namespace nansense {
namespace {

// The live-update cadence, decided at each boundary by run control alone.
std::vector<std::string> captured_batches(detail::RunControl& control, int64_t epochs) {
  std::vector<std::string> out;
  for (int64_t e = 0; e < epochs; ++e) {
    for (const auto& [phase, n] : PhaseCounts{{"train", 4}, {"val", 2}}) {
      for (int64_t b = 0; b < n; ++b) {
        if (control.decide(at(phase, e, b)).capture) out.push_back(at(phase, e, b).to_string());
      }
    }
  }
  return out;
}

TEST(UpdateCadenceTest, EveryNBatchesOfAPhaseOrEveryNEpochsAndNeverDetached) {
  Schedule schedule(3, PhaseCounts{{"train", 4}, {"val", 2}});
  detail::RunControl control(schedule);
  control.run();  // no pause before the last batch of the run
  control.set_update_frequency(UpdateFrequency::batches(2, "train"));
  EXPECT_EQ(captured_batches(control, 2),
            std::vector<std::string>({at("train", 0, 1).to_string(), at("train", 0, 3).to_string(),
                                      at("train", 1, 1).to_string(), at("train", 1, 3).to_string()}));
  // Without a phase every batch counts: the 4th, 8th and 12th of 2 x (4 + 2).
  control.set_update_frequency(UpdateFrequency::batches(4));
  EXPECT_EQ(captured_batches(control, 2),
            std::vector<std::string>(
                {at("train", 0, 3).to_string(), at("train", 1, 1).to_string(), at("val", 1, 1).to_string()}));
  control.set_update_frequency(UpdateFrequency::epochs(2));
  EXPECT_EQ(captured_batches(control, 3),
            std::vector<std::string>({at("train", 0, 0).to_string(), at("train", 2, 0).to_string()}));
  // A refresh still captures the next batch, whatever the cadence.
  control.refresh();
  EXPECT_TRUE(control.decide(at("train", 1, 2)).capture);
  control.detach();
  control.set_update_frequency(UpdateFrequency::batches(1));
  EXPECT_TRUE(captured_batches(control, 1).empty());
}

TEST(UpdateCadenceTest, BadFrequenciesAreRefusedAndChangeNothing) {
  Schedule schedule(3, PhaseCounts{{"train", 4}, {"val", 2}});
  detail::RunControl control(schedule);
  const auto before = control.update_frequency();
  EXPECT_EQ(before, UpdateFrequency::seconds(2));
  auto refusal = [&](const UpdateFrequency& f) {
    return message_of<UsageError>([&] { control.set_update_frequency(f); });
  };
  EXPECT_NE(refusal(UpdateFrequency::batches(0)).find("whole number n >= 1"), std::string::npos);
  EXPECT_NE(refusal(UpdateFrequency().unit(UpdateFrequency::Unit::kBatch).n(2.5)).find("whole number"),
            std::string::npos);
  EXPECT_NE(refusal(UpdateFrequency::seconds(-1)).find("n > 0"), std::string::npos);
  EXPECT_NE(refusal(UpdateFrequency::epochs(1).phase("train")).find("only to the batch unit"), std::string::npos);
  EXPECT_NE(refusal(UpdateFrequency::batches(1, "test")).find("known phases: train, val"), std::string::npos);
  EXPECT_EQ(control.update_frequency(), before);
}

// The reference API's names (stop, step_run, step_until_position,
// request_snapshot, wait_until_paused, pause_count, Mode::kStep...) are our
// operations under another name.
TEST(RunControl, TheReferenceNamesDriveTheSameRunControl) {
  static_assert(Mode::kStep == Mode::kStepBatch && Mode::kUntilPhaseChange == Mode::kStepPhase &&
                Mode::kUntilEpochChange == Mode::kStepEpoch && Mode::kUntilPosition == Mode::kRunUntil &&
                Mode::kUntilEnd == Mode::kRun);
  Trainer t({{"train", 4}, {"val", 2}}, 3);
  // The epoch count declared, the phases learned as the loop runs.
  auto session = start(t.model, StartOptions().epochs(3));
  EXPECT_EQ(session.pause_count(), 0);
  TrainingThread thread(session, [&] { t.run(session); });

  ASSERT_TRUE(session.wait_until_paused(0, kWait));
  expect_paused_at(session, at("train", 0, 0));
  EXPECT_EQ(session.pause_count(), 1);
  EXPECT_EQ(session.mode(), Mode::kStep);
  // Already past one pause: waiting for more than one times out while paused.
  EXPECT_FALSE(session.wait_until_paused(1, std::chrono::milliseconds(50)));

  // The phase by its index in the phase order ("val" is index 1 once seen).
  EXPECT_THROW(session.step_until_position(1, 0, 1), UsageError) << "val has not been seen yet";
  // The loop is held inside the next batch while the mode is read: it could
  // otherwise reach batch 2 and pause (back in kStep) first.
  Gate in_batch, resume;
  t.hold_in_body(t.bodies.load(), in_batch, resume);
  session.step_until_position(0, 0, 2);
  ASSERT_TRUE(in_batch.wait());
  EXPECT_EQ(session.mode(), Mode::kUntilPosition);
  resume.open();
  ASSERT_TRUE(session.wait_until_paused(1, kWait));
  expect_paused_at(session, at("train", 0, 2));
  EXPECT_EQ(session.pause_count(), 2);

  session.step_until_position(0, 1, 1);  // train, epoch 1, batch 1
  ASSERT_TRUE(session.wait_until_paused(2, kWait));
  expect_paused_at(session, at("train", 1, 1));
  session.step_until_position(1, 1, 0);  // val is index 1 now
  ASSERT_TRUE(session.wait_until_paused(3, kWait));
  expect_paused_at(session, at("val", 1, 0));

  // stop() while running pauses at the next boundary, as pause() does.
  Gate reached, go;
  t.hold_in_body(t.bodies.load(), reached, go);
  const int64_t before = session.pause_count();
  session.detach();
  ASSERT_TRUE(reached.wait());
  session.stop();
  EXPECT_EQ(session.mode(), Mode::kStep);
  go.open();
  ASSERT_TRUE(session.wait_until_paused(before, kWait));
  EXPECT_EQ(session.pause_count(), before + 1);

  // request_snapshot() publishes the next batch without pausing; step_run()
  // then runs to the run's last batch.
  session.request_snapshot();
  Gate running, on;
  t.hold_in_body(t.bodies.load(), running, on);
  session.step_run();
  ASSERT_TRUE(running.wait());
  EXPECT_EQ(session.mode(), Mode::kUntilEnd);
  on.open();
  ASSERT_TRUE(session.wait_until_paused(before + 1, kWait));
  expect_paused_at(session, at("val", 2, 1));
  EXPECT_TRUE(session.live_position()->is_last_in_run);
  session.step_batch();
  thread.join();
  EXPECT_EQ(session.state(), RunState::kFinished);
  // Finished: the wait returns true at once, whatever the count.
  EXPECT_TRUE(session.wait_until_paused(1000, std::chrono::milliseconds(0)));
}

}  // namespace
}  // namespace nansense
