// The snapshot budget over HTTP: what the snapshot says was left out, and a
// picture of a sample it left out refused with how to keep it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nansense/nansense.h>

#include <thread>

#include "integration/training_fixture.h"

namespace {

using nansense::testing::Reply;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;

class SnapshotBudgetApiTest : public TrainingServerTest {
 protected:
  // One epoch of TinyNet (batches of 5) under `budget` bytes.
  void start_with_budget(int64_t budget) {
    serve_session(4, 2,
                  nansense::StartOptions().epochs(1).snapshot_budget(budget).phases(
                      nansense::PhaseCounts{{"train", 4}, {"val", 2}}));
    if (HasFatalFailure()) return;
    trainer_ = std::thread([this] {
      run_epoch();
      session_->close();
    });
  }
};

TEST_F(SnapshotBudgetApiTest, ATrimmedSnapshotSaysWhatItKeptAndRefusesTheRest) {
  start_with_budget(400);
  json status = wait_paused();
  auto snap = session_->snapshot();
  ASSERT_TRUE(snap);
  ASSERT_TRUE(snap->trimmed());
  const int64_t kept = snap->samples_kept;
  EXPECT_EQ(status["snapshot_batch_size"], 5);
  EXPECT_EQ(status["snapshot_samples_kept"], kept);

  json summary = get("/api/snapshot").json();
  EXPECT_EQ(summary["batch_size"], 5);
  EXPECT_EQ(summary["samples_kept"], kept);
  EXPECT_EQ(summary["budget"]["budget_bytes"], 400);
  EXPECT_EQ(summary["budget"]["trimmed"], true);
  EXPECT_LE(summary["budget"]["held_bytes"].get<int64_t>(), 400);
  EXPECT_NE(summary["budget"]["note"].get<std::string>().find("showing " + std::to_string(kept) + " of 5 samples"),
            std::string::npos)
      << summary["budget"];
  // The cards' statistics cover the whole batch: fc1's is [5, 8].
  for (const auto& l : summary["layers"]) {
    if (l["name"] == "fc1") EXPECT_EQ(l["activation"]["shape"], json::array({5, 8}));
  }

  Reply strip = get("/api/render/strip?layer=fc1&sample=" + std::to_string(kept - 1));
  EXPECT_EQ(strip.status, 200u);
  EXPECT_EQ(json::parse(strip.headers["X-Nansense-Render"])["batch_size"], 5) << "the batch's size, not the kept";
  Reply refused = get("/api/render/strip?layer=fc1&sample=4");
  EXPECT_EQ(refused.status, 400u);
  const std::string message = refused.json()["error"].get<std::string>();
  EXPECT_NE(message.find("sample 4 was not kept"), std::string::npos) << message;
  EXPECT_NE(message.find("snapshot_budget"), std::string::npos) << message;
  EXPECT_EQ(get("/api/render/input?sample=4").status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=5").status, 400u) << "past the batch: the usual refusal";

  json stats = get("/api/stats/layers?layers=fc1").json();
  ASSERT_TRUE(stats.contains("samples")) << stats;
  EXPECT_EQ(stats["samples"]["kept"], kept);
  EXPECT_EQ(stats["layers"][0]["activation"]["shape"], json::array({5, 8}));
}

TEST_F(SnapshotBudgetApiTest, ASnapshotThatFitsSaysNothingWasLeftOut) {
  start_with_budget(0);
  wait_paused();
  json summary = get("/api/snapshot").json();
  EXPECT_EQ(summary["samples_kept"], 5);
  EXPECT_EQ(summary["budget"]["trimmed"], false);
  EXPECT_FALSE(summary["budget"].contains("note"));
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=4").status, 200u);
  EXPECT_FALSE(get("/api/stats/layers?layers=fc1").json().contains("samples"));
}

}  // namespace
