// distributed::Coordinator, the rank protocol's one implementation, with two
// ranks in one process over a TCPStore it serves: holding an update before
// the optimizer step until rank 0's choice, a follower's trip holding rank 0
// at the boundary, halt and closing. The runs of real processes are
// tests/integration/ddp_test.cpp (C++) and tests/python/test_distributed.py.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/coordinator.h"
#include "local_store.h"

namespace {

using nansense::distributed::Coordinator;
using json = nlohmann::json;

// What a rank's session tells its coordinator, and what it was told.
struct FakeSession {
  std::atomic<int> holds{0};          // hold_at_boundary calls
  std::atomic<int> noted{0};          // note_rank_trips calls
  std::vector<std::string> refusals;  // refuse_skip, in order
  std::mutex mu;
  json trip;  // the standing trip (null: none)
  bool told = false;

  Coordinator::Host host() {
    Coordinator::Host h;
    h.standing_trip = [this] {
      std::lock_guard lock(mu);
      return trip;
    };
    h.trip_news = [this] {
      std::lock_guard lock(mu);
      if (trip.is_null() || told) return json();
      told = true;
      return trip;
    };
    h.mark_lost = [](const std::string&) {};
    h.hold_at_boundary = [this] { ++holds; };
    h.note_rank_trips = [this](const std::map<int, json>&, const std::map<int, json>&) { ++noted; };
    h.take_stats_shard = [] { return std::string(); };
    h.add_stats_shard = [](int, int64_t, const std::string&) {};
    h.set_peer_checkpoints = [](int, std::vector<int64_t>, std::string) {};
    h.time_travel_status = [] { return nansense::TimeTravelStatus{}; };
    h.request_time_travel = [](int64_t) {};
    h.raise_armed_jump = [] {};
    h.detach = [] {};
    h.served = [] { return true; };
    h.runs_through_next_boundary = [] { return false; };
    h.hold_jumps = [](bool) {};
    h.checks_can_pause = [] { return true; };
    h.refuse_skip = [this](const std::string& why) {
      std::lock_guard lock(mu);
      refusals.push_back(why);
    };
    h.stats_settings_version = [] { return uint64_t{1}; };
    h.stats_settings = [] { return json::object(); };
    h.apply_stats_settings = [](const json&) {};
    return h;
  }
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = nansense::testing::local_store();
    auto options = [&](int rank) {
      Coordinator::Options o;
      o.store = {"127.0.0.1", static_cast<int>(store_->getPort())};
      o.rank = rank;
      o.world = 2;
      o.timeout = std::chrono::seconds(10);
      o.hold_before_step = true;
      o.batch_ahead = true;
      o.session = 0;  // both ranks in this process: the same prefix
      return o;
    };
    // Each start waits for the other's.
    auto follower =
        std::async(std::launch::async, [&] { return std::make_unique<Coordinator>(options(1), sessions_[1].host()); });
    leader_ = std::make_unique<Coordinator>(options(0), sessions_[0].host());
    follower_ = follower.get();
  }
  void TearDown() override {
    leader_.reset();
    follower_.reset();
  }

  // Both ranks meet one boundary (rank 0 releases its decision once its
  // "batch" has begun).
  void meet(bool close = false) {
    auto follower = std::async(std::launch::async, [&] { follower_->boundary(std::nullopt, close); });
    leader_->boundary(std::nullopt, close);
    if (!close) leader_->release();
    follower.get();
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
  FakeSession sessions_[2];
  std::unique_ptr<Coordinator> leader_, follower_;
};

TEST_F(CoordinatorTest, AFollowerHoldsItsUpdateUntilRankZeroChoosesToSkipIt) {
  meet();
  // Rank 0 starts out refusing a skip: no follower holds its update yet.
  {
    std::lock_guard lock(sessions_[0].mu);
    ASSERT_FALSE(sessions_[0].refusals.empty());
    EXPECT_EQ(sessions_[0].refusals.front(), nansense::distributed::kSkipRefused);
  }
  // The follower's batch tripped before its step: it waits for rank 0.
  {
    std::lock_guard lock(sessions_[1].mu);
    sessions_[1].trip = {{"position", "epoch 0 | train batch 0"}, {"reasons", {"nan"}}};
  }
  auto held = std::async(std::launch::async, [&] { return follower_->await_leader(); });
  EXPECT_EQ(held.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the follower went on before rank 0 chose";
  // Rank 0's own pause ends with a skip: the follower skips too.
  leader_->update_decided(/*skipped=*/true);
  ASSERT_EQ(held.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto skip = held.get();
  ASSERT_TRUE(skip.has_value());
  EXPECT_TRUE(*skip);
  // The trip came with the held update: rank 0 named it, and holds at the
  // next boundary for it (a follower's trip rank 0 did not share).
  EXPECT_GE(sessions_[0].noted.load(), 1);
  meet();
  EXPECT_EQ(sessions_[0].holds.load(), 1);
  meet(/*close=*/true);
}

TEST_F(CoordinatorTest, AnUpdateRankZeroAppliedIsAppliedByAFollowerThatHoldsItLater) {
  meet();
  leader_->update_decided(/*skipped=*/false);
  auto held = std::async(std::launch::async, [&] { return follower_->await_leader(); });
  ASSERT_EQ(held.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto skip = held.get();
  ASSERT_TRUE(skip.has_value());
  EXPECT_FALSE(*skip);
  meet(/*close=*/true);
}

TEST_F(CoordinatorTest, AHaltReachesEveryRankAtTheSameBoundary) {
  meet();
  leader_->request_halt();
  EXPECT_FALSE(leader_->halted());
  EXPECT_FALSE(follower_->halted());
  meet();  // this boundary's decision carries the halt: both halt from here on
  EXPECT_TRUE(leader_->halted());
  EXPECT_TRUE(follower_->halted());
  meet(/*close=*/true);
}

TEST_F(CoordinatorTest, AFollowerStillInItsLoopWhenRankZeroClosesIsToldSo) {
  meet();
  auto closing = std::async(std::launch::async, [&] { leader_->boundary(std::nullopt, /*close=*/true); });
  try {
    follower_->boundary();
    FAIL() << "the follower went on after rank 0 closed";
  } catch (const nansense::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 closed its session while rank 1 was still in its loop"),
              std::string::npos)
        << e.what();
  }
  closing.get();
}

}  // namespace
