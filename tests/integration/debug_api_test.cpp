// The numerical debugger over HTTP: GET /api/debug, POST /api/debug/settings,
// /silence and /clear, and the `debug` summary in the status.
#include <filesystem>

#include "integration/training_fixture.h"

namespace nansense::testing {
namespace {

class DebugApiTest : public TrainingServerTest {};

TEST_F(DebugApiTest, ReportsSettingsAndNoErrorAtFirst) {
  start();
  auto status = wait_paused();
  ASSERT_TRUE(status.contains("debug"));
  EXPECT_EQ(status["debug"]["enabled"], true);
  EXPECT_EQ(status["debug"]["checks"], json({"nan_inf", "under_over"}));
  EXPECT_TRUE(status["debug"]["error"].is_null());
  auto reply = get("/api/debug");
  ASSERT_EQ(reply.status, 200u) << reply.body;
  auto report = reply.json();
  EXPECT_TRUE(report["error"].is_null());
  EXPECT_EQ(report["settings"]["interval_batches"], 1);
  EXPECT_EQ(report["settings"]["threshold_fraction"], 0.1);
  EXPECT_EQ(report["settings"]["rerun_to_trace"], true);
  EXPECT_GE(report["checked_batches"].get<int64_t>(), 1);  // batch 0 was checked
  // What a traced re-run would restore and what sees the batch twice, in a
  // plain loop's words.
  EXPECT_EQ(report["rerun"]["ran_twice"], "your loop body ran this batch twice");
  ASSERT_FALSE(report["rerun"]["seen_twice"].empty());
  EXPECT_NE(report["rerun"]["seen_twice"][0].get<std::string>().find("your loop body"), std::string::npos);
  EXPECT_FALSE(report["rerun"].contains("runs_twice"));
}

TEST_F(DebugApiTest, SettingsArePartialUpdates) {
  start();
  wait_paused();
  auto reply =
      post("/api/debug/settings",
           {{"interval_batches", 10}, {"threshold_fraction", 0.25}, {"allow", {"masked_fill", "encoder.attn"}}});
  ASSERT_EQ(reply.status, 200u) << reply.body;
  auto s = reply.json()["settings"];
  EXPECT_EQ(s["interval_batches"], 10);
  EXPECT_EQ(s["threshold_fraction"], 0.25);
  EXPECT_EQ(s["allow"], json({"masked_fill", "encoder.attn"}));
  EXPECT_EQ(s["check_nan_inf"], true);  // untouched
  EXPECT_EQ(session_->debug_settings().interval_batches(), 10);
  EXPECT_EQ(post("/api/debug/settings", {{"check_under_over", false}}).json()["settings"]["interval_batches"], 10);
}

TEST_F(DebugApiTest, BadValuesAreRefusedWithAClearError) {
  start();
  wait_paused();
  auto refused = [&](const json& body, const std::string& expected) {
    auto reply = post("/api/debug/settings", body);
    EXPECT_EQ(reply.status, 400u) << body.dump();
    auto message = reply.json().value("error", "");
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  };
  refused({{"interval_batches", 0}}, "argument \"interval_batches\" must be 1 or more, got 0");
  refused({{"interval_batches", 2.5}}, "argument \"interval_batches\" must be an integer");
  refused({{"threshold_fraction", 1.5}},
          "argument \"threshold_fraction\" must be greater than 0 and at most 1, got 1.5");
  refused({{"threshold_fraction", 0}}, "argument \"threshold_fraction\" must be greater than 0 and at most 1, got 0");
  refused({{"threshold_fraction", "0.1"}}, "argument \"threshold_fraction\" must be a number");
  refused({{"trace_interval_batches", -1}}, "argument \"trace_interval_batches\" must be 0 or more, got -1");
  refused({{"enabled", "yes"}}, "argument \"enabled\" must be true or false");
  refused({{"allow", {1, 2}}}, "argument \"allow\" must be a list of strings");
  refused({{"allow", {""}}}, "argument \"allow\" must not hold an empty name");
  refused({{"capsule_dir", "/tmp"}}, "unknown argument \"capsule_dir\"");
  EXPECT_EQ(session_->debug_settings().interval_batches(), 1);  // nothing applied
  auto bad = post("/api/debug/silence", {{"category", "nan"}});
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.json()["error"].get<std::string>().find(
                "argument \"category\" must be \"nan_inf\" or \"under_over\", got \"nan\""),
            std::string::npos);
  EXPECT_EQ(http_request(port_, "GET", "/api/debug/settings").status, 405u);
}

TEST_F(DebugApiTest, ANanInDetachPausesAndIsReportedUntilSilenced) {
  start(/*epochs=*/1, /*train_batches=*/4, /*val_batches=*/1);
  wait_paused();
  const auto dir = std::filesystem::temp_directory_path() / ("nansense-api-" + std::to_string(::getpid()));
  session_->set_debug_settings(session_->debug_settings().capsule_dir(dir.string()));
  train_[2].first[0][0] = NAN;  // the loop waits at batch 0: batch 2 is not read yet
  ASSERT_EQ(post("/api/run", {{"detach", true}}).status, 200u);
  ASSERT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kPaused);

  auto status = get("/api/status").json();
  const auto& error = status["debug"]["error"];
  ASSERT_TRUE(error.is_object()) << status.dump();
  EXPECT_EQ(error["position"]["batch_idx"], 2);
  EXPECT_EQ(error["position"]["phase"], "train");
  EXPECT_EQ(error["reasons"][0], "nan");
  EXPECT_EQ(error["reason_labels"][0], "NaN");
  EXPECT_EQ(error["text"].get<std::string>().rfind("Numerical issue detected — NaN", 0), 0u) << error["text"];
  EXPECT_EQ(error["root_cause_status"], "from_outside");
  EXPECT_EQ(error["producer"]["op"], "aten::addmm");
  EXPECT_EQ(error["producer"]["layer"], "fc1");
  EXPECT_EQ(status["state"], "paused");

  auto report = get("/api/debug").json();
  const auto& e = report["error"];
  EXPECT_NE(e["root_cause"]["summary"].get<std::string>().find("the batch's tensor #0"), std::string::npos);
  ASSERT_FALSE(e["layers"].empty());
  EXPECT_EQ(e["bands"][0]["dtype"], "float32");
  EXPECT_TRUE(std::filesystem::exists(e["capsule"].get<std::string>()));
  bool fc1 = false;
  for (const auto& row : e["layers"]) {
    if (row["layer"] == "fc1") {
      fc1 = true;
      EXPECT_GT(row["nan"].get<double>(), 0);
      EXPECT_EQ(row["dtype"], "float32");
    }
  }
  EXPECT_TRUE(fc1) << e.dump();

  auto silenced = post("/api/debug/silence", json::object()).json();
  EXPECT_TRUE(silenced["error"].is_null());
  EXPECT_EQ(silenced["settings"]["check_nan_inf"], false);
  EXPECT_TRUE(get("/api/status").json()["debug"]["error"].is_null());
  std::filesystem::remove_all(dir);
}

TEST_F(DebugApiTest, AHeldUpdateIsSkippedOverRest) {
  start(/*epochs=*/1, /*train_batches=*/4, /*val_batches=*/1);
  wait_paused();
  // Nothing held yet: refused, saying why; a bad action is a 400.
  auto none = post("/api/debug/choose_update", {{"action", "skip"}});
  EXPECT_EQ(none.status, 409u) << none.body;
  EXPECT_NE(none.json().value("error", "").find("no numerical error stands"), std::string::npos) << none.body;
  EXPECT_EQ(post("/api/debug/choose_update", {{"action", "drop"}}).status, 400u);
  EXPECT_EQ(post("/api/debug/choose_update", json::object()).status, 400u);

  session_->set_debug_settings(session_->debug_settings().capsule_dir("").rerun_to_trace(false));
  train_[2].first[0][0] = NAN;
  ASSERT_EQ(post("/api/run", {{"detach", true}}).status, 200u);
  ASSERT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kPaused);
  auto error = get("/api/status").json()["debug"]["error"];
  ASSERT_TRUE(error.is_object());
  EXPECT_EQ(error["update"], "held");
  EXPECT_EQ(error["skip_update"], false);
  const auto weights = model_->fc1->weight.detach().clone();
  auto chosen = post("/api/debug/choose_update", {{"action", "skip"}});
  ASSERT_EQ(chosen.status, 200u) << chosen.body;
  EXPECT_EQ(chosen.json()["skip_update"], true);
  EXPECT_EQ(chosen.json()["error"]["update"], "held");
  EXPECT_EQ(get("/api/status").json()["debug"]["error"]["skip_update"], true);
  // Resume: the step of batch 2 changes nothing, and the run stays finite.
  ASSERT_EQ(post("/api/debug/settings", {{"enabled", false}}).status, 200u);
  ASSERT_EQ(post("/api/run", {{"detach", true}}).status, 200u);
  trainer_.join();
  auto report = get("/api/debug").json();
  EXPECT_EQ(report["error"]["update"], "skipped");
  EXPECT_EQ(report["skip_update"], false);
  EXPECT_TRUE(torch::isfinite(model_->fc1->weight).all().item<bool>());
  EXPECT_FALSE(torch::equal(weights, model_->fc1->weight)) << "batch 3 trained as usual";
  auto late = post("/api/debug/choose_update", {{"action", "apply"}});
  EXPECT_EQ(late.status, 409u);
  EXPECT_NE(late.json().value("error", "").find("already skipped"), std::string::npos) << late.body;
}

TEST_F(DebugApiTest, ClearDismissesTheErrorAndKeepsTheChecks) {
  start(/*epochs=*/1, /*train_batches=*/4, /*val_batches=*/1);
  wait_paused();
  session_->set_debug_settings(session_->debug_settings().capsule_dir("").rerun_to_trace(false));
  train_[1].first[0][0] = INFINITY;
  ASSERT_EQ(post("/api/run", {{"detach", true}}).status, 200u);
  ASSERT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kPaused);
  auto report = get("/api/debug").json();
  ASSERT_TRUE(report["error"].is_object());
  EXPECT_EQ(report["error"]["root_cause"]["status"], "not_traced");
  auto cleared = post("/api/debug/clear", json::object()).json();
  EXPECT_TRUE(cleared["error"].is_null());
  EXPECT_EQ(cleared["settings"]["check_nan_inf"], true);
  // The checks stay on: the poisoned weights trip again, as a new first hit.
  ASSERT_EQ(post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).status, 200u);
  auto again = get("/api/status").json()["debug"]["error"];
  ASSERT_TRUE(again.is_object());
  EXPECT_EQ(again["position"]["batch_idx"], 2);
  // Off, so that the fixture's detach can run the loop to its end.
  ASSERT_EQ(post("/api/debug/settings", {{"enabled", false}}).status, 200u);
}

}  // namespace
}  // namespace nansense::testing
