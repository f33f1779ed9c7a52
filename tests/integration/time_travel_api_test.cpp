// Time travel over HTTP: the status field, GET/POST /api/time_travel, jumps
// paused and running, and every refusal's status code and message.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <nansense/nansense.h>

#include <filesystem>
#include <thread>

#include "integration/epoch_loop_fixture.h"
#include "integration/training_fixture.h"

namespace {

using nansense::testing::http_request;
using nansense::testing::Reply;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

class TimeTravelWithoutLoopTest : public TrainingServerTest {};

TEST_F(TimeTravelWithoutLoopTest, IsUnavailableWithTheReason) {
  start();
  json status = wait_paused();
  EXPECT_FALSE(status["time_travel"]["available"].get<bool>());
  EXPECT_NE(status["time_travel"]["reason"].get<std::string>().find("session.epochs(n, body)"), std::string::npos);
  auto reply = post("/api/time_travel", {{"epoch", 0}});
  EXPECT_EQ(reply.status, 409u);
  EXPECT_NE(reply.json()["error"].get<std::string>().find("session.epochs(n, body)"), std::string::npos);
  json tt = get("/api/time_travel").json();
  EXPECT_FALSE(tt["available"].get<bool>());
  EXPECT_EQ(tt["cached_epochs"], json::array());
}

// A served session whose loop runs session.epochs(3, ...) on its own thread.
class TimeTravelApiTest : public nansense::testing::EpochLoopServerTest {
 protected:
  void SetUp() override { start_epoch_loop("nansense_tt_api", nansense::StartOptions()); }
};

TEST_F(TimeTravelApiTest, StatusAndDetailsDescribeTheCache) {
  json status = wait_paused();
  json tt = status["time_travel"];
  EXPECT_TRUE(tt["available"].get<bool>());
  EXPECT_FALSE(tt.contains("reason"));
  EXPECT_EQ(tt["cached_epochs"], json::array({0}));
  EXPECT_EQ(tt["total_epochs"], 3);
  EXPECT_EQ(tt["current_epoch"], 0);
  EXPECT_TRUE(tt["pending_epoch"].is_null());
  EXPECT_EQ(status["schedule"]["epochs"], 3);

  json details = get("/api/time_travel").json();
  EXPECT_EQ(details["cached_epochs"], json::array({0}));
  EXPECT_EQ(details["uncached_epochs"], json::array({1, 2}));
  ASSERT_EQ(details["checkpoints"].size(), 1u);
  EXPECT_EQ(details["checkpoints"][0]["epoch"], 0);
  EXPECT_GT(details["checkpoints"][0]["bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(details["cache_dir"], fs::absolute(dir_).lexically_normal().string());
  EXPECT_TRUE(details["budget_bytes"].is_null());
  EXPECT_EQ(details["bytes_used"], details["checkpoints"][0]["bytes"]);
  EXPECT_EQ(details["jumps"], 0);
  EXPECT_TRUE(details["last_error"].is_null());
}

TEST_F(TimeTravelApiTest, JumpsBackAndPausesOnTheTargetsFirstBatch) {
  wait_paused();
  json status =
      post("/api/run_until", {{"phase", "train"}, {"epoch", 2}, {"batch", 1}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["live_position"]["epoch"], 2);
  EXPECT_EQ(status["time_travel"]["cached_epochs"], json::array({0, 1, 2}));
  auto reply = post("/api/time_travel", {{"epoch", 1}, {"timeout_seconds", 20}});
  ASSERT_EQ(reply.status, 200u) << reply.body;
  status = reply.json();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_EQ(status["mode"], "step_batch");
  EXPECT_EQ(status["live_position"]["epoch"], 1);
  EXPECT_EQ(status["live_position"]["phase"], "train");
  EXPECT_EQ(status["live_position"]["batch_idx"], 0);
  EXPECT_EQ(status["snapshot_position"]["epoch"], 1);
  EXPECT_EQ(status["time_travel"]["current_epoch"], 1);
  EXPECT_EQ(get("/api/time_travel").json()["jumps"], 1);

  // From a running loop: it is carried out at the next batch boundary.
  post("/api/run", {{"timeout_seconds", 0}});
  reply = post("/api/time_travel", {{"epoch", 0}, {"timeout_seconds", 20}});
  ASSERT_EQ(reply.status, 200u) << reply.body;
  status = reply.json();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_EQ(status["live_position"]["epoch"], 0);
  EXPECT_EQ(status["live_position"]["batch_idx"], 0);
  EXPECT_EQ(get("/api/time_travel").json()["jumps"], 2);
}

TEST_F(TimeTravelApiTest, RefusalsSayWhy) {
  wait_paused();
  auto reply = post("/api/time_travel", {{"epoch", 3}});
  EXPECT_EQ(reply.status, 400u);
  EXPECT_NE(reply.json()["error"].get<std::string>().find("out of range"), std::string::npos) << reply.body;
  reply = post("/api/time_travel", {{"epoch", 2}});
  EXPECT_EQ(reply.status, 400u);
  EXPECT_NE(reply.json()["error"].get<std::string>().find("not cached (cached epochs: 0)"), std::string::npos)
      << reply.body;
  EXPECT_EQ(post("/api/time_travel", json::object()).status, 400u);
  EXPECT_EQ(post("/api/time_travel", {{"epoch", "1"}}).status, 400u);
  EXPECT_EQ(post("/api/time_travel", {{"epoch", 0}, {"to", 1}}).status, 400u);
  reply = http_request(port_, "DELETE", "/api/time_travel");
  EXPECT_EQ(reply.status, 405u);
  EXPECT_EQ(reply.headers["Allow"], "GET, POST");
  EXPECT_EQ(get("/api/status").json()["state"], "paused") << "refusals leave the loop alone";

  post("/api/run", {{"detach", true}});
  EXPECT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kFinished);
  reply = post("/api/time_travel", {{"epoch", 0}});
  EXPECT_EQ(reply.status, 409u);
  EXPECT_NE(reply.json()["error"].get<std::string>().find("finished"), std::string::npos) << reply.body;
  json tt = get("/api/status").json()["time_travel"];
  EXPECT_FALSE(tt["available"].get<bool>());
  EXPECT_NE(tt["reason"].get<std::string>().find("ended"), std::string::npos);
}

}  // namespace
