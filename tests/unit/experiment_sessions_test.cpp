// Experiments as a session runs them: the pages' auto experiments (one per
// tab, re-run at each snapshot, expiring by the clock they are given), and
// what stops a running experiment besides a cancel: a time-travel jump and
// the session closing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <functional>

#include "experiments/auto_runs.h"
#include "experiments/engine.h"
#include "fashion_mnist/model.h"
#include "nansense/nansense.h"
#include "session/session_access.h"
#include "test_models.h"

namespace nansense {
namespace {

using experiments::AutoRuns;
using experiments::json;
using experiments::Result;
using test::kWait;
using test::TrainingThread;
using namespace std::chrono_literals;

using test::quiet_checks;
using test::quiet_server;

std::vector<test::Batch> images(int n) {
  std::vector<test::Batch> data;
  for (int i = 0; i < n; ++i) data.emplace_back(torch::rand({4, 1, 28, 28}), torch::randint(10, {4}));
  return data;
}

// Result `seq` once it left the queue (running or further).
std::shared_ptr<const Result> wait_running(Session& session, uint64_t seq) {
  auto& engine = detail::core_of(session)->experiments();
  for (uint64_t seen = 0;;) {
    auto r = engine.result(seq);
    if (!r || r->stage != Result::Stage::kQueued) return r;
    seen = detail::core_of(session)->control().wait_for_change(seen, kWait);
  }
}

// Waits on the session's change counter until `done` holds (false after kWait).
bool wait_for(Session& session, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  for (uint64_t seen = 0; !done();) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    seen = detail::core_of(session)->control().wait_for_change(seen, 100ms);
  }
  return true;
}

// Result `seq` once it exists and finished (null after kWait).
std::shared_ptr<const Result> wait_finished(Session& session, uint64_t seq) {
  auto& engine = detail::core_of(session)->experiments();
  std::shared_ptr<const Result> r;
  wait_for(session, [&] {
    r = engine.result(seq);
    return r && r->finished();
  });
  return r && r->finished() ? r : nullptr;
}

// Steps one batch and waits for the pause on the next one (not the old pause
// the loop has yet to leave).
bool step_and_pause(Session& session) {
  auto& control = detail::core_of(session)->control();
  const int64_t before = control.paused_at()->batch_idx;
  session.step_batch();
  return wait_for(session, [&] {
    auto at = control.paused_at();
    return at && at->batch_idx != before;
  });
}

TEST(AutoExperiments, TheRegistryRenewsAndExpiresByTheTimesItIsGiven) {
  AutoRuns runs;
  const AutoRuns::Clock::time_point t0{std::chrono::hours(1)};
  EXPECT_TRUE(runs.put("a", "gradcam", "conv", json::object(), t0));
  // A heartbeat with the same experiment only renews it.
  EXPECT_FALSE(runs.put("a", "gradcam", "conv", json::object(), t0 + 1s));
  EXPECT_TRUE(runs.put("b", "neuron_gradient", "conv", {{"channel", 1}}, t0 + 2s));
  // A changed experiment is a new one (it runs at once), under the same tab.
  EXPECT_TRUE(runs.put("a", "gradcam", "conv", {{"target", 1}}, t0 + 3s));
  ASSERT_EQ(runs.entries().size(), 2u);
  EXPECT_EQ(runs.entries()[0].params, json({{"target", 1}}));
  // b was renewed 5 s ago: not yet more than kTtl.
  EXPECT_TRUE(runs.expire(t0 + 7s).empty());
  EXPECT_EQ(runs.expire(t0 + 7500ms), std::vector<std::string>{"b"});
  ASSERT_EQ(runs.entries().size(), 1u);
  EXPECT_EQ(runs.entries()[0].tab, "a");
  EXPECT_TRUE(runs.remove("a"));
  EXPECT_FALSE(runs.remove("a"));
  EXPECT_TRUE(runs.entries().empty());
}

TEST(AutoExperiments, APinnedEntryNeverExpiresUntilRemoved) {
  AutoRuns runs;
  const AutoRuns::Clock::time_point t0{std::chrono::hours(1)};
  EXPECT_FALSE(runs.any_pinned());
  EXPECT_TRUE(runs.put("recording:experiment:conv", "gradcam", "conv", json::object(), t0, true));
  EXPECT_TRUE(runs.put("page", "gradcam", "conv", json::object(), t0));
  EXPECT_TRUE(runs.any_pinned());
  EXPECT_EQ(runs.expire(t0 + std::chrono::hours(24)), std::vector<std::string>{"page"});
  ASSERT_EQ(runs.entries().size(), 1u);
  EXPECT_TRUE(runs.entries()[0].pinned);
  EXPECT_TRUE(runs.remove("recording:experiment:conv"));
  EXPECT_FALSE(runs.any_pinned());
}

TEST(AutoExperiments, APinnedExperimentReRunsAtEverySnapshotWithAutoRunOff) {
  torch::manual_seed(4);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto data = images(4);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& engine = detail::core_of(session)->experiments();
  ASSERT_FALSE(engine.auto_run());
  EXPECT_FALSE(engine.runs_at_updates());
  const auto now = experiments::Engine::Clock::now();
  auto pinned = engine.set_auto("recording:x", "gradcam", "features.3", {{"batch", 1}}, now, true);
  ASSERT_NE(pinned.seq, 0u);
  EXPECT_TRUE(engine.runs_at_updates());
  ASSERT_TRUE(wait_finished(session, pinned.seq));
  // Long after any heartbeat, the next snapshot still re-runs it.
  EXPECT_EQ(engine.auto_entries(now + std::chrono::hours(1)).size(), 1u);
  ASSERT_TRUE(step_and_pause(session));
  auto rerun = wait_finished(session, pinned.seq + 1);
  ASSERT_TRUE(rerun);
  EXPECT_EQ(rerun->tab, "recording:x");
  EXPECT_EQ(rerun->stage, Result::Stage::kDone) << rerun->error;
  const auto latest = engine.latest_finished([](const Result& r) { return r.tab == "recording:x"; });
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->seq, rerun->seq);
  EXPECT_TRUE(engine.clear_auto("recording:x"));
  EXPECT_FALSE(engine.runs_at_updates());
  ASSERT_TRUE(step_and_pause(session));
  EXPECT_FALSE(engine.pending());
  EXPECT_EQ(engine.kept().back(), rerun->seq);
  session.detach();
  loop.join();
  EXPECT_FALSE(loop.error());
}

TEST(AutoExperiments, EachTabsExperimentReRunsAtEverySnapshotWithoutCancellingAnother) {
  torch::manual_seed(4);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto data = images(4);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& engine = detail::core_of(session)->experiments();
  engine.set_auto_run(true);
  const auto now = experiments::Engine::Clock::now();

  // Registering runs a new experiment at once in a pause; a renewal does not.
  auto a = engine.set_auto("tab-a", "gradcam", "features.3", {{"batch", 1}}, now);
  ASSERT_NE(a.seq, 0u);
  auto b = engine.set_auto("tab-b", "neuron_gradient", "features.0", {{"batch", 1}, {"colour", 2}}, now);
  ASSERT_NE(b.seq, 0u);
  EXPECT_EQ(b.ignored, std::vector<std::string>{"colour"});
  ASSERT_TRUE(engine.wait(b.seq, kWait)->finished());
  EXPECT_EQ(engine.result(a.seq)->stage, Result::Stage::kDone) << engine.result(a.seq)->error;
  EXPECT_EQ(engine.result(a.seq)->tab, "tab-a");
  EXPECT_EQ(engine.set_auto("tab-a", "gradcam", "features.3", {{"batch", 1}}, now).seq, 0u);
  // A registration is checked like a request.
  auto msg = test::message_of<common::Refusal>(
      [&] { engine.set_auto("tab-c", "gradcam", "classifier.1", json::object(), now); });
  EXPECT_NE(msg.find("spatial"), std::string::npos) << msg;

  // The next snapshot re-runs both, in registration order, each to the end.
  ASSERT_TRUE(step_and_pause(session));
  auto rerun_b = wait_finished(session, b.seq + 2);
  ASSERT_TRUE(rerun_b);
  EXPECT_EQ(rerun_b->tab, "tab-b");
  EXPECT_EQ(rerun_b->stage, Result::Stage::kDone) << rerun_b->error;
  auto rerun_a = engine.result(b.seq + 1);
  ASSERT_TRUE(rerun_a);
  EXPECT_EQ(rerun_a->tab, "tab-a");
  EXPECT_EQ(rerun_a->stage, Result::Stage::kDone) << rerun_a->error;

  // 5 s after their last renewal both are gone (an explicit, later time, not
  // a wait): the next snapshot runs nothing.
  EXPECT_EQ(engine.auto_entries(now + 4s).size(), 2u);
  EXPECT_TRUE(engine.auto_entries(now + AutoRuns::kTtl + 1s).empty());
  ASSERT_TRUE(step_and_pause(session));
  EXPECT_FALSE(engine.pending());
  EXPECT_EQ(engine.kept().back(), b.seq + 2);

  // Auto-run off: a registered experiment runs once (new, in a pause), then
  // waits; clear forgets it.
  engine.set_auto_run(false);
  auto once = engine.set_auto("tab-a", "gradcam", "features.3", {{"batch", 1}}, experiments::Engine::Clock::now());
  ASSERT_NE(once.seq, 0u);
  ASSERT_TRUE(wait_finished(session, once.seq));
  ASSERT_TRUE(step_and_pause(session));
  EXPECT_FALSE(engine.pending());
  EXPECT_EQ(engine.kept().back(), once.seq);
  EXPECT_TRUE(engine.clear_auto("tab-a"));
  EXPECT_FALSE(engine.clear_auto("tab-a"));
  session.detach();
  loop.join();
  EXPECT_FALSE(loop.error());
}

TEST(ExperimentStops, ATimeTravelJumpStopsARunningExperiment) {
  torch::manual_seed(5);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto data = images(2);
  const auto dir = std::filesystem::temp_directory_path() / ("nansense_exp_jump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    session.epochs(
        3,
        [&](int64_t) {
          for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
        },
        EpochOptions().cache_dir(dir.string()));
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  BatchPosition epoch1;
  epoch1.phase = "train";
  epoch1.epoch = 1;
  epoch1.batch_idx = 0;
  session.run_until(epoch1);
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  ASSERT_EQ(session.live_position()->epoch, 1);

  auto& engine = detail::core_of(session)->experiments();
  auto dream = engine.submit("deep_dream", "features.3", {{"steps", 10000}, {"channels", 1}});
  auto behind = engine.submit("gradcam", "features.3", {{"batch", 1}});
  ASSERT_EQ(wait_running(session, dream.seq)->stage, Result::Stage::kRunning);
  session.request_time_travel(0);
  auto r = engine.wait(dream.seq, kWait);
  ASSERT_TRUE(r && r->finished());
  EXPECT_EQ(r->stage, Result::Stage::kStopped);
  EXPECT_NE(r->stop_reason.find("jumped"), std::string::npos) << r->stop_reason;
  EXPECT_LT(r->step, 10000);
  // The request behind it waited its turn and runs in the pause the jump
  // lands in, at epoch 0.
  auto next = engine.wait(behind.seq, kWait);
  ASSERT_TRUE(next && next->finished());
  EXPECT_EQ(next->stage, Result::Stage::kDone) << next->error;
  auto at = detail::core_of(session)->control().paused_at();
  ASSERT_TRUE(at);
  EXPECT_EQ(at->epoch, 0);
  session.detach();
  loop.join();
  EXPECT_FALSE(loop.error());
  std::filesystem::remove_all(dir);
}

TEST(ExperimentStops, ClosingTheSessionStopsTheRunningExperimentAndTheQueue) {
  torch::manual_seed(6);
  FashionCnn model;
  torch::optim::SGD opt(model->parameters(), 0.01);
  auto data = images(2);
  auto session = start(model, StartOptions().optimizer(&opt).debug(quiet_checks()));
  ASSERT_TRUE(serve(session, quiet_server()));
  TrainingThread loop(session, [&] {
    for (auto& batch : session.batches(data, "train")) test::train_step(model, opt, batch.first, batch.second);
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(kWait), RunState::kPaused);
  auto& engine = detail::core_of(session)->experiments();
  auto dream = engine.submit("deep_dream", "features.3", {{"steps", 10000}, {"channels", 1}});
  auto behind = engine.submit("gradcam", "features.3", {{"batch", 1}});
  ASSERT_EQ(wait_running(session, dream.seq)->stage, Result::Stage::kRunning);
  // close() does not wait for the experiment: it returns, and the run stops
  // at its next step.
  session.close();
  auto r = engine.wait(dream.seq, kWait);
  ASSERT_TRUE(r && r->finished());
  EXPECT_EQ(r->stage, Result::Stage::kStopped);
  EXPECT_NE(r->stop_reason.find("ended"), std::string::npos) << r->stop_reason;
  auto queued = engine.result(behind.seq);
  ASSERT_TRUE(queued);
  EXPECT_EQ(queued->stage, Result::Stage::kStopped);
  EXPECT_NE(queued->stop_reason.find("closed"), std::string::npos) << queued->stop_reason;
  EXPECT_EQ(session.state(), RunState::kFinished);
  auto msg = test::message_of<common::Refusal>([&] { engine.submit("gradcam", "features.3", {}); });
  EXPECT_NE(msg.find("finished"), std::string::npos) << msg;
  loop.join();
}

}  // namespace
}  // namespace nansense
