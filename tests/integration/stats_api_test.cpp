// Statistics over time over HTTP and MCP against a real training loop: scopes
// and watching, the live-update cadence, rewinds, logged scalars and metric
// instruments, the history's numbers against a direct computation, and the
// histogram picture.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <nansense/nansense.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "integration/epoch_loop_fixture.h"
#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "session/session_access.h"

namespace nansense::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> names(const json& list, const char* key) {
  std::vector<std::string> out;
  for (const auto& entry : list) out.push_back(entry[key]);
  return out;
}

class StatsApiTest : public TrainingServerTest {
 protected:
  // The layers list_stats has, in its order.
  std::vector<std::string> stats_layers() { return names(get("/api/stats").json()["layers"], "layer"); }
  std::vector<int64_t> epochs_of(const std::string& layer, const std::string& phase) {
    const json listed = get("/api/stats").json();
    for (const auto& l : listed["layers"]) {
      if (l["layer"] != layer) continue;
      for (const auto& p : l["phases"]) {
        if (p["phase"] == phase) return p["epochs"].get<std::vector<int64_t>>();
      }
    }
    return {};
  }
  int64_t batches_of(const std::string& layer, const std::string& phase, int64_t epoch) {
    json history = get("/api/stats/history?layer=" + layer + "&phase=" + phase).json();
    for (const auto& e : history["phases"][phase]) {
      if (e["epoch"] == epoch) return e["batches"];
    }
    return -1;
  }
  void step(const std::string& unit) {
    json status = post("/api/step", {{"unit", unit}, {"timeout_seconds", 20}}).json();
    ASSERT_EQ(status["state"], "paused");
  }
};

TEST_F(StatsApiTest, DefaultsCollectNothingUntilALayerIsWatched) {
  start();
  json status = wait_paused();
  EXPECT_EQ(status["stats"]["scope"], "watched");
  EXPECT_EQ(status["stats"]["watched_layers"], json::array());
  EXPECT_FALSE(status["stats"]["collecting"].get<bool>());
  EXPECT_EQ(status["stats"]["update_frequency"], json({{"unit", "seconds"}, {"n", 2}, {"phase", nullptr}}));
  json settings = get("/api/settings").json();
  EXPECT_EQ(settings["stats_scope"], "watched");
  EXPECT_EQ(settings["watch_performance"], json({{"channel_limit_enabled", true},
                                                 {"channel_limit", 16},
                                                 {"histogram_sample", 16384},
                                                 {"samples_per_channel", 5},
                                                 {"average_patches", false}}));
  EXPECT_EQ(settings["patch_layers"], nullptr);
  step("batch");
  EXPECT_TRUE(stats_layers().empty());
  EXPECT_EQ(session_->watch_snapshot(), nullptr);
  // The Stats page is the same page, routed by its path.
  Reply page = http_request(port_, "GET", "/stats");
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.body, http_request(port_, "GET", "/").body);
}

TEST_F(StatsApiTest, ScopesCollectTheirLayersAndNarrowingDropsOutsiders) {
  start(/*epochs=*/3, /*train_batches=*/4, /*val_batches=*/2);
  wait_paused();

  // Unknown names are refused, each named, and nothing changes.
  Reply refused = post("/api/stats/watch", {{"layers", {"fc1", "nope", "nor_this"}}});
  EXPECT_EQ(refused.status, 400u);
  const std::string error = refused.json()["error"];
  EXPECT_NE(error.find("\"nope\""), std::string::npos) << error;
  EXPECT_NE(error.find("\"nor_this\""), std::string::npos) << error;
  EXPECT_EQ(refused.json()["argument"], "layers");
  EXPECT_EQ(get("/api/settings").json()["watched_layers"], json::array());
  EXPECT_EQ(post("/api/stats/unwatch", {{"layers", {"nope"}}}).status, 400u);

  json settings = post("/api/stats/watch", {{"layers", {"fc1"}}}).json();
  EXPECT_EQ(settings["watched_layers"], json({"fc1"}));
  EXPECT_TRUE(settings["stats_collecting"].get<bool>());
  EXPECT_EQ(session_->watched_layers(), std::vector<std::string>({"fc1"}));

  // Epoch 0's train batches 1..3 (batch 0 ran before the watch) and its val
  // batches, then epoch 1's first batch, where the step pauses.
  step("epoch");
  EXPECT_EQ(stats_layers(), std::vector<std::string>({"fc1"}));
  EXPECT_EQ(epochs_of("fc1", "train"), std::vector<int64_t>({0, 1}));
  EXPECT_EQ(epochs_of("fc1", "val"), std::vector<int64_t>({0}));
  EXPECT_EQ(batches_of("fc1", "train", 0), 3);
  EXPECT_EQ(batches_of("fc1", "val", 0), 2);
  EXPECT_EQ(batches_of("fc1", "train", 1), 1);
  EXPECT_GT(get("/api/status").json()["stats"]["sequence"].get<int64_t>(), 0);

  // All: every layer of the architecture but pure shape ops.
  EXPECT_EQ(post("/api/stats/scope", {{"scope", "all"}}).json()["stats_scope"], "all");
  step("batch");
  std::set<std::string> expected;
  const json architecture = get("/api/architecture").json();
  for (const auto& layer : architecture["layers"]) {
    if (!layer["shape_op"].get<bool>()) expected.insert(layer["name"]);
  }
  const auto all = stats_layers();
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()), expected);
  EXPECT_GE(expected.size(), 4u);

  // Narrowing to watched drops what the others collected.
  post("/api/stats/scope", {{"scope", "watched"}});
  step("batch");
  EXPECT_EQ(stats_layers(), std::vector<std::string>({"fc1"}));

  // None collects nothing; what was collected stays.
  post("/api/stats/scope", {{"scope", "none"}});
  EXPECT_FALSE(get("/api/status").json()["stats"]["collecting"].get<bool>());
  const int64_t before = batches_of("fc1", "train", 1);
  step("batch");
  EXPECT_EQ(batches_of("fc1", "train", 1), before);

  // Unwatching empties the watched set.
  post("/api/stats/scope", {{"scope", "watched"}});
  EXPECT_EQ(post("/api/stats/unwatch", {{"layers", {"fc1"}}}).json()["watched_layers"], json::array());
}

TEST_F(StatsApiTest, UpdateFrequencyRefusesBadValuesClearly) {
  start();
  wait_paused();
  auto refusal = [&](const json& body) {
    Reply r = post("/api/stats/update_frequency", body);
    EXPECT_EQ(r.status, 400u) << body.dump();
    return r.json();
  };
  json e = refusal({{"unit", "batch"}, {"n", -1}});
  EXPECT_EQ(e["argument"], "n");
  e = refusal({{"unit", "hours"}, {"n", 1}});
  EXPECT_EQ(e["argument"], "unit");
  EXPECT_NE(e["error"].get<std::string>().find("seconds"), std::string::npos);
  e = refusal({{"unit", "epoch"}, {"n", 1}, {"phase", "train"}});
  EXPECT_NE(e["error"].get<std::string>().find("only to the batch unit"), std::string::npos) << e.dump();
  e = refusal({{"unit", "batch"}, {"n", 2}, {"phase", "test"}});
  EXPECT_NE(e["error"].get<std::string>().find("'test'"), std::string::npos) << e.dump();
  EXPECT_NE(e["error"].get<std::string>().find("train, val"), std::string::npos) << e.dump();
  e = refusal({{"unit", "batch"}, {"n", 1.5}});
  EXPECT_NE(e["error"].get<std::string>().find("whole number"), std::string::npos) << e.dump();
  // Nothing changed; then a good value takes.
  EXPECT_EQ(get("/api/settings").json()["update_frequency"]["unit"], "seconds");
  json settings = post("/api/stats/update_frequency", {{"unit", "batch"}, {"n", 2}, {"phase", "train"}}).json();
  EXPECT_EQ(settings["update_frequency"], json({{"unit", "batch"}, {"n", 2}, {"phase", "train"}}));
  EXPECT_EQ(session_->update_frequency(), nansense::UpdateFrequency::batches(2, "train"));
  EXPECT_THROW(session_->set_update_frequency(nansense::UpdateFrequency::seconds(0)), nansense::UsageError);
}

TEST_F(StatsApiTest, ARunningLoopPublishesWithoutPausing) {
  start(/*epochs=*/1000, /*train_batches=*/4, /*val_batches=*/2);
  wait_paused();
  post("/api/stats/watch", {{"layers", {"fc1"}}});
  post("/api/stats/update_frequency", {{"unit", "batch"}, {"n", 1}});
  auto* core = detail::core_of(*session_);
  const uint64_t seq = get("/api/status").json()["snapshot_sequence"];
  post("/api/run", {{"detach", false}, {"timeout_seconds", 0}});
  // Two more snapshots arrive while the run goes on (it pauses only at the
  // last of 6000 batches).
  ASSERT_TRUE(core->wait_for_snapshot_after(seq, 20s));
  ASSERT_TRUE(core->wait_for_snapshot_after(seq + 1, 20s));
  // And the statistics view follows, announced through the change feed.
  auto& port = core->port();
  uint64_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!(session_->watch_snapshot() && session_->watch_snapshot()->sequence >= 2) &&
         std::chrono::steady_clock::now() < deadline) {
    seen = port.wait_for_change(seen, 1s);
  }
  ASSERT_TRUE(session_->watch_snapshot());
  EXPECT_GE(session_->watch_snapshot()->sequence, 2u);
  json status = get("/api/status").json();
  EXPECT_EQ(status["state"], "running");
  EXPECT_GT(status["snapshot_sequence"].get<uint64_t>(), seq + 1);
  EXPECT_GE(status["stats"]["sequence"].get<uint64_t>(), 2u);
  EXPECT_EQ(post("/api/pause", {{"timeout_seconds", 20}}).json()["state"], "paused");
}

// A loop whose body logs its loss, over sessions the tests set up first
// (watched layers, metric instruments).
class StatsLoopTest : public StatsApiTest {
 protected:
  void serve(nansense::StartOptions options, int64_t epochs) {
    epochs_ = epochs;
    serve_session(4, 2, options.epochs(epochs).phases(nansense::PhaseCounts{{"train", 4}, {"val", 2}}));
  }
  // Runs the loop to its end, detached after the first pause.
  void train_to_end() {
    trainer_ = std::thread([this] {
      try {
        for (int64_t e = 0; e < epochs_; ++e) {
          for (auto& batch : session_->batches(train_, "train")) {
            optimizer_->zero_grad();
            auto loss = torch::nll_loss(model_->forward(batch.first), batch.second);
            loss.backward();
            optimizer_->step();
            session_->log_scalar("loss", loss.item<double>());
          }
          torch::NoGradGuard no_grad;
          for (auto& batch : session_->batches(val_, "val")) model_->forward(batch.first);
        }
        session_->close();
      } catch (const std::exception&) {
      }
    });
    wait_paused();
    post("/api/run", {{"detach", true}});
    ASSERT_EQ(session_->wait_until_stopped(30s), nansense::RunState::kFinished);
  }
  int64_t epochs_ = 1;
};

TEST_F(StatsLoopTest, LoggedScalarsAndMetricsKeepTheirPositions) {
  std::mutex mu;
  std::map<std::pair<std::string, int64_t>, double> epoch_max;  // (phase, epoch) -> max seen
  int64_t calls = 0;
  nansense::StartOptions options;
  options.watch({"fc1"});
  serve(options, 2);
  session_->watch_metric("act_mean", [&](const nansense::LayerContext& ctx) -> std::optional<double> {
    std::lock_guard lock(mu);
    ++calls;
    EXPECT_EQ(ctx.layer, "fc1");
    EXPECT_EQ(ctx.weights.count("fc1.weight"), 1u);
    EXPECT_EQ(ctx.gradient.defined(), ctx.phase == "train");
    return ctx.activation.mean().item<double>();
  });
  session_->watch_metric(
      "act_max",
      [&](const nansense::LayerContext& ctx) -> std::optional<double> {
        const double m = ctx.activation.max().item<double>();
        std::lock_guard lock(mu);
        auto [it, fresh] = epoch_max.emplace(std::make_pair(ctx.phase, ctx.position.epoch), m);
        if (!fresh) it->second = std::max(it->second, m);
        return m;
      },
      nansense::MetricOn::kEpoch, nansense::MetricReduce::kMax);
  EXPECT_THROW(session_->watch_metric("act_mean", [](const nansense::LayerContext&) { return 1.0; }),
               nansense::UsageError);
  EXPECT_THROW(session_->log_scalar("early", 1.0), nansense::UsageError);
  train_to_end();

  json metrics = get("/api/metrics").json();
  EXPECT_EQ(metrics["failed"], json::array());
  std::map<std::string, json> by_key;
  for (const auto& s : metrics["series"]) {
    const std::string key =
        s["name"].get<std::string>() + "|" + s["phase"].get<std::string>() + "|" + s["layer"].get<std::string>();
    by_key[key] = s;
  }
  ASSERT_TRUE(by_key.count("loss|train|")) << metrics.dump();
  const json& loss = by_key["loss|train|"]["points"];
  ASSERT_EQ(loss.size(), 8u);
  for (size_t i = 0; i < loss.size(); ++i) {
    const int64_t epoch = static_cast<int64_t>(i) / 4, batch = static_cast<int64_t>(i) % 4;
    EXPECT_EQ(loss[i]["epoch"], epoch);
    EXPECT_EQ(loss[i]["batch"], batch);
    EXPECT_DOUBLE_EQ(loss[i]["x"].get<double>(), static_cast<double>(epoch) + static_cast<double>(batch) / 4.0);
  }
  // Per batch: one point per collected batch of each phase.
  ASSERT_TRUE(by_key.count("act_mean|train|fc1"));
  EXPECT_EQ(by_key["act_mean|train|fc1"]["points"].size(), 8u);
  EXPECT_EQ(by_key["act_mean|val|fc1"]["points"].size(), 4u);
  EXPECT_EQ(calls, 12);
  // Per epoch: one reduced point per epoch, batch null, the epoch's maximum.
  for (const std::string phase : {"train", "val"}) {
    const json& points = by_key["act_max|" + phase + "|fc1"]["points"];
    ASSERT_EQ(points.size(), 2u) << phase;
    for (const auto& p : points) {
      EXPECT_TRUE(p["batch"].is_null());
      const double want = epoch_max[std::make_pair(phase, p["epoch"].get<int64_t>())];
      EXPECT_NEAR(p["value"].get<double>(), want, 1e-5);
    }
  }
  // A layer filter keeps the logged scalars.
  json filtered = get("/api/metrics?layers=fc2").json();
  EXPECT_EQ(names(filtered["series"], "name"), std::vector<std::string>({"loss"}));
}

TEST_F(StatsLoopTest, AThrowingInstrumentIsDisabledAndReportedWhileTrainingCompletes) {
  nansense::StartOptions options;
  options.watch({"fc1", "fc2"});
  serve(options, 2);
  int calls = 0;
  session_->watch_metric("fragile", [&](const nansense::LayerContext&) -> std::optional<double> {
    if (++calls == 3) throw std::runtime_error("the third call breaks");
    return 1.0;
  });
  train_to_end();
  EXPECT_EQ(calls, 3);
  json metrics = get("/api/metrics").json();
  ASSERT_EQ(metrics["failed"].size(), 1u);
  EXPECT_EQ(metrics["failed"][0]["name"], "fragile");
  EXPECT_NE(metrics["failed"][0]["error"].get<std::string>().find("the third call breaks"), std::string::npos);
  json status = get("/api/status").json();
  ASSERT_TRUE(status.contains("internal_errors"));
  EXPECT_NE(status["internal_errors"].dump().find("fragile"), std::string::npos);
  // The statistics themselves went on to the end.
  EXPECT_EQ(batches_of("fc1", "train", 1), 4);
}

TEST_F(StatsApiTest, WatchPerformanceRefusesBadValuesAndTakesGoodOnes) {
  start();
  wait_paused();
  for (const json& body :
       {json{{"histogram_sample", -5}}, json{{"channel_limit", 0}}, json{{"histogram_sample", "all"}}}) {
    Reply r = post("/api/stats/performance", body);
    EXPECT_EQ(r.status, 400u) << body.dump();
    EXPECT_EQ(r.json()["argument"], body.begin().key()) << r.body;
  }
  EXPECT_EQ(session_->watch_performance(), nansense::WatchPerformance());
  json settings = post("/api/stats/performance", {{"histogram_sample", 0}}).json();
  EXPECT_EQ(settings["watch_performance"]["histogram_sample"], 0);
  EXPECT_TRUE(settings["statistics_flushed"].get<bool>());
  EXPECT_EQ(session_->watch_performance().histogram_sample(), 0);
  EXPECT_THROW(session_->set_watch_performance(nansense::WatchPerformance().histogram_sample(-1)),
               nansense::UsageError);
}

TEST_F(StatsLoopTest, HistoryEqualsADirectComputation) {
  nansense::StartOptions options;
  options.watch({"fc1"});
  serve(options, 1);
  // The instrument sees the very tensors the statistics fold: keep copies.
  std::vector<torch::Tensor> seen;
  session_->watch_metric("keep", [&](const nansense::LayerContext& ctx) -> std::optional<double> {
    if (ctx.phase == "train") seen.push_back(ctx.activation.detach().clone().to(torch::kDouble));
    return std::nullopt;
  });
  train_to_end();
  ASSERT_EQ(seen.size(), 4u);
  auto all = torch::cat(seen).reshape({-1});

  json history = get("/api/stats/history?layer=fc1&phase=train").json();
  EXPECT_EQ(history["edges"].size(), 212u);
  ASSERT_EQ(history["phases"]["train"].size(), 1u);
  const json& epoch = history["phases"]["train"][0];
  EXPECT_EQ(epoch["batches"], 4);
  const json& a = epoch["activation"];
  EXPECT_EQ(a["n"], all.numel());
  auto near = [](const json& got, double want) {
    EXPECT_NEAR(got.get<double>(), want, 1e-5 * std::max(1.0, std::abs(want))) << got.dump();
  };
  near(a["sum"], all.sum().item<double>());
  near(a["sum_sq"], all.pow(2).sum().item<double>());
  near(a["mean"], all.mean().item<double>());
  near(a["std"], all.std(/*unbiased=*/false).item<double>());
  near(a["min"], all.min().item<double>());
  near(a["max"], all.max().item<double>());
  EXPECT_EQ(a["nan"], 0);
  ASSERT_TRUE(a["hist"].is_array());
  EXPECT_EQ(a["hist"].size(), 211u);
  int64_t total = 0;
  for (const auto& c : a["hist"]) total += c.get<int64_t>();
  EXPECT_EQ(total, all.numel());
  EXPECT_EQ(a["binned"], all.numel());  // small tensors: every value binned
  EXPECT_EQ(a["channels"], 8);
  EXPECT_TRUE(epoch["gradient"].is_object());
  // The parameters of fc1, sampled at the epoch's first collected batch.
  ASSERT_TRUE(history["parameters"].contains("fc1.weight"));
  EXPECT_EQ(history["parameters"]["fc1.weight"].size(), 1u);

  // Unknown names are refused with the known ones.
  Reply r = get("/api/stats/history?layer=fc9");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(r.json()["error"].get<std::string>().find("fc1"), std::string::npos);
  r = get("/api/stats/history?layer=fc1&phase=test");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(r.json()["error"].get<std::string>().find("train, val"), std::string::npos) << r.body;

  // The current batch of any layer, binned the same way.
  json current = get("/api/stats/current?layer=fc2").json();
  EXPECT_EQ(current["activation"]["n"], 5 * 3);
  EXPECT_EQ(current["activation"]["hist"].size(), 211u);
}

TEST_F(StatsLoopTest, RenderHistogramIsAPngUnderTheCap) {
  nansense::StartOptions options;
  options.watch({"fc1"});
  serve(options, 1);
  train_to_end();
  Reply png = get("/api/render/histogram?layers=fc1&log_y=true");
  ASSERT_EQ(png.status, 200u) << png.body;
  EXPECT_EQ(png.body.substr(1, 3), "PNG");
  json info = json::parse(png.headers["X-Nansense-Render"]);
  EXPECT_LE(info["width"].get<int64_t>(), 1568);
  EXPECT_LE(info["height"].get<int64_t>(), 1568);
  EXPECT_FALSE(info["series"].empty());
  EXPECT_EQ(get("/api/render/histogram?layers=fc2").status, 404u);
  EXPECT_EQ(get("/api/render/histogram?layers=fc1&phase=test").status, 404u);
  Reply channel = get("/api/render/histogram?layers=fc1&channel=99");
  EXPECT_EQ(channel.status, 400u);
  EXPECT_EQ(channel.json()["argument"], "channel");

  // The same through MCP: an image with its caption.
  McpClient mcp(port_);
  mcp.initialize();
  json result = mcp.tool("render_histogram", {{"layers", {"fc1"}}, {"phase", "train"}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump().substr(0, 400);
  bool image = false;
  for (const auto& block : result["content"]) image = image || block["type"] == "image";
  EXPECT_TRUE(image);
  EXPECT_NE(result["content"][0]["text"].get<std::string>().find("signed-log"), std::string::npos);
  json listed = mcp.tool_json("list_stats");
  EXPECT_EQ(names(listed["layers"], "layer"), std::vector<std::string>({"fc1"}));
  json refused = mcp.tool("watch_layers", {{"layers", {"nope"}}});
  EXPECT_TRUE(refused["isError"].get<bool>());
  EXPECT_NE(refused["content"][0]["text"].get<std::string>().find("\"nope\""), std::string::npos);
}

// A served session whose loop runs session.epochs(3, ...) with fc1 watched.
class StatsRewindTest : public EpochLoopServerTest {
 protected:
  void SetUp() override { start_epoch_loop("nansense_stats_rewind", nansense::StartOptions().watch({"fc1"})); }
};

TEST_F(StatsRewindTest, AJumpDropsTheStatisticsOfLaterEpochs) {
  wait_paused();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(post("/api/step", {{"unit", "epoch"}, {"timeout_seconds", 20}}).json()["state"], "paused");
  }
  json listed = get("/api/stats").json();
  ASSERT_EQ(listed["layers"].size(), 1u);
  EXPECT_EQ(listed["layers"][0]["phases"][0]["epochs"], json({0, 1, 2}));
  const uint64_t before = listed["sequence"];

  json status = post("/api/time_travel", {{"epoch", 1}, {"timeout_seconds", 20}}).json();
  ASSERT_EQ(status["state"], "paused");
  ASSERT_EQ(status["live_position"]["epoch"], 1);
  listed = get("/api/stats").json();
  EXPECT_GT(listed["sequence"].get<uint64_t>(), before);
  // Epoch 2 is gone; epoch 1 holds only the batch run since the jump.
  EXPECT_EQ(listed["layers"][0]["phases"][0]["epochs"], json({0, 1}));
  json history = get("/api/stats/history?layer=fc1&phase=train").json();
  EXPECT_EQ(history["phases"]["train"][1]["batches"], 1);
  for (const auto& s : history["parameters"]["fc1.weight"]) EXPECT_LT(s["epoch"].get<int64_t>(), 2);
}

}  // namespace
}  // namespace nansense::testing
