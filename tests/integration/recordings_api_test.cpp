// Recordings and snapshots over REST and MCP against a real training loop of
// a small CNN: each view recorded over a few steps and its MP4 read back with
// FFmpeg's own libraries (codec, size, frame count, duration), the last frame
// decoded and compared with the PNG snapshot of the same view, discard,
// close() finishing what records, every refusal, and a process killed
// mid-recording leaving a file libavformat opens. Each reply is held to its
// declared wire type by the fixture.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "integration/mcp_client.h"
#include "integration/mp4_probe.h"
#include "integration/cnn_fixture.h"
#include "record/files.h"
#include "record/frame.h"
#include "record/recording.h"
#include "record/video_encoder.h"
#include "render/downscale.h"
#include "unit/test_models.h"

namespace {

namespace fs = std::filesystem;
using nansense::testing::CnnServerTest;
using nansense::testing::McpClient;
using nansense::testing::probe_mp4;
using json = nlohmann::json;

class RecordingsApiTest : public CnnServerTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nansense_recordings_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ::setenv("NANSENSE_RECORDINGS_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    CnnServerTest::TearDown();
    fs::remove_all(dir_);
  }
  void start_cnn() { CnnServerTest::start_cnn(6); }

  fs::path dir_;
};

// Mean absolute difference per channel over the PNG's area of the frame.
double frame_difference(const nansense::testing::Mp4Probe& video, const nansense::render::Image& png) {
  double sum = 0;
  int64_t n = 0;
  for (int y = 0; y < std::min(png.height, video.height); ++y) {
    for (int x = 0; x < std::min(png.width, video.width); ++x) {
      const auto& p = png.at(x, y);
      const uint8_t* v = &video.rgb[(static_cast<size_t>(y) * video.width + x) * 3];
      sum += std::abs(p.r - v[0]) + std::abs(p.g - v[1]) + std::abs(p.b - v[2]);
      n += 3;
    }
  }
  return n ? sum / n : 1e9;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(RecordingsApiTest, EachViewRecordsAnH264VideoOfItsUpdates) {
  start_cnn();
  wait_paused();
  post("/api/stats/performance", {{"average_patches", true}});
  step();  // the patches now hold a collected batch

  const json views[] = {
      {{"view", "layers"}, {"layers", {"conv", "fc"}}},
      {{"view", "weights"}, {"layer", "conv"}},
      {{"view", "histograms"}, {"layers", {"conv"}}},
      {{"view", "patches"}, {"layer", "conv"}},
  };
  for (const auto& v : views) {
    auto r = post("/api/recordings/start", v);
    ASSERT_EQ(r.status, 200) << v.dump() << " " << r.body;
    // The first frame is queued with the start; the encoder thread may
    // have written it before the reply.
    EXPECT_LE(r.json()["frames"].get<int64_t>(), 1) << v.dump();
  }
  json listed = get("/api/recordings").json();
  EXPECT_EQ(listed["frame_rate"], 10);
  EXPECT_EQ(listed["recordings"].size(), 4u);
  EXPECT_EQ(get("/api/status").json()["recordings"],
            json::array({"main", "watch_histogram", "watch_minmax", "weights:conv"}));
  EXPECT_EQ(fs::path(listed["directory"].get<std::string>()).parent_path(), dir_);

  constexpr int kSteps = 3;
  for (int i = 0; i < kSteps; ++i) step();
  json stopped = post("/api/recordings/stop", json::object()).json();
  ASSERT_EQ(stopped["stopped"].size(), 4u);
  EXPECT_TRUE(get("/api/status").json()["recordings"].empty());

  std::map<std::string, json> by_key;
  for (const auto& s : stopped["stopped"]) by_key[s["key"]] = s;
  ASSERT_EQ(by_key["watch_minmax"]["files"].size(), 2u) << "pixel and average patches, each its own file";
  for (const auto& [key, s] : by_key) {
    EXPECT_EQ(s["error"], "") << key;
    for (const auto& f : s["files"]) {
      const std::string path = f["path"];
      // One frame at the start, one per step the pump drew (an update it
      // could not draw in time is skipped, never blocks), the last state
      // always: between 2 and 1 + kSteps.
      const int64_t frames = f["frames"];
      EXPECT_GE(frames, 2) << path;
      EXPECT_LE(frames, 1 + kSteps) << path;
      EXPECT_EQ(fs::path(path).extension(), ".mp4");
      EXPECT_EQ(fs::path(path).filename().string().rfind(nansense::record::file_part(key) + "_ep000_train_b00001", 0),
                0u)
          << path;
      const auto video = probe_mp4(path);
      ASSERT_TRUE(video.opened) << path << ": " << video.error;
      EXPECT_EQ(video.codec, "h264");
      EXPECT_EQ(video.width, f["width"]);
      EXPECT_EQ(video.height, f["height"]);
      EXPECT_EQ(video.width % 2, 0);
      EXPECT_EQ(video.height % 2, 0);
      EXPECT_LE(video.width, nansense::record::kMaxFrameWidth);
      EXPECT_EQ(video.packets, frames) << path;
      EXPECT_EQ(video.decoded, frames) << path;
      EXPECT_NEAR(video.duration, frames / 10.0, 1e-6) << path;
    }
  }

  // The last frame is the view as it is now: the same page a snapshot saves.
  for (const auto& v : views) {
    json saved = post("/api/recordings/snapshot", v).json();
    const std::string key = saved["key"];
    ASSERT_EQ(saved["files"].size(), by_key[key]["files"].size()) << key;
    for (size_t i = 0; i < saved["files"].size(); ++i) {
      const std::string png_path = saved["files"][i];
      EXPECT_EQ(
          fs::path(png_path).filename().string().rfind(nansense::record::file_part(key) + "_ep000_train_b00004", 0), 0u)
          << png_path;
      const auto png = nansense::render::decode_png(read_file(png_path));
      const auto video = probe_mp4(by_key[key]["files"][i]["path"]);
      ASSERT_FALSE(video.rgb.empty());
      if (png.width <= video.width && png.height <= video.height) {
        EXPECT_LT(frame_difference(video, png), 4.0) << key << ": H.264 at a quantiser of 14 stays within a few levels";
      }
    }
  }
  // Snapshots never overwrite: the same view again gets -2.
  json again = post("/api/recordings/snapshot", views[0]).json();
  EXPECT_NE(again["files"][0].get<std::string>().find("_b00004-2.png"), std::string::npos) << again.dump();
  EXPECT_EQ(get("/api/recordings").json()["saved"].size(), 4u);
}

TEST_F(RecordingsApiTest, APausedRunAddsNoFrame) {
  start_cnn();
  wait_paused();
  post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}});
  json stopped = post("/api/recordings/stop", {{"key", "main"}}).json();
  ASSERT_EQ(stopped["stopped"].size(), 1u);
  EXPECT_EQ(stopped["stopped"][0]["frames"], 1);
  const auto video = probe_mp4(stopped["stopped"][0]["files"][0]["path"]);
  EXPECT_EQ(video.packets, 1);
}

TEST_F(RecordingsApiTest, DiscardRemovesTheFile) {
  start_cnn();
  wait_paused();
  json started = post("/api/recordings/start", {{"view", "weights"}, {"layer", "fc"}}).json();
  const std::string path = started["files"][0]["path"];
  step();
  json discarded = post("/api/recordings/discard", {{"key", "weights:fc"}}).json();
  ASSERT_EQ(discarded["discarded"].size(), 1u);
  EXPECT_EQ(discarded["discarded"][0]["removed"][0], path);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(get("/api/recordings").json()["recordings"].empty());
}

TEST_F(RecordingsApiTest, ASavedRecordingIsServedToPlayAndToDownload) {
  start_cnn();
  wait_paused();
  json started = post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}}).json();
  const std::string path = started["files"][0]["path"];
  const std::string file = "/api/recordings/file?path=" + path;
  // Still being written: refused until saved.
  auto writing = get(file);
  EXPECT_EQ(writing.status, 409);
  EXPECT_NE(writing.json()["error"].get<std::string>().find("still being recorded"), std::string::npos);
  step();
  post("/api/recordings/stop", {{"key", "main"}});
  auto played = get(file);
  ASSERT_EQ(played.status, 200) << played.body;
  EXPECT_EQ(played.headers["Content-Type"], "video/mp4");
  EXPECT_EQ(played.body, read_file(path));
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(played.headers["Content-Disposition"], "inline; filename=\"" + name + "\"");
  auto downloaded = get(file + "&download=true");
  EXPECT_EQ(downloaded.headers["Content-Disposition"], "attachment; filename=\"" + name + "\"");
  EXPECT_EQ(downloaded.body, played.body);
  // Only what this run saved: not any file the server can read.
  auto other = get("/api/recordings/file?path=/etc/passwd");
  EXPECT_EQ(other.status, 404);
  EXPECT_NE(other.json()["error"].get<std::string>().find("not a saved recording"), std::string::npos);
}

TEST_F(RecordingsApiTest, BadViewsAndKeysAreRefused) {
  start_cnn();
  wait_paused();
  auto unknown_view = post("/api/recordings/start", {{"view", "graph"}});
  EXPECT_EQ(unknown_view.status, 400);
  EXPECT_EQ(unknown_view.json()["argument"], "view");
  // No layers: the original's default, the watched layers (every layer but
  // shape ops when none is watched).
  auto no_layers = post("/api/recordings/start", {{"view", "layers"}});
  ASSERT_EQ(no_layers.status, 200) << no_layers.body;
  EXPECT_EQ(no_layers.json()["key"], "main");
  EXPECT_NE(no_layers.json()["label"].get<std::string>().find("conv"), std::string::npos) << no_layers.body;
  EXPECT_EQ(post("/api/recordings/discard", {{"key", "main"}}).status, 200);
  // The patches view records one layer.
  auto two = post("/api/recordings/start", {{"view", "patches"}, {"layers", {"conv", "fc"}}});
  EXPECT_EQ(two.status, 400) << two.body;
  EXPECT_EQ(two.json()["argument"], "layers");
  auto unknown_layer = post("/api/recordings/start", {{"view", "layers"}, {"layers", {"nope"}}});
  EXPECT_EQ(unknown_layer.status, 400) << unknown_layer.body;
  EXPECT_NE(unknown_layer.body.find("nope"), std::string::npos);
  auto bad_weights = post("/api/recordings/snapshot", {{"view", "weights"}, {"layer", "nope"}});
  EXPECT_EQ(bad_weights.status / 100, 4) << bad_weights.body;
  EXPECT_EQ(post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}}).status, 200);
  auto twice = post("/api/recordings/start", {{"view", "layers"}, {"layers", {"fc"}}});
  EXPECT_EQ(twice.status, 409);
  EXPECT_NE(twice.body.find("already recording"), std::string::npos);
  auto no_key = post("/api/recordings/stop", {{"key", "weights:conv"}});
  EXPECT_EQ(no_key.status, 404);
  EXPECT_NE(no_key.body.find("main"), std::string::npos) << "names what records: " << no_key.body;
  EXPECT_EQ(post("/api/recordings/discard", {{"key", "nope"}}).status, 404);
  EXPECT_TRUE(get("/api/recordings").json()["recordings"].size() == 1);
  EXPECT_FALSE(fs::exists(dir_ / "graph")) << "nothing written for a refused view";
}

// A 409 naming the recording's key and how to release it.
void expect_fixed(const nansense::testing::Reply& r, const std::string& key, const std::string& argument) {
  EXPECT_EQ(r.status, 409) << r.body;
  const json body = json::parse(r.body, nullptr, false);
  const std::string error = body.value("error", "");
  EXPECT_NE(error.find("is fixed while \"" + key + "\" records"), std::string::npos) << error;
  EXPECT_NE(error.find("Save & Finish (stop_recording key \"" + key + "\") or Delete (discard_recording)"),
            std::string::npos)
      << error;
  EXPECT_EQ(body.value("argument", ""), argument) << error;
}

TEST_F(RecordingsApiTest, WhileHistogramsRecordTheSettingsTheyDrawAreFixed) {
  start_cnn();
  wait_paused();
  ASSERT_EQ(post("/api/recordings/start", {{"view", "histograms"}, {"layers", {"conv"}}}).status, 200);
  const json fixed = get("/api/status").json()["fixed"];
  for (const char* setting : {"update_frequency", "stats_scope", "watch_performance", "watched:conv"}) {
    ASSERT_TRUE(fixed.contains(setting)) << setting << " " << fixed.dump();
    EXPECT_NE(fixed[setting].get<std::string>().find("\"watch_histogram\""), std::string::npos) << fixed.dump();
  }
  EXPECT_FALSE(fixed.contains("watched:fc")) << "fc is not in the video";

  const json scope = {{"scope", "all"}};
  const json unwatch = {{"layers", {"conv"}}};
  const json performance = {{"channel_limit", 8}};
  const json frequency = {{"unit", "batch"}, {"n", 1}};
  expect_fixed(post("/api/stats/scope", scope), "watch_histogram", "scope");
  expect_fixed(post("/api/stats/unwatch", unwatch), "watch_histogram", "layers");
  expect_fixed(post("/api/stats/performance", performance), "watch_histogram", "");
  expect_fixed(post("/api/stats/update_frequency", frequency), "watch_histogram", "unit");
  json settings = get("/api/settings").json();
  EXPECT_EQ(settings["stats_scope"], "watched") << "a refused change changes nothing";
  EXPECT_EQ(settings["watched_layers"], json::array({"conv", "fc"}));
  EXPECT_EQ(settings["watch_performance"]["channel_limit"], 16);
  EXPECT_EQ(settings["update_frequency"]["unit"], "seconds");

  // What leaves the video as it is goes through: the current values again,
  // a layer the video does not show.
  EXPECT_EQ(post("/api/stats/scope", {{"scope", "watched"}}).status, 200);
  EXPECT_EQ(post("/api/stats/performance", {{"channel_limit", 16}}).status, 200);
  EXPECT_EQ(post("/api/stats/update_frequency", {{"unit", "seconds"}, {"n", 2}}).status, 200);
  EXPECT_EQ(post("/api/stats/unwatch", {{"layers", {"fc"}}}).status, 200);

  ASSERT_EQ(post("/api/recordings/stop", {{"key", "watch_histogram"}}).status, 200);
  EXPECT_TRUE(get("/api/status").json()["fixed"].empty());
  EXPECT_EQ(post("/api/stats/scope", scope).status, 200);
  EXPECT_EQ(post("/api/stats/unwatch", unwatch).status, 200);
  EXPECT_EQ(post("/api/stats/performance", performance).status, 200);
  EXPECT_EQ(post("/api/stats/update_frequency", frequency).status, 200);
  settings = get("/api/settings").json();
  EXPECT_EQ(settings["stats_scope"], "all");
  EXPECT_EQ(settings["watched_layers"], json::array());
  EXPECT_EQ(settings["watch_performance"]["channel_limit"], 8);
  EXPECT_EQ(settings["update_frequency"]["unit"], "batch");
}

TEST_F(RecordingsApiTest, WhilePatchesRecordTheirLayerKeepsItsPatches) {
  start_cnn();
  wait_paused();
  step();  // a collected batch: the patches exist
  ASSERT_EQ(post("/api/recordings/start", {{"view", "patches"}, {"layer", "conv"}}).status, 200);
  expect_fixed(post("/api/stats/patch_layers", {{"layers", {"fc"}}}), "watch_minmax", "layers");
  expect_fixed(post("/api/stats/performance", {{"samples_per_channel", 0}}), "watch_minmax", "");
  expect_fixed(post("/api/stats/unwatch", {{"layers", {"conv"}}}), "watch_minmax", "layers");
  EXPECT_EQ(get("/api/settings").json()["patch_layers"], nullptr);
  // A list that keeps conv, and back to the watched layers (conv among them).
  EXPECT_EQ(post("/api/stats/patch_layers", {{"layers", {"conv", "fc"}}}).status, 200);
  EXPECT_EQ(post("/api/stats/patch_layers", json::object()).status, 200);
  ASSERT_EQ(post("/api/recordings/discard", {{"key", "watch_minmax"}}).status, 200);
  EXPECT_EQ(post("/api/stats/patch_layers", {{"layers", {"fc"}}}).status, 200);
  EXPECT_EQ(get("/api/settings").json()["patch_layers"], json::array({"fc"}));
  EXPECT_EQ(post("/api/stats/performance", {{"samples_per_channel", 0}}).status, 200);
}

TEST_F(RecordingsApiTest, WhileTheMainViewRecordsOnlyTheCadenceIsFixed) {
  start_cnn();
  wait_paused();
  ASSERT_EQ(post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}}).status, 200);
  EXPECT_EQ(get("/api/status").json()["fixed"].size(), 1u);
  expect_fixed(post("/api/stats/update_frequency", {{"unit", "epoch"}, {"n", 1}}), "main", "unit");
  // The strips come from every captured batch, watched or not.
  EXPECT_EQ(post("/api/stats/unwatch", {{"layers", {"conv"}}}).status, 200);
  EXPECT_EQ(post("/api/stats/scope", {{"scope", "none"}}).status, 200);

  McpClient mcp(port_);
  mcp.initialize();
  json refused = mcp.tool("set_update_frequency", {{"unit", "epoch"}, {"n", 1}});
  EXPECT_TRUE(refused.value("isError", false)) << refused.dump();
  const std::string text = refused["content"][0]["text"];
  EXPECT_NE(text.find("set_update_frequency refused: the update frequency is fixed while \"main\" records"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("stop_recording key \"main\""), std::string::npos) << text;
  EXPECT_FALSE(mcp.tool("stop_recording", {{"key", "main"}}).value("isError", false));
  json applied = mcp.tool("set_update_frequency", {{"unit", "epoch"}, {"n", 1}});
  EXPECT_FALSE(applied.value("isError", false)) << applied.dump();
  EXPECT_EQ(applied["structuredContent"]["update_frequency"]["unit"], "epoch");
}

// The tabs of the registered auto experiments.
std::vector<std::string> auto_tabs(const json& experiments) {
  std::vector<std::string> tabs;
  for (const auto& e : experiments["auto_experiments"]) tabs.push_back(e["tab"]);
  return tabs;
}

TEST_F(RecordingsApiTest, TheExperimentViewRecordsItsOwnRunAtEveryLiveUpdate) {
  start_cnn();
  wait_paused();
  // Every batch a live update (fixed once the recording starts).
  ASSERT_EQ(post("/api/stats/update_frequency", {{"unit", "batch"}, {"n", 1}}).status, 200);
  EXPECT_FALSE(get("/api/experiments").json()["auto_run"]) << "the recording runs its experiment without auto-run";
  auto r = post("/api/recordings/start", {{"view", "experiment"}, {"layer", "conv"}, {"kind", "gradcam"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["key"], "experiment:conv");
  EXPECT_EQ(r.json()["label"], "Experiment: gradcam of conv");
  EXPECT_EQ(r.json()["files"].size(), 1u) << "paused, its first run was drawn at once: " << r.body;
  EXPECT_EQ(auto_tabs(get("/api/experiments").json()), std::vector<std::string>{"recording:experiment:conv"});
  EXPECT_TRUE(get("/api/status").json()["fixed"].contains("update_frequency"));

  step();
  step();
  // The rest of the run, live: each batch publishes, the pinned experiment
  // re-runs on the training thread, the recorder draws its result; close()
  // finishes the file.
  post("/api/run", {{"detach", true}, {"timeout_seconds", 0}});
  trainer_.join();
  const json listed = get("/api/recordings").json();
  EXPECT_TRUE(listed["recordings"].empty());
  ASSERT_EQ(listed["saved"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["saved"][0]["key"], "experiment:conv");
  ASSERT_EQ(listed["saved"][0]["files"].size(), 1u) << listed.dump();
  const std::string path = listed["saved"][0]["files"][0];
  EXPECT_EQ(fs::path(path).filename().string().rfind("experiment_conv_ep000_train_b00000", 0), 0u)
      << "named by its first frame, the paused batch 0: " << path;
  const auto video = probe_mp4(path);
  ASSERT_TRUE(video.opened) << video.error;
  EXPECT_EQ(video.codec, "h264");
  // The first run, one per step, then the live updates of the other batches;
  // an update the pump could not draw in time is skipped (never blocks
  // training: under a loaded machine most are), the last state always:
  // at least two.
  EXPECT_GE(video.packets, 2);
  EXPECT_LE(video.packets, 12);
  EXPECT_EQ(video.decoded, video.packets);
  EXPECT_NEAR(video.duration, video.packets / 10.0, 1e-6);
  EXPECT_TRUE(auto_tabs(get("/api/experiments").json()).empty()) << "close() released the pinned experiment";
}

TEST_F(RecordingsApiTest, StoppingAnExperimentRecordingReleasesItsExperiment) {
  start_cnn();
  wait_paused();
  const json view = {{"view", "experiment"}, {"layer", "conv"}, {"kind", "gradcam"}};
  ASSERT_EQ(post("/api/recordings/start", view).status, 200);
  step();
  json stopped = post("/api/recordings/stop", {{"key", "experiment:conv"}}).json();
  ASSERT_EQ(stopped["stopped"].size(), 1u);
  EXPECT_EQ(stopped["stopped"][0]["error"], "");
  EXPECT_EQ(stopped["stopped"][0]["frames"], 2) << "the first run and the step's";
  EXPECT_TRUE(auto_tabs(get("/api/experiments").json()).empty());

  // The last frame is the view as a snapshot draws it now.
  const json saved = post("/api/recordings/snapshot", view).json();
  ASSERT_EQ(saved["files"].size(), 1u) << saved.dump();
  const auto png = nansense::render::decode_png(read_file(saved["files"][0]));
  const auto video = probe_mp4(stopped["stopped"][0]["files"][0]["path"]);
  ASSERT_TRUE(video.opened) << video.error;
  EXPECT_EQ(video.packets, 2);
  if (png.width <= video.width && png.height <= video.height) EXPECT_LT(frame_difference(video, png), 4.0);

  // Delete releases it too, and removes the file.
  json started = post("/api/recordings/start", view).json();
  EXPECT_EQ(auto_tabs(get("/api/experiments").json()).size(), 1u);
  json discarded = post("/api/recordings/discard", {{"key", "experiment:conv"}}).json();
  ASSERT_EQ(discarded["discarded"].size(), 1u);
  EXPECT_FALSE(fs::exists(started["files"][0]["path"].get<std::string>()));
  EXPECT_TRUE(auto_tabs(get("/api/experiments").json()).empty());

  // Refused: no kind, a strip kind, an unknown layer (and nothing pinned).
  auto no_kind = post("/api/recordings/start", {{"view", "experiment"}, {"layer", "conv"}});
  EXPECT_EQ(no_kind.status, 400);
  EXPECT_EQ(no_kind.json()["argument"], "kind");
  auto strip_kind = post("/api/recordings/start", {{"view", "experiment"}, {"layer", "conv"}, {"kind", "both"}});
  EXPECT_EQ(strip_kind.status, 400);
  EXPECT_EQ(strip_kind.json()["argument"], "kind");
  auto layer_kind = post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}, {"kind", "gradcam"}});
  EXPECT_EQ(layer_kind.status, 400);
  auto unknown = post("/api/recordings/start", {{"view", "experiment"}, {"layer", "nope"}, {"kind", "gradcam"}});
  EXPECT_EQ(unknown.status / 100, 4) << unknown.body;
  EXPECT_NE(unknown.body.find("nope"), std::string::npos) << unknown.body;
  EXPECT_TRUE(auto_tabs(get("/api/experiments").json()).empty());
  EXPECT_TRUE(get("/api/recordings").json()["recordings"].empty());
}

TEST_F(RecordingsApiTest, CloseFinishesEveryRecordingSoItPlays) {
  start_cnn();
  wait_paused();
  json started = post("/api/recordings/start", {{"view", "layers"}, {"layers", {"conv"}}}).json();
  const std::string path = started["files"][0]["path"];
  post("/api/run", {{"detach", true}, {"timeout_seconds", 0}});
  trainer_.join();  // the loop runs to its end and session.close()
  EXPECT_TRUE(get("/api/recordings").json()["recordings"].empty());
  const auto video = probe_mp4(path);
  ASSERT_TRUE(video.opened) << video.error;
  EXPECT_GE(video.packets, 1);
  EXPECT_EQ(video.packets, video.decoded);
}

TEST_F(RecordingsApiTest, McpToolsRecordAndSnapshot) {
  start_cnn();
  wait_paused();
  McpClient mcp(port_);
  mcp.initialize();
  json started = mcp.tool("start_recording", {{"view", "layers"}, {"layers", {"fc"}}});
  EXPECT_FALSE(started.value("isError", false)) << started.dump();
  json listed = mcp.tool("list_recordings", json::object());
  EXPECT_EQ(listed["structuredContent"]["recordings"][0]["key"], "main");
  json stopped = mcp.tool("stop_recording", json::object());
  EXPECT_EQ(stopped["structuredContent"]["stopped"][0]["frames"], 1);
  json snap = mcp.tool("save_snapshot", {{"view", "histograms"}, {"layers", {"fc"}}});
  EXPECT_FALSE(snap.value("isError", false)) << snap.dump();
  json bad = mcp.tool("save_snapshot", {{"view", "nope"}});
  EXPECT_TRUE(bad.value("isError", false)) << bad.dump();
}

TEST_F(RecordingsApiTest, ADeepDreamVideoHoldsItsPublishedSteps) {
  start_cnn();
  wait_paused();
  auto r = post("/api/experiments/run", {{"kind", "deep_dream"},
                                         {"layer", "conv"},
                                         {"params", {{"steps", 40}}},
                                         {"timeout_seconds", 60},
                                         {"video", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json dream = r.json();
  ASSERT_EQ(dream["stage"], "done") << dream;
  const json video = dream["video"];
  EXPECT_EQ(video["error"], "");
  // 40 steps publish every 2nd: about 20 frames, each a distinct step
  // (ones published faster than they were drawn are skipped).
  const int64_t frames = video["frames"];
  EXPECT_GE(frames, 2);
  EXPECT_LE(frames, 21);
  const std::string path = video["path"];
  EXPECT_EQ(fs::path(path).parent_path().parent_path(), dir_);
  const auto probe = probe_mp4(path);
  ASSERT_TRUE(probe.opened) << probe.error;
  EXPECT_EQ(probe.codec, "h264");
  EXPECT_EQ(probe.packets, frames);
  auto not_dream =
      post("/api/experiments/run", {{"kind", "gradcam"}, {"layer", "conv"}, {"video", true}, {"timeout_seconds", 10}});
  EXPECT_EQ(not_dream.status, 400);
  EXPECT_EQ(not_dream.json()["argument"], "video");
  auto no_wait = post("/api/experiments/run",
                      {{"kind", "deep_dream"}, {"layer", "conv"}, {"video", true}, {"timeout_seconds", 0}});
  EXPECT_EQ(no_wait.status, 400);
}

// A process killed with SIGKILL mid-recording: the fragmented MP4 opens and
// holds every frame written before the kill.
TEST(RecordingCrashTest, AKilledProcessLeavesAFileFfmpegOpens) {
  const fs::path path = fs::temp_directory_path() / ("nansense_crash_" + std::to_string(::getpid()) + ".mp4");
  fs::remove(path);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    nansense::record::VideoEncoder encoder(path.string(), 64, 48, 10);
    nansense::render::Image frame(64, 48);
    for (int i = 0; i < 7; ++i) {
      for (auto& p : frame.pixels) p = {static_cast<uint8_t>(30 * i), 90, 200, 255};
      encoder.add(frame);
    }
    ::raise(SIGKILL);  // no finish(), no trailer, no destructors
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const auto video = probe_mp4(path.string());
  ASSERT_TRUE(video.opened) << video.error;
  EXPECT_EQ(video.codec, "h264");
  EXPECT_EQ(video.width, 64);
  EXPECT_EQ(video.packets, 7);
  EXPECT_EQ(video.decoded, 7);
  ASSERT_FALSE(video.rgb.empty());
  EXPECT_NEAR(video.rgb[0], 180, 6);  // the last frame's red
  fs::remove(path);
}

}  // namespace

namespace {

// A full disk (/dev/full answers every write with ENOSPC) stops the
// recording and keeps the error; nothing throws at the caller, and later
// frames are dropped and counted.
TEST(RecordingDiskTest, AFullDiskStopsTheRecordingWithItsError) {
  nansense::record::Recording recording("/dev/full", 10, 64);
  nansense::render::Image page(40, 30);
  for (auto& p : page.pixels) p = {200, 40, 40, 255};
  for (int i = 0; i < 20; ++i) recording.push(page);
  const auto info = recording.finish();
  EXPECT_NE(info.error, "");
  EXPECT_NE(info.error.find("No space left"), std::string::npos) << info.error;
  EXPECT_GT(info.dropped, 0);
  EXPECT_TRUE(info.finished);
  EXPECT_FALSE(recording.push(page)) << "a finished recording takes nothing";
}

}  // namespace
