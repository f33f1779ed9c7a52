// Frozen moments, lock() and park() end to end: a moment frozen during a
// detached run and loaded into a fresh model serves the same pictures and
// statistics a live pause at that batch served; a locked, parked session
// refuses run control, time travel, watching and settings over REST and MCP
// while experiments still run (clamped) and probes apply to the calling
// visitor alone (visitor_probes_test.cpp has the rest); damaged, foreign and
// mismatched moment files are refused with a reason.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "session/session_port.h"

namespace {

using nansense::testing::http_request;
using nansense::testing::McpClient;
using nansense::testing::port_of;
using nansense::testing::TinyNet;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace fs = std::filesystem;

using Batches = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

struct TrainingRun {
  TinyNet model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  Batches train, val;
  // The same weights and data every time: run A (frozen) and run B (live) match.
  TrainingRun() {
    torch::manual_seed(0);
    model = TinyNet();
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int i = 0; i < 4; ++i) train.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
    for (int i = 0; i < 2; ++i) val.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
  }
  nansense::StartOptions options() const {
    return nansense::StartOptions()
        .epochs(2)
        .phases(nansense::PhaseCounts{{"train", 4}, {"val", 2}})
        .optimizer(optimizer.get())
        .stats_scope(nansense::StatsScope::kAll)
        .watch({"fc1"});
  }
  void train_loop(nansense::Session& session) {
    for (int e = 0; e < 2; ++e) {
      for (auto& batch : session.batches(train, "train")) {
        optimizer->zero_grad();
        auto loss = torch::nll_loss(model->forward(batch.first), batch.second);
        loss.backward();
        optimizer->step();
      }
      torch::NoGradGuard no_grad;
      for (auto& batch : session.batches(val, "val")) model->forward(batch.first);
    }
    session.close();
  }
};

torch::Tensor replay_loss(TinyNet net, const std::vector<torch::Tensor>& item) {
  return torch::nll_loss(net->forward(item[0]), item[1]);
}

nansense::ServeOptions quiet() { return nansense::ServeOptions().port(0).open_browser(false).print_banner(false); }

// What a visitor sees at the moment: pictures and numbers, by request.
std::map<std::string, std::string> served_views(int port) {
  std::map<std::string, std::string> out;
  for (const std::string target :
       {"/api/render/strip?layer=fc1&kind=activation", "/api/render/strip?layer=fc1&kind=gradient",
        "/api/render/strip?layer=fc2&kind=gradient", "/api/render/input", "/api/stats/history?layer=fc1",
        "/api/render/histogram?layers=fc1", "/api/weight_stats?layer=fc1"}) {
    auto r = http_request(port, "GET", target);
    EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
    out[target] = r.body;
  }
  return out;
}

class MomentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nansense_moment_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "demo.moment").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Run A: detached from the start, the moment frozen at epoch 1, train batch 2.
  void freeze() {
    TrainingRun a;
    auto session = nansense::start(a.model, a.options());
    session.freeze_moment(path_, "train", 1, 2);
    session.detach();
    a.train_loop(session);
    ASSERT_TRUE(fs::exists(path_)) << "no moment written";
  }
  nansense::Session load(std::optional<nansense::ServeOptions> serve = quiet()) {
    torch::manual_seed(123);  // other initial weights: the file's must win
    fresh_ = TinyNet();
    return nansense::load_moment(
        fresh_, path_,
        [net = fresh_](torch::nn::Module&, const std::vector<torch::Tensor>& item) { return replay_loss(net, item); },
        serve);
  }

  fs::path dir_;
  std::string path_;
  TinyNet fresh_{nullptr};
};

TEST_F(MomentTest, LoadedMomentServesWhatTheLivePauseServed) {
  freeze();
  if (HasFatalFailure()) return;

  // Run B: the same run, paused live at the same batch.
  TrainingRun b;
  auto live = nansense::start(b.model, b.options());
  ASSERT_TRUE(nansense::serve(live, quiet()));
  nansense::BatchPosition at;
  at.phase = "train";
  at.epoch = 1;
  at.batch_idx = 2;
  live.run_until(at);
  std::thread trainer([&] { b.train_loop(live); });
  ASSERT_EQ(live.wait_until_stopped(30s), nansense::RunState::kPaused);
  const auto live_views = served_views(port_of(live.url()));
  const json live_status = http_request(port_of(live.url()), "GET", "/api/status").json();
  live.detach();
  trainer.join();

  auto loaded = load();
  const int port = port_of(loaded.url());
  const json status = http_request(port, "GET", "/api/status").json();
  EXPECT_EQ(status["snapshot_position"]["epoch"], 1) << status;
  EXPECT_EQ(status["snapshot_position"]["batch_idx"], 2) << status;
  EXPECT_EQ(status["snapshot_position"]["phase"], "train") << status;
  EXPECT_EQ(status["schedule"], live_status["schedule"]);
  EXPECT_EQ(status["stats"]["watched_layers"], json::array({"fc1"})) << status;
  EXPECT_EQ(status["locked"], false);
  const auto views = served_views(port);
  for (const auto& [target, body] : live_views) {
    EXPECT_TRUE(views.at(target) == body)
        << target << " differs:\nlive:   " << body.substr(0, 300) << "\nloaded: " << views.at(target).substr(0, 300);
  }
  loaded.close();
}

TEST_F(MomentTest, LockedParkedSessionRefusesChangesOverRestAndMcpAndRunsExperiments) {
  freeze();
  if (HasFatalFailure()) return;
  auto session = load();
  session.lock();
  EXPECT_TRUE(session.locked());
  std::thread parked([&] { session.park(); });
  ASSERT_EQ(session.wait_until_stopped(30s), nansense::RunState::kPaused);
  const int port = port_of(session.url());

  const json status = http_request(port, "GET", "/api/status").json();
  EXPECT_EQ(status["locked"], true);
  EXPECT_EQ(status["stats"]["scope"], "all") << status;
  EXPECT_EQ(status["state"], "paused");

  const std::vector<std::pair<std::string, json>> refused = {
      {"/api/step", json::object()},
      {"/api/run", json::object()},
      {"/api/pause", json::object()},
      {"/api/refresh", json::object()},
      {"/api/time_travel", {{"epoch", 0}}},
      {"/api/stats/scope", {{"scope", "watched"}}},
      {"/api/stats/watch", {{"layers", {"fc2"}}}},
      {"/api/stats/unwatch", {{"layers", {"fc1"}}}},
      {"/api/stats/update_frequency", {{"unit", "batch"}, {"n", 1}}},
      {"/api/debug/settings", {{"enabled", false}}},
      {"/api/experiments/auto_run", {{"enabled", true}}},
      {"/api/experiments/cancel", json::object()},
  };
  for (const auto& [target, body] : refused) {
    auto r = http_request(port, "POST", target, body.dump());
    EXPECT_EQ(r.status, 409u) << target << ": " << r.body;
    EXPECT_NE(r.body.find("locked"), std::string::npos) << target << ": " << r.body;
  }
  // Nothing changed.
  const json after = http_request(port, "GET", "/api/status").json();
  EXPECT_EQ(after["state"], "paused");
  EXPECT_EQ(after["stats"]["scope"], "all");
  EXPECT_EQ(after["stats"]["watched_layers"], json::array({"fc1"}));
  EXPECT_EQ(after["snapshot_sequence"], status["snapshot_sequence"]);

  // Probes are no longer refused: they apply to the calling visitor only. A
  // request without the visitor cookie is a new visitor, so the next one
  // (another new visitor) sees the shared moment, no probe.
  for (const auto& [target, body] :
       std::vector<std::pair<std::string, json>>{{"/api/probe/pin", {{"timeout_seconds", 10}}},
                                                 {"/api/probe/mode", {{"mode", "eval"}, {"timeout_seconds", 10}}}}) {
    auto r = http_request(port, "POST", target, body.dump());
    ASSERT_EQ(r.status, 200u) << target << ": " << r.body;
    EXPECT_EQ(r.json()["active"], true) << target << ": " << r.body;
    EXPECT_NE(r.headers["Set-Cookie"].find("nansense_visitor="), std::string::npos) << target;
    const json seen = http_request(port, "GET", "/api/status").json();
    EXPECT_EQ(seen["probe"]["active"], false) << target << ": " << seen["probe"];
    EXPECT_EQ(seen["snapshot_sequence"], status["snapshot_sequence"]) << target;
  }

  // Experiments run, their long-running parameters clamped.
  auto ran = http_request(
      port, "POST", "/api/experiments/run",
      json{{"kind", "neuron_ig"}, {"layer", "relu"}, {"params", {{"channel", 1}, {"ig_steps", 400}, {"batch", 5}}}}
          .dump());
  ASSERT_EQ(ran.status, 200u) << ran.body;
  json result = ran.json();
  EXPECT_EQ(result["stage"], "done") << result;
  EXPECT_EQ(result["params"]["ig_steps"], 32) << result;
  EXPECT_EQ(result["clamped_params"], json::array({"ig_steps"})) << result;

  // MCP: the same refusals, the same experiments.
  McpClient mcp(port);
  mcp.initialize();
  json step = mcp.tool("step", json::object());
  EXPECT_EQ(step["isError"], true) << step;
  EXPECT_NE(step.dump().find("locked"), std::string::npos) << step;
  json watch = mcp.tool("watch_layers", {{"layers", {"fc2"}}});
  EXPECT_EQ(watch["isError"], true) << watch;
  // An MCP session is a visitor: its probe is its own.
  json pin = mcp.tool("pin_batch", {{"timeout_seconds", 10}});
  EXPECT_EQ(pin["isError"], false) << pin;
  EXPECT_EQ(mcp.tool_json("get_probe_status")["active"], true);
  EXPECT_EQ(http_request(port, "GET", "/api/probe").json()["active"], false);
  json experiment =
      mcp.tool("run_experiment", {{"kind", "neuron_gradient"}, {"layer", "fc1"}, {"params", {{"channel", 0}}}});
  EXPECT_EQ(experiment["isError"], false) << experiment;
  json got = mcp.tool("get_status", json::object());
  EXPECT_EQ(got["isError"], false) << got;

  // The session's own API: settings are no-ops, instruments and time travel raise.
  session.set_stats_scope(nansense::StatsScope::kNone);
  EXPECT_EQ(session.stats_scope(), nansense::StatsScope::kAll);
  session.step_batch();
  EXPECT_EQ(session.state(), nansense::RunState::kPaused);
  EXPECT_THROW(session.watch_metric("m", [](const nansense::LayerContext&) { return 1.0; }), nansense::UsageError);
  EXPECT_THROW(session.request_time_travel(0), nansense::TimeTravelError);

  session.close();
  parked.join();
  EXPECT_EQ(session.state(), nansense::RunState::kFinished);
}

TEST_F(MomentTest, DamagedForeignAndMismatchedMomentsAreRefusedWithAReason) {
  freeze();
  if (HasFatalFailure()) return;
  const std::string good = path_;
  auto expect_refused = [&](const std::string& path, const std::string& says) {
    path_ = path;
    try {
      auto s = load(std::nullopt);
      ADD_FAILURE() << path << " was loaded";
    } catch (const nansense::MomentError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    path_ = good;
  };
  // Truncated: the first half of the file.
  const auto size = fs::file_size(good);
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes(size / 2, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::ofstream((dir_ / "half.moment").string(), std::ios::binary) << bytes;
  }
  expect_refused((dir_ / "half.moment").string(), "truncated");
  // Not a nansense file at all.
  std::ofstream((dir_ / "foreign.moment").string()) << "PK\x03\x04 a zip, not a moment";
  expect_refused((dir_ / "foreign.moment").string(), "foreign.moment");
  expect_refused((dir_ / "missing.moment").string(), "missing.moment");
  // Another model's moment: names the parameter that differs.
  struct Wide : torch::nn::Module {
    Wide() {
      fc1 = register_module("fc1", torch::nn::Linear(4, 16));
      fc2 = register_module("fc2", torch::nn::Linear(16, 3));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  };
  auto wide = std::make_shared<Wide>();
  try {
    nansense::load_moment(wide, good,
                          [](torch::nn::Module&, const std::vector<torch::Tensor>&) { return torch::zeros({}); });
    ADD_FAILURE() << "a moment loaded into another architecture";
  } catch (const nansense::MomentError& e) {
    EXPECT_NE(std::string(e.what()).find("fc1"), std::string::npos) << e.what();
  }
}

TEST_F(MomentTest, AnUnreachedTargetIsReportedAtClose) {
  TrainingRun a;
  auto session = nansense::start(a.model, a.options());
  session.freeze_moment(path_, "train", 7, 0);
  session.detach();
  a.train_loop(session);
  EXPECT_FALSE(fs::exists(path_));
  auto port = nansense::detail::port_of(session);
  ASSERT_TRUE(port);
  bool reported = false;
  for (const auto& e : port->internal_errors()) reported |= e.find("never reached") != std::string::npos;
  EXPECT_TRUE(reported);
}

}  // namespace
