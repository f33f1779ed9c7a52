#include "nansense/schedule.h"

#include <gtest/gtest.h>

#include <string>

#include "nansense/errors.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::message_of;

BatchPosition pos(std::string phase, int64_t epoch, int64_t batch) {
  BatchPosition p;
  p.phase = std::move(phase);
  p.epoch = epoch;
  p.batch_idx = batch;
  return p;
}

// Runs `n` batches of `phase` and reports the loader's end, like Batches does.
void run_phase(Schedule& s, const std::string& phase, int64_t n, std::optional<int64_t> epoch = std::nullopt) {
  for (int64_t i = 0; i < n; ++i) s.advance(phase, epoch);
  s.end_phase(phase, n);
}

TEST(ScheduleLazy, LearnsOrderAndCountsDuringEpochZero) {
  Schedule s;
  EXPECT_FALSE(s.declared());
  EXPECT_FALSE(s.current().has_value());

  for (int64_t i = 0; i < 3; ++i) {
    auto p = s.advance("train", std::nullopt);
    EXPECT_EQ(p.phase, "train");
    EXPECT_EQ(p.epoch, 0);
    EXPECT_EQ(p.batch_idx, i);
    // The count is not known yet: no boundary can be claimed.
    EXPECT_FALSE(p.is_last_in_phase);
    EXPECT_FALSE(p.is_last_in_epoch);
    EXPECT_FALSE(p.is_last_in_run);
  }
  EXPECT_FALSE(s.phase_count("train").has_value());
  s.end_phase("train", 3);
  EXPECT_EQ(s.phase_count("train"), 3);
  // The current position's flags are recomputed against what is known now.
  ASSERT_TRUE(s.current());
  EXPECT_TRUE(s.current()->is_last_in_phase);
  EXPECT_FALSE(s.current()->is_last_in_epoch) << "the epoch's phase order is not known yet";

  auto v0 = s.advance("val", std::nullopt);
  EXPECT_EQ(v0.epoch, 0);
  EXPECT_EQ(v0.batch_idx, 0);
  auto v1 = s.advance("val", std::nullopt);
  EXPECT_FALSE(v1.is_last_in_phase);
  s.end_phase("val", 2);

  EXPECT_EQ(s.phase_order(), (std::vector<std::string>{"train", "val"}));
  EXPECT_EQ(s.phases(), (PhaseCounts{{"train", 3}, {"val", 2}}));
  EXPECT_EQ(s.phase_index("val"), 1u);
  EXPECT_FALSE(s.phase_index("test").has_value());
}

TEST(ScheduleLazy, FlagsAreExactFromEpochOne) {
  Schedule s;
  run_phase(s, "train", 3);
  run_phase(s, "val", 2);

  std::vector<BatchPosition> seen;
  for (int i = 0; i < 3; ++i) seen.push_back(s.advance("train", std::nullopt));
  s.end_phase("train", 3);
  for (int i = 0; i < 2; ++i) seen.push_back(s.advance("val", std::nullopt));

  for (const auto& p : seen) EXPECT_EQ(p.epoch, 1) << p.to_string();
  EXPECT_EQ(seen[0].batch_idx, 0);
  EXPECT_FALSE(seen[0].is_last_in_phase);
  EXPECT_FALSE(seen[1].is_last_in_phase);
  EXPECT_TRUE(seen[2].is_last_in_phase);
  EXPECT_FALSE(seen[2].is_last_in_epoch) << "train is not the epoch's last phase";
  EXPECT_EQ(seen[3].phase, "val");
  EXPECT_EQ(seen[3].batch_idx, 0);
  EXPECT_FALSE(seen[3].is_last_in_phase);
  EXPECT_TRUE(seen[4].is_last_in_phase);
  EXPECT_TRUE(seen[4].is_last_in_epoch);
  EXPECT_FALSE(seen[4].is_last_in_run) << "the epoch count is unknown";

  // Learning the epoch count later makes the run's end known.
  s.set_epochs(2);
  ASSERT_TRUE(s.current());
  EXPECT_TRUE(s.current()->is_last_in_run);
}

TEST(ScheduleLazy, InfersANewEpochWhenTheFirstPhaseRepeats) {
  Schedule s;
  run_phase(s, "train", 2);
  run_phase(s, "val", 1);
  run_phase(s, "test", 1);
  auto p = s.advance("train", std::nullopt);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.batch_idx, 0);
  s.advance("train", std::nullopt);
  s.end_phase("train", 2);
  auto v = s.advance("val", std::nullopt);
  EXPECT_EQ(v.epoch, 1) << "a phase that has not run this epoch does not start a new one";
  EXPECT_EQ(v.batch_idx, 0);
}

TEST(ScheduleLazy, InfersANewEpochWithASinglePhase) {
  // A loop with only a training loader: the phase ending and starting again is
  // the only sign of a new epoch.
  Schedule s;
  run_phase(s, "train", 3);
  auto p = s.advance("train", std::nullopt);
  EXPECT_EQ(p.epoch, 1);
  EXPECT_EQ(p.batch_idx, 0);
  s.advance("train", std::nullopt);
  auto last = s.advance("train", std::nullopt);
  EXPECT_EQ(last.batch_idx, 2);
  EXPECT_TRUE(last.is_last_in_phase);
  EXPECT_TRUE(last.is_last_in_epoch);
}

TEST(ScheduleLazy, SinglePhaseDeclaredRunsEveryEpoch) {
  Schedule s(2, PhaseCounts{{"train", 2}});
  run_phase(s, "train", 2);
  BatchPosition last;
  EXPECT_NO_THROW({
    s.advance("train", std::nullopt);
    last = s.advance("train", std::nullopt);
  });
  EXPECT_EQ(last.epoch, 1);
  EXPECT_EQ(last.batch_idx, 1);
  EXPECT_TRUE(last.is_last_in_run);
}

TEST(ScheduleExplicitEpoch, UsesTheLoopsEpoch) {
  Schedule s;
  auto a = s.advance("train", 5);
  EXPECT_EQ(a.epoch, 5);
  EXPECT_EQ(a.batch_idx, 0);
  EXPECT_EQ(s.advance("train", 5).batch_idx, 1);
  s.end_phase("train", 2);
  auto b = s.advance("train", 6);
  EXPECT_EQ(b.epoch, 6);
  EXPECT_EQ(b.batch_idx, 0) << "a new epoch restarts the batch counter";
  // An explicit epoch wins over inference: the same phase in the same epoch continues.
  EXPECT_EQ(s.advance("train", 6).batch_idx, 1);
}

TEST(ScheduleExplicitEpoch, RejectsNegativeEpoch) {
  Schedule s;
  auto msg = message_of<ScheduleError>([&] { s.advance("train", -1); });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
}

TEST(ScheduleDeclared, FlagsAreExactFromBatchZero) {
  Schedule s(2, PhaseCounts{{"train", 2}, {"val", 1}});
  EXPECT_TRUE(s.declared());
  EXPECT_EQ(s.epochs(), 2);
  EXPECT_EQ(s.phase_order(), (std::vector<std::string>{"train", "val"}));

  auto t0 = s.advance("train", std::nullopt);
  EXPECT_FALSE(t0.is_last_in_phase);
  auto t1 = s.advance("train", std::nullopt);
  EXPECT_TRUE(t1.is_last_in_phase);
  EXPECT_FALSE(t1.is_last_in_epoch);
  s.end_phase("train", 2);
  auto v0 = s.advance("val", std::nullopt);
  EXPECT_TRUE(v0.is_last_in_phase);
  EXPECT_TRUE(v0.is_last_in_epoch);
  EXPECT_FALSE(v0.is_last_in_run);
  s.end_phase("val", 1);

  auto e1 = s.advance("train", std::nullopt);
  EXPECT_EQ(e1.epoch, 1);
  EXPECT_EQ(e1.batch_idx, 0);
  s.advance("train", std::nullopt);
  s.end_phase("train", 2);
  auto end = s.advance("val", std::nullopt);
  EXPECT_EQ(end.epoch, 1);
  EXPECT_TRUE(end.is_last_in_run);
}

TEST(ScheduleDeclared, UnknownPhaseNamesItAndTheDeclaredPhases) {
  Schedule s(std::nullopt, PhaseCounts{{"train", 2}, {"val", 1}});
  auto msg = message_of<ScheduleError>([&] { s.advance("test", std::nullopt); });
  EXPECT_NE(msg.find("'test'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train"), std::string::npos) << msg;
  EXPECT_NE(msg.find("val"), std::string::npos) << msg;
  // The refused batch did not move the schedule.
  EXPECT_FALSE(s.current().has_value());
}

TEST(ScheduleDeclared, OneBatchTooManyNamesThePhaseAndTheCount) {
  Schedule s(std::nullopt, PhaseCounts{{"train", 2}, {"val", 1}});
  s.advance("train", std::nullopt);
  s.advance("train", std::nullopt);
  auto msg = message_of<ScheduleError>([&] { s.advance("train", std::nullopt); });
  EXPECT_NE(msg.find("'train'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 batches"), std::string::npos) << msg;
  ASSERT_TRUE(s.current());
  EXPECT_EQ(s.current()->batch_idx, 1) << "the refused batch is not the current one";
}

TEST(ScheduleDeclared, RejectsInvalidDeclarations) {
  auto zero = message_of<ScheduleError>([] { Schedule(std::nullopt, PhaseCounts{{"train", 0}}); });
  EXPECT_NE(zero.find("'train'"), std::string::npos) << zero;
  EXPECT_NE(zero.find("at least 1"), std::string::npos) << zero;

  auto dup = message_of<ScheduleError>([] { Schedule(std::nullopt, PhaseCounts{{"train", 2}, {"train", 3}}); });
  EXPECT_NE(dup.find("'train'"), std::string::npos) << dup;
  EXPECT_NE(dup.find("twice"), std::string::npos) << dup;

  auto epochs = message_of<ScheduleError>([] { Schedule(0, std::nullopt); });
  EXPECT_NE(epochs.find("epochs"), std::string::npos) << epochs;
  EXPECT_NE(epochs.find("0"), std::string::npos) << epochs;

  EXPECT_THROW(Schedule(-3, std::nullopt), ScheduleError);
  EXPECT_THROW(Schedule(std::nullopt, PhaseCounts{}), ScheduleError);
  EXPECT_THROW(Schedule(std::nullopt, PhaseCounts{{"", 2}}), ScheduleError);
  EXPECT_NO_THROW(Schedule(1, PhaseCounts{{"train", 1}}));
}

TEST(ScheduleSet, InvalidRedeclarationLeavesTheScheduleUnchanged) {
  Schedule s(3, PhaseCounts{{"train", 2}});
  EXPECT_THROW(s.set(0, PhaseCounts{{"train", 4}}), ScheduleError);
  EXPECT_THROW(s.set(5, PhaseCounts{{"train", -1}}), ScheduleError);
  EXPECT_EQ(s.epochs(), 3);
  EXPECT_EQ(s.phase_count("train"), 2);
}

TEST(ScheduleSet, MidRunKeepsCounters) {
  Schedule s;
  s.advance("train", std::nullopt);
  s.advance("train", std::nullopt);
  s.set(3, PhaseCounts{{"train", 4}, {"val", 2}});
  EXPECT_TRUE(s.declared());
  EXPECT_EQ(s.epochs(), 3);
  EXPECT_EQ(s.phases(), (PhaseCounts{{"train", 4}, {"val", 2}}));

  auto p = s.advance("train", std::nullopt);
  EXPECT_EQ(p.epoch, 0);
  EXPECT_EQ(p.batch_idx, 2) << "re-declaring must not restart the phase";
  auto last = s.advance("train", std::nullopt);
  EXPECT_TRUE(last.is_last_in_phase);
  EXPECT_THROW(s.advance("train", std::nullopt), ScheduleError) << "the new declaration is enforced";

  // nullopt leaves each part as it is.
  s.set(std::nullopt, std::nullopt);
  EXPECT_EQ(s.epochs(), 3);
  EXPECT_EQ(s.phase_count("val"), 2);
  s.set_epochs(7);
  EXPECT_EQ(s.epochs(), 7);
  EXPECT_EQ(s.phase_count("train"), 4);
}

TEST(ScheduleSet, RewindRestartsAtTheGivenEpoch) {
  Schedule s;
  run_phase(s, "train", 2);
  run_phase(s, "val", 1);
  run_phase(s, "train", 2);
  ASSERT_EQ(s.current()->epoch, 1);
  s.rewind_to_epoch(0);
  auto p = s.advance("train", std::nullopt);
  EXPECT_EQ(p.epoch, 0);
  EXPECT_EQ(p.batch_idx, 0);
  EXPECT_TRUE(s.advance("train", std::nullopt).is_last_in_phase) << "learned counts survive a rewind";
}

TEST(ScheduleOrder, BeforeComparesEpochThenPhaseThenBatch) {
  Schedule s(std::nullopt, PhaseCounts{{"train", 10}, {"val", 5}});
  EXPECT_TRUE(s.before(pos("train", 0, 3), pos("train", 0, 4)));
  EXPECT_FALSE(s.before(pos("train", 0, 4), pos("train", 0, 3)));
  EXPECT_FALSE(s.before(pos("train", 0, 4), pos("train", 0, 4))) << "strictly before";
  EXPECT_TRUE(s.before(pos("train", 0, 9), pos("val", 0, 0)));
  EXPECT_FALSE(s.before(pos("val", 0, 0), pos("train", 0, 9)));
  EXPECT_TRUE(s.before(pos("val", 0, 4), pos("train", 1, 0)));
  EXPECT_FALSE(s.before(pos("train", 2, 0), pos("val", 1, 4)));
  EXPECT_FALSE(s.before(pos("test", 0, 0), pos("val", 0, 0))) << "an unknown phase orders nothing";
  EXPECT_FALSE(s.before(pos("train", 0, 0), pos("test", 0, 0)));
}

TEST(ScheduleOrder, PhaseCountAndOrderForLazyPhases) {
  Schedule s;
  s.advance("train", std::nullopt);
  s.end_phase("train", 1);
  s.advance("val", std::nullopt);
  // val has run but not ended: it is in the order, without a count.
  EXPECT_EQ(s.phase_order(), (std::vector<std::string>{"train", "val"}));
  EXPECT_EQ(s.phases(), (PhaseCounts{{"train", 1}}));
  EXPECT_FALSE(s.phase_count("val").has_value());
  // An empty loader is a phase of the order but has no count.
  s.end_phase("val", 1);
  s.end_phase("extra", 0);
  EXPECT_EQ(s.phase_order(), (std::vector<std::string>{"train", "val", "extra"}));
  EXPECT_FALSE(s.phase_count("extra").has_value());
}

TEST(SchedulePosition, ToStringAndSameBatch) {
  auto a = pos("train", 1, 5);
  EXPECT_EQ(a.to_string(), "epoch 1 | train batch 5");
  auto b = a;
  b.is_last_in_run = true;
  EXPECT_TRUE(a.same_batch(b)) << "flags are derived, not compared";
  EXPECT_FALSE(a.same_batch(pos("train", 1, 6)));
  EXPECT_FALSE(a.same_batch(pos("val", 1, 5)));
  EXPECT_EQ(to_string(Mode::kStepPhase), "step_phase");
  EXPECT_EQ(to_string(Mode::kRun), "run");
  EXPECT_EQ(to_string(Mode::kDetach), "detach");
}

}  // namespace
}  // namespace nansense
