// The MCP tools over loopback against a real training loop: each one does
// what its Controller query or command does, refusals come back as tool errors
// naming what to change, and pictures arrive as PNGs sized for a vision model.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <filesystem>
#include <thread>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "render/downscale.h"

namespace {

using nansense::testing::base64_decode;
using nansense::testing::McpClient;
using nansense::testing::port_of;
using nansense::testing::text_of;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;

class McpToolsTest : public TrainingServerTest {};

TEST_F(McpToolsTest, ArgumentErrorsAreToolErrorsThatNameTheArgument) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  struct Case {
    std::string tool;
    json arguments;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"step", {{"unit", 5}}, "\"unit\" must be a string"},
           {"step", {{"unit", "week"}}, "\"batch\", \"phase\" or \"epoch\""},
           {"step", {{"timeout_seconds", "ten"}}, "\"timeout_seconds\" must be a number"},
           {"step", {{"timeout_seconds", 301}}, "from 0 to 300"},
           {"step", {{"units", "batch"}}, "unknown argument \"units\""},
           {"get_status", {{"verbose", true}}, "takes no arguments"},
           {"get_layer_stats", {{"bins", "many"}}, "\"bins\" must be an integer"},
           {"get_layer_stats", {{"bins", 1}}, "from 2 to 512"},
           {"get_layer_stats", {{"layers", "fc1"}}, "\"layers\" must be a list of strings"},
           {"get_layer_stats", {{"include_histogram", "yes"}}, "true or false"},
           {"get_weight_stats", json::object(), "missing required argument \"layer\""},
           {"run_until", {{"phase", "train"}, {"epoch", 1.5}, {"batch", 0}}, "\"epoch\" must be an integer"},
           {"render_layer", {{"layers", json::array({"fc1"})}, {"sample", -1}}, "0 or more"},
       }) {
    json result = client.tool(c.tool, c.arguments);
    EXPECT_TRUE(result["isError"].get<bool>()) << c.tool << " " << c.arguments.dump();
    EXPECT_NE(text_of(result).find(c.says), std::string::npos) << text_of(result);
    EXPECT_EQ(result["structuredContent"]["state"], "paused");
  }
  // A whole number written as 2.0 is an integer, and null means "not given".
  json stats = client.tool_json("get_layer_stats", {{"layers", {"fc1"}}, {"bins", 4.0}, {"channel", nullptr}});
  EXPECT_EQ(stats["layers"][0]["name"], "fc1");
  // Nothing moved.
  EXPECT_EQ(client.tool_json("get_status")["live_position"]["batch_idx"], 0);
}

TEST_F(McpToolsTest, RefusalsAreToolErrorsThatSayWhatToDo) {
  start(/*epochs=*/1, /*train_batches=*/2, /*val_batches=*/1);
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json unknown = client.tool("render_layer", {{"layers", {"conv9"}}});
  EXPECT_TRUE(unknown["isError"].get<bool>());
  EXPECT_NE(text_of(unknown).find("unknown layer \"conv9\""), std::string::npos);
  EXPECT_NE(text_of(unknown).find("fc1"), std::string::npos);
  json no_params = client.tool("get_weight_stats", {{"layer", "relu"}});
  EXPECT_TRUE(no_params["isError"].get<bool>());
  EXPECT_NE(text_of(no_params).find("layers with parameters: fc1, fc2"), std::string::npos) << text_of(no_params);
  json channel = client.tool("get_layer_stats", {{"layers", {"fc1"}}, {"channel", 8}});
  EXPECT_TRUE(channel["isError"].get<bool>());
  EXPECT_NE(text_of(channel).find("8 channels"), std::string::npos) << text_of(channel);
  json past = client.tool("run_until", {{"phase", "train"}, {"epoch", 0}, {"batch", 0}});
  EXPECT_TRUE(past["isError"].get<bool>());
  EXPECT_NE(text_of(past).find("not after"), std::string::npos);
  json phase = client.tool("run_until", {{"phase", "test"}, {"epoch", 0}, {"batch", 0}});
  EXPECT_NE(text_of(phase).find("known phases: train, val"), std::string::npos) << text_of(phase);

  json run = client.tool_json("run", {{"detach", true}});
  EXPECT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kFinished);
  json finished = client.tool("step", {{"unit", "batch"}});
  EXPECT_TRUE(finished["isError"].get<bool>());
  EXPECT_NE(text_of(finished).find("finished"), std::string::npos);
  EXPECT_EQ(finished["structuredContent"]["state"], "finished");
  // Queries keep working on the last captured batch.
  EXPECT_FALSE(client.tool("get_layer_stats", {{"layers", {"fc2"}}})["isError"].get<bool>());
}

TEST_F(McpToolsTest, ALostLoopIsAToolError) {
  start(2, 4, 2, /*throw_midway=*/true);
  EXPECT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kLost);
  McpClient client(port_);
  client.initialize();
  json result = client.tool("pause");
  EXPECT_TRUE(result["isError"].get<bool>());
  EXPECT_NE(text_of(result).find("lost"), std::string::npos);
  EXPECT_EQ(client.tool_json("get_status")["state"], "lost");
}

TEST_F(McpToolsTest, StepAndStatsToolsMatchTheCapturedBatch) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json status = client.tool_json("step", {{"unit", "batch"}, {"timeout_seconds", 20}});
  EXPECT_EQ(status["state"], "paused");
  EXPECT_EQ(status["live_position"]["batch_idx"], 1);
  EXPECT_EQ(status["snapshot_position"]["batch_idx"], 1);

  json arch = client.tool_json("get_architecture");
  EXPECT_EQ(arch["layers"].size(), 5u);

  auto snap = session_->snapshot();
  ASSERT_TRUE(snap);
  json stats = client.tool_json(
      "get_layer_stats", {{"layers", {"fc1", "input"}}, {"include_histogram", true}, {"bins", 8}, {"channel", 3}});
  EXPECT_EQ(stats["position"]["batch_idx"], 1);
  const json& fc1 = stats["layers"][0];
  const auto& act = snap->activations.at("fc1");
  EXPECT_EQ(fc1["activation"]["shape"], json::array({5, 8}));
  EXPECT_EQ(fc1["activation"]["n"], 40);
  EXPECT_EQ(fc1["activation"]["nan"], 0);
  EXPECT_NEAR(fc1["activation"]["mean"].get<double>(), act.mean().item<double>(), 1e-5);
  EXPECT_NEAR(fc1["activation"]["std"].get<double>(), act.std(/*unbiased=*/false).item<double>(), 1e-5);
  EXPECT_NEAR(fc1["activation"]["max"].get<double>(), act.max().item<double>(), 1e-5);
  int64_t binned = 0;
  for (const auto& pair : fc1["activation"]["histogram"]["pairs"]) binned += pair[1].get<int64_t>();
  EXPECT_EQ(binned, 40);
  EXPECT_EQ(fc1["activation"]["channel"]["index"], 3);
  EXPECT_EQ(fc1["activation"]["channel"]["numel"], 5);
  EXPECT_NEAR(fc1["activation"]["channel"]["mean"].get<double>(), act.select(1, 3).mean().item<double>(), 1e-5);
  EXPECT_EQ(fc1["activation"]["dead_channels"]["of"], 8);
  EXPECT_TRUE(fc1["gradient"].is_object());
  EXPECT_TRUE(stats["layers"][1]["gradient"].is_null());
  EXPECT_NE(stats["layers"][1]["gradient_note"].get<std::string>().find("inputs"), std::string::npos);

  // relu zeroes negative inputs; a channel negative for all 5 samples is dead.
  const auto& relu = snap->activations.at("relu");
  const int64_t dead = relu.eq(0).all(0).sum().item<int64_t>();
  json relu_stats = client.tool_json("get_layer_stats", {{"layers", {"relu"}}});
  EXPECT_EQ(relu_stats["layers"][0]["activation"]["dead_channels"]["count"], dead);

  json weights = client.tool_json("get_weight_stats", {{"layer", "fc1"}, {"parameters", {"weight"}}});
  ASSERT_EQ(weights["parameters"].size(), 1u);
  const json& w = weights["parameters"][0];
  EXPECT_EQ(w["name"], "fc1.weight");
  EXPECT_NEAR(w["value"]["norm"].get<double>(), snap->weights.at("fc1.weight").norm().item<double>(), 1e-4);
  EXPECT_TRUE(w["gradient"].is_object());
  EXPECT_TRUE(w["optimizer_state"].contains("momentum_buffer")) << w.dump();
  EXPECT_EQ(w["hyperparameters"]["lr"], 0.1);
  EXPECT_EQ(w["hyperparameters"]["momentum"], 0.9);

  // Every result also comes as structuredContent on 2025-06-18.
  json result = client.tool("get_status");
  EXPECT_EQ(result["structuredContent"]["live_position"]["batch_idx"], 1);
}

// One controller, two transports: REST answers the stats queries with the
// same JSON the tools return.
TEST_F(McpToolsTest, RestStatsRoutesServeTheSameQueries) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json tool = client.tool_json("get_layer_stats",
                               {{"layers", {"fc1", "relu"}}, {"include_histogram", true}, {"bins", 6}, {"channel", 2}});
  auto rest = get("/api/stats/layers?layers=fc1,relu&include_histogram=true&bins=6&channel=2");
  ASSERT_EQ(rest.status, 200u) << rest.body;
  EXPECT_EQ(rest.json(), tool);
  EXPECT_EQ(get("/api/stats/layers").json()["layers"].size(), 5u);
  EXPECT_EQ(get("/api/stats/layers?layers=nope").status, 404u);
  EXPECT_EQ(get("/api/stats/layers?bins=1").status, 400u);
  EXPECT_EQ(get("/api/stats/layers?channel=x").status, 400u);
  EXPECT_EQ(get("/api/stats/layers?colour=red").status, 400u);

  json weights = client.tool_json("get_weight_stats", {{"layer", "fc2"}, {"parameters", {"bias"}}});
  auto rest_weights = get("/api/weight_stats?layer=fc2&parameters=bias");
  ASSERT_EQ(rest_weights.status, 200u) << rest_weights.body;
  EXPECT_EQ(rest_weights.json(), weights);
  EXPECT_EQ(weights["parameters"][0]["name"], "fc2.bias");
  EXPECT_EQ(get("/api/weight_stats").status, 400u);
  EXPECT_EQ(get("/api/weight_stats?layer=fc2&parameters=gamma").status, 404u);
}

TEST_F(McpToolsTest, RunAttachedWaitsAndPauseStopsIt) {
  start(/*epochs=*/1000, /*train_batches=*/4, /*val_batches=*/2);
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json result = client.tool("run", {{"timeout_seconds", 0}});
  EXPECT_FALSE(result["isError"].get<bool>());
  EXPECT_EQ(result["structuredContent"]["state"], "running");
  EXPECT_NE(text_of(result).find("still running after 0 s"), std::string::npos) << text_of(result);
  json paused = client.tool_json("pause", {{"timeout_seconds", 20}});
  EXPECT_EQ(paused["state"], "paused");
  EXPECT_EQ(client.tool_json("pause")["state"], "paused");  // already paused: nothing to do
}

TEST_F(McpToolsTest, RenderLayerReturnsPngImagesWithCaptions) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json result = client.tool("render_layer", {{"layers", {"fc1"}}, {"sample", 2}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump();
  int images = 0;
  for (const auto& block : result["content"]) {
    if (block["type"] != "image") continue;
    ++images;
    EXPECT_EQ(block["mimeType"], "image/png");
    auto png = nansense::render::decode_png(base64_decode(block["data"]));
    // An 8x1 px strip (8 features) is sent 32x larger, each value a square.
    EXPECT_EQ(png.width, 256);
    EXPECT_EQ(png.height, 32);
  }
  EXPECT_EQ(images, 2);  // activation and gradient
  EXPECT_NE(text_of(result).find("fc1 activation, sample 2 of a batch of 5"), std::string::npos) << text_of(result);
  EXPECT_NE(text_of(result).find("fc1 gradient"), std::string::npos);
  EXPECT_EQ(result["structuredContent"]["images"][0]["downscaled"], false);
  EXPECT_EQ(result["structuredContent"]["images"][0]["width"], 8);
  EXPECT_NE(text_of(result).find("Image 256x32 px, enlarged 32x from 8x1 px"), std::string::npos) << text_of(result);

  // In the val phase there is no gradient: its picture is replaced by the reason.
  client.tool_json("step", {{"unit", "phase"}, {"timeout_seconds", 20}});
  json val = client.tool("render_layer", {{"layers", {"fc2"}}});
  ASSERT_FALSE(val["isError"].get<bool>()) << val.dump();
  EXPECT_NE(text_of(val).find("no gradient image for fc2"), std::string::npos) << text_of(val);
  EXPECT_EQ(val["structuredContent"]["missing"].size(), 1u);
  json only_gradient = client.tool("render_layer", {{"layers", {"fc2"}}, {"kind", "gradient"}});
  EXPECT_TRUE(only_gradient["isError"].get<bool>());
}

TEST_F(McpToolsTest, RenderInputShowsTheBatchInput) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json result = client.tool("render_input", {{"sample", 1}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump();
  ASSERT_EQ(result["content"][1]["type"], "image");
  auto png = nansense::render::decode_png(base64_decode(result["content"][1]["data"]));
  EXPECT_EQ(png.width, result["structuredContent"]["sent_width"].get<int>());
  EXPECT_EQ(png.height, result["structuredContent"]["sent_height"].get<int>());
  EXPECT_EQ(result["structuredContent"]["name"], "input");
  EXPECT_EQ(result["structuredContent"]["layout"], "strip");  // [5,4] features are no image
  EXPECT_NE(text_of(result).find("input 0 (\"input\"), sample 1 of a batch of 5"), std::string::npos)
      << text_of(result);
  json out_of_range = client.tool("render_input", {{"input", 1}});
  EXPECT_TRUE(out_of_range["isError"].get<bool>());
  EXPECT_NE(text_of(out_of_range).find("out of range"), std::string::npos) << text_of(out_of_range);
}

TEST(McpDownscaleTest, LongSideIsCappedByAreaAveraging) {
  nansense::render::Image wide(3136, 3);
  for (int x = 0; x < wide.width; ++x) {
    for (int y = 0; y < wide.height; ++y)
      wide.at(x, y) = x % 2 ? nansense::render::Rgba{255, 0, 0, 255} : nansense::render::Rgba{0, 0, 255, 255};
  }
  auto small = nansense::render::downscale_to_fit(wide, 1568);
  EXPECT_EQ(small.width, 1568);
  EXPECT_EQ(small.height, 2);  // 1.5 rounds to 2
  // Each output pixel averages one red and one blue pixel.
  EXPECT_NEAR(small.at(10, 0).r, 128, 1);
  EXPECT_NEAR(small.at(10, 0).b, 128, 1);
  EXPECT_EQ(small.at(10, 0).a, 255);

  // A transparent gap does not darken the colour beside it.
  nansense::render::Image gap(4000, 1);
  for (int x = 0; x < gap.width; ++x)
    gap.at(x, 0) = x % 2 ? nansense::render::Rgba{0, 0, 0, 0} : nansense::render::Rgba{200, 100, 50, 255};
  auto faded = nansense::render::downscale_to_fit(gap, 1000);
  EXPECT_EQ(faded.at(5, 0).r, 200);
  EXPECT_EQ(faded.at(5, 0).g, 100);
  EXPECT_NEAR(faded.at(5, 0).a, 128, 1);

  auto fits = nansense::render::downscale_to_fit(gap, 4000);
  EXPECT_EQ(fits.width, 4000);
}

TEST(McpDownscaleTest, SmallImagesAreEnlargedByAWholeFactor) {
  nansense::render::Image row(10, 1);
  for (int x = 0; x < row.width; ++x) row.at(x, 0) = {static_cast<uint8_t>(x * 20), 0, 0, 255};
  auto fitted = nansense::render::fit_png(nansense::render::encode_png(row));
  EXPECT_TRUE(fitted.enlarged());
  EXPECT_EQ(fitted.width, 320);
  EXPECT_EQ(fitted.height, 32);
  auto big = nansense::render::decode_png(fitted.png);
  EXPECT_EQ(big.at(319, 31).r, 180);  // the last value, unblended
  EXPECT_EQ(big.at(32, 0).r, 20);

  // The long side caps the factor: 1000 px cannot double within 1568.
  nansense::render::Image long_row(1000, 2);
  auto kept = nansense::render::fit_png(nansense::render::encode_png(long_row));
  EXPECT_FALSE(kept.enlarged());
  EXPECT_FALSE(kept.downscaled());
  EXPECT_EQ(kept.width, 1000);
}

// A Linear layer 3000 features wide renders a 3000 px strip: the agent gets
// it at 1568 px, and the caption says so.
struct WideNetImpl : torch::nn::Module {
  WideNetImpl() { fc = register_module("fc", torch::nn::Linear(4, 3000)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(WideNet);

TEST(McpImageTest, WideStripsAreDownscaledAndSaySo) {
  WideNet model;
  auto session = nansense::start(model, nansense::StartOptions().epochs(1).phases(nansense::PhaseCounts{{"train", 1}}));
  ASSERT_TRUE(nansense::serve(session, nansense::ServeOptions().port(0).open_browser(false).print_banner(false)));
  std::thread loop([&] {
    std::vector<torch::Tensor> data = {torch::randn({2, 4})};
    for (auto& x : session.batches(data, "train")) model->forward(x).sum().backward();
    session.close();
  });
  ASSERT_EQ(session.wait_until_stopped(20s), nansense::RunState::kPaused);
  McpClient client(port_of(session.url()));
  client.initialize();
  json result = client.tool("render_layer", {{"layers", {"fc"}}, {"kind", "activation"}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump();
  const json& image = result["content"][1];
  ASSERT_EQ(image["type"], "image");
  auto png = nansense::render::decode_png(base64_decode(image["data"]));
  EXPECT_EQ(png.width, 1568);
  EXPECT_EQ(png.height, 1);
  EXPECT_NE(text_of(result).find("downscaled from 3000x1 px"), std::string::npos) << text_of(result);
  EXPECT_EQ(result["structuredContent"]["images"][0]["width"], 3000);
  EXPECT_EQ(result["structuredContent"]["images"][0]["sent_width"], 1568);
  session.detach();
  loop.join();
}
}  // namespace

namespace {

class McpDebugToolsTest : public TrainingServerTest {};

TEST_F(McpDebugToolsTest, AgentsReadConfigureAndSilenceTheChecks) {
  start(/*epochs=*/1, /*train_batches=*/4, /*val_batches=*/1);
  wait_paused();
  const auto dir = std::filesystem::temp_directory_path() / ("nansense-mcp-debug-" + std::to_string(::getpid()));
  session_->set_debug_settings(session_->debug_settings().capsule_dir(dir.string()));
  McpClient client(port_);
  client.initialize();

  json quiet = client.tool_json("get_debug_report");
  EXPECT_TRUE(quiet["error"].is_null());
  EXPECT_EQ(quiet["settings"]["interval_batches"], 1);

  // Partial updates: what is left out keeps its value; bad values are tool errors.
  json updated = client.tool_json("configure_debug_checks", {{"threshold_fraction", 0.25}, {"allow", {"masked_fill"}}});
  EXPECT_EQ(updated["settings"]["threshold_fraction"], 0.25);
  EXPECT_EQ(updated["settings"]["allow"], json({"masked_fill"}));
  EXPECT_EQ(updated["settings"]["check_nan_inf"], true);
  json bad = client.tool("configure_debug_checks", {{"threshold_fraction", 1.5}});
  EXPECT_TRUE(bad["isError"].get<bool>());
  EXPECT_NE(text_of(bad).find("greater than 0 and at most 1"), std::string::npos) << text_of(bad);
  EXPECT_NE(text_of(bad).find("1.5"), std::string::npos) << text_of(bad);
  json zero = client.tool("configure_debug_checks", {{"threshold_fraction", 0}});
  EXPECT_TRUE(zero["isError"].get<bool>());
  // The bound is exclusive, as advertised.
  EXPECT_NE(text_of(zero).find("greater than 0 and at most 1, got 0"), std::string::npos) << text_of(zero);
  json category = client.tool("silence_debug_check", {{"category", "nan"}});
  EXPECT_TRUE(category["isError"].get<bool>());

  // A NaN in batch 2 of a detached run pauses it; the agent reads the report.
  train_[2].first[0][0] = NAN;
  client.tool_json("run", {{"detach", true}});
  ASSERT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kPaused);
  json report = client.tool_json("get_debug_report");
  ASSERT_TRUE(report["error"].is_object()) << report.dump();
  EXPECT_EQ(report["error"]["position"]["batch_idx"], 2);
  EXPECT_EQ(report["error"]["reasons"][0], "nan");
  EXPECT_EQ(client.tool_json("get_status")["debug"]["error"]["producer"]["layer"], "fc1");

  json silenced = client.tool_json("silence_debug_check");
  EXPECT_TRUE(silenced["error"].is_null());
  EXPECT_EQ(silenced["settings"]["check_nan_inf"], false);
  std::filesystem::remove_all(dir);
}

}  // namespace
