// The Weights page's server side over loopback against a real training loop:
// a layer's parameters with their default layouts, each tensor of a parameter
// drawn by dimension roles (checked pixel for pixel against the snapshot's
// tensor), MCP's render_weights, refusals that say what fits, and the tensor
// instruments: their outputs against a direct computation, and a throwing or
// misshapen instrument disabled and reported while training goes on.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <thread>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "render/colormap.h"
#include "render/downscale.h"

namespace {

using nansense::testing::McpClient;
using nansense::testing::text_of;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;

class WeightsApiTest : public TrainingServerTest {
 protected:
  // start(), with `setup` run on the session before the loop's first batch.
  void start_with(const std::function<void(nansense::Session&)>& setup) {
    serve_session(4, 2, nansense::StartOptions().epochs(2).phases(nansense::PhaseCounts{{"train", 4}, {"val", 2}}));
    if (HasFatalFailure()) return;
    setup(*session_);
    trainer_ = std::thread([this] {
      try {
        for (int64_t e = 0; e < 2; ++e) run_epoch();
        session_->close();
      } catch (const std::exception&) {
      }
    });
  }

  // Every pixel of the picture against the tensor `tiles` ([T, H, W]) drawn
  // on a diverging scale of its own max |value|.
  static void expect_pixels(const std::string& png, const torch::Tensor& tiles) {
    auto image = nansense::render::decode_png(png);
    const int64_t t = tiles.size(0), h = tiles.size(1), w = tiles.size(2);
    ASSERT_EQ(image.width, t * w + (t - 1));
    ASSERT_EQ(image.height, h);
    const double scale = tiles.abs().max().item<double>();
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const double v = tiles[i][y][x].item<double>();
          ASSERT_EQ(image.at(static_cast<int>(i * (w + 1) + x), static_cast<int>(y)),
                    nansense::render::diverging(v / scale))
              << "tile " << i << " at " << x << "," << y << " value " << v;
        }
      }
    }
  }
};

TEST_F(WeightsApiTest, WeightStatsGiveEachParametersDefaultLayout) {
  start();
  wait_paused();
  json stats = get("/api/weight_stats?layer=fc1").json();
  ASSERT_EQ(stats["parameters"].size(), 2u);
  EXPECT_EQ(stats["parameters"][0]["name"], "fc1.weight");
  EXPECT_EQ(stats["parameters"][0]["default_layout"],
            json({{"x_dim", 1}, {"y_dim", 0}, {"tile_dim", nullptr}, {"index", {0, 0}}}));
  EXPECT_EQ(stats["parameters"][1]["default_layout"],
            json({{"x_dim", 0}, {"y_dim", nullptr}, {"tile_dim", nullptr}, {"index", {0}}}));
}

TEST_F(WeightsApiTest, EachTensorOfAParameterIsDrawnByItsRoles) {
  start();
  wait_paused();
  auto snap = session_->snapshot();
  ASSERT_TRUE(snap);
  const torch::Tensor w = snap->weights.at("fc1.weight").to(torch::kDouble);  // [8, 4]

  // The default: the matrix as one image, rows down, columns across.
  auto r = get("/api/render/weight_strip?layer=fc1&parameter=weight");
  ASSERT_EQ(r.status, 200u) << r.body;
  json info = json::parse(r.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["parameter"], "fc1.weight");
  EXPECT_EQ(info["tensor"], "weight");
  EXPECT_EQ(info["shape"], json({8, 4}));
  EXPECT_EQ(info["tiles"], 1);
  EXPECT_EQ(info["tile_width"], 4);
  EXPECT_EQ(info["tile_height"], 8);
  EXPECT_EQ(info["sequence"], snap->sequence);
  expect_pixels(r.body, w.unsqueeze(0));

  // Transposed: dim 0 across, dim 1 down.
  r = get("/api/render/weight_strip?layer=fc1&parameter=fc1.weight&x_dim=0&y_dim=1");
  ASSERT_EQ(r.status, 200u) << r.body;
  expect_pixels(r.body, w.t().unsqueeze(0));

  // One tile per row of the matrix (dim 0 leaves Y, which stays vacant).
  r = get("/api/render/weight_strip?layer=fc1&parameter=weight&tile_dim=0");
  ASSERT_EQ(r.status, 200u) << r.body;
  info = json::parse(r.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["layout"], json({{"x_dim", 1}, {"y_dim", nullptr}, {"tile_dim", 0}, {"index", {0, 0}}}));
  expect_pixels(r.body, w.unsqueeze(1));

  // One row held at an index: Y off, dim 0 becomes an Index at 5.
  r = get("/api/render/weight_strip?layer=fc1&parameter=weight&y_dim=-1&index=5,0");
  ASSERT_EQ(r.status, 200u) << r.body;
  expect_pixels(r.body, w[5].reshape({1, 1, 4}));

  // The gradient and SGD's momentum buffer share the weight's layout.
  r = get("/api/render/weight_strip?layer=fc1&parameter=weight&tensor=gradient&x_dim=0&y_dim=1");
  ASSERT_EQ(r.status, 200u) << r.body;
  expect_pixels(r.body, snap->weight_gradients.at("fc1.weight").to(torch::kDouble).t().unsqueeze(0));
  r = get("/api/render/weight_strip?layer=fc1&parameter=weight&tensor=state:momentum_buffer");
  ASSERT_EQ(r.status, 200u) << r.body;
  expect_pixels(r.body, snap->optimizer_state.at("fc1.weight").at("momentum_buffer").to(torch::kDouble).unsqueeze(0));
}

TEST_F(WeightsApiTest, BadRequestsAreRefusedSayingWhatToDo) {
  start();
  wait_paused();
  struct Case {
    std::string query;
    unsigned status;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"layer=fc1&parameter=nope", 404, "has no parameter \"nope\"; its parameters: fc1.weight, fc1.bias"},
           {"layer=fc9&parameter=weight", 404, "unknown layer \"fc9\""},
           {"layer=relu&parameter=weight", 400, "has no parameters; layers with parameters: fc1, fc2"},
           {"layer=fc1&parameter=weight&x_dim=2", 400, "x_dim 2 is out of range"},
           {"layer=fc1&parameter=weight&x_dim=0&y_dim=0", 400, "y_dim and x_dim are both 0"},
           {"layer=fc1&parameter=weight&y_dim=-1&index=8", 400,
            "index 8 of dimension 0 is out of range: it has size 8 (0..7)"},
           {"layer=fc1&parameter=weight&index=0,0,0", 400, "one index per dimension"},
           {"layer=fc1&parameter=weight&x_dim=first", 400, "\"x_dim\" must be an integer"},
           {"layer=fc1&parameter=weight&x_dim=-2", 400, "-1 or more"},
           {"layer=fc1&parameter=weight&tensor=state:exp_avg", 404,
            "no state \"exp_avg\" for fc1.weight; fc1.weight has: weight, gradient, state:momentum_buffer"},
           {"layer=fc1&parameter=weight&tensor=bias", 400, "tensor must be \"weight\", \"gradient\""},
           {"layer=fc1&parameter=weight&tensor=instrument:zscore", 404, "no weight-tensor instrument \"zscore\""},
       }) {
    auto r = get("/api/render/weight_strip?" + c.query);
    EXPECT_EQ(r.status, c.status) << c.query << ": " << r.body;
    const std::string error = r.json().value("error", "");
    EXPECT_NE(error.find(c.says), std::string::npos) << c.query << ": " << error;
  }
  // Nothing moved: the loop is still paused where it was.
  EXPECT_EQ(get("/api/status").json()["state"], "paused");
}

TEST_F(WeightsApiTest, McpRenderWeightsDrawsEveryTensorWithScalarsAndHyperparameters) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json result = client.tool("render_weights", {{"layer", "fc1"}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump();
  const json& images = result["structuredContent"]["images"];
  std::vector<std::string> drawn;
  for (const auto& i : images)
    drawn.push_back(i["parameter"].get<std::string>() + " " + i["tensor"].get<std::string>());
  EXPECT_EQ(drawn,
            (std::vector<std::string>{"fc1.weight weight", "fc1.weight gradient", "fc1.weight state:momentum_buffer",
                                      "fc1.bias weight", "fc1.bias gradient", "fc1.bias state:momentum_buffer"}));
  int pngs = 0;
  for (const auto& block : result["content"]) pngs += block["type"] == "image";
  EXPECT_EQ(pngs, 6);
  const json& fc1 = result["structuredContent"]["parameters"][0];
  EXPECT_EQ(fc1["hyperparameters"]["lr"], 0.1);
  EXPECT_EQ(fc1["hyperparameters"]["momentum"], 0.9);
  const std::string text = text_of(result);
  EXPECT_NE(text.find("fc1.weight: lr=0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("fc1.weight weight [8,4]"), std::string::npos) << text;

  // Layout arguments apply to the tensors shaped like the parameter.
  json one = client.tool("render_weights", {{"layer", "fc1"}, {"parameters", {"weight"}}, {"tile_dim", 0}});
  ASSERT_FALSE(one["isError"].get<bool>()) << one.dump();
  for (const auto& i : one["structuredContent"]["images"]) {
    EXPECT_EQ(i["tiles"], 8) << i.dump();
    EXPECT_EQ(i["tile_height"], 1) << i.dump();
  }

  json bad = client.tool("render_weights", {{"layer", "fc1"}, {"y_dim", -1}, {"index", {9}}});
  EXPECT_TRUE(bad["isError"].get<bool>());
  EXPECT_NE(text_of(bad).find("index 9 of dimension 0 is out of range"), std::string::npos) << text_of(bad);
  json unknown = client.tool("render_weights", {{"layer", "fc1"}, {"parameters", {"gamma"}}});
  EXPECT_TRUE(unknown["isError"].get<bool>());
  EXPECT_NE(text_of(unknown).find("its parameters: fc1.weight, fc1.bias"), std::string::npos) << text_of(unknown);
  json role = client.tool("render_weights", {{"layer", "fc1"}, {"x_dim", "rows"}});
  EXPECT_TRUE(role["isError"].get<bool>());
  EXPECT_NE(text_of(role).find("\"x_dim\" must be an integer"), std::string::npos) << text_of(role);
}

TEST_F(WeightsApiTest, TensorInstrumentsMatchADirectComputationAndAFailingOneIsDisabled) {
  start_with([](nansense::Session& s) {
    s.set_stats_scope(nansense::StatsScope::kAll);
    s.watch_layer_tensor("double", [](const nansense::LayerContext& ctx) { return ctx.activation * 2; });
    s.watch_layer_tensor(
        "boom", [](const nansense::LayerContext&) -> at::Tensor { throw std::runtime_error("instrument bug"); });
    s.watch_layer_tensor("misshapen", [](const nansense::LayerContext& ctx) { return ctx.activation.sum(); });
    s.watch_weight_tensor("step_size", [](const nansense::WeightContext& ctx) -> at::Tensor {
      auto m = ctx.optimizer_state.find("momentum_buffer");
      if (m == ctx.optimizer_state.end()) return {};
      return m->second * ctx.hyperparams.at("lr");
    });
    EXPECT_THROW(s.watch_layer_tensor("double", [](const nansense::LayerContext& c) { return c.activation; }),
                 nansense::UsageError);
    EXPECT_THROW(s.watch_weight_tensor("", [](const nansense::WeightContext& c) { return c.weight; }),
                 nansense::UsageError);
  });
  wait_paused();
  // Training goes on past the failures.
  post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}});
  json status = wait_paused();
  EXPECT_EQ(status["snapshot_position"]["batch_idx"], 1);
  auto snap = session_->snapshot();
  ASSERT_TRUE(snap);

  for (const std::string layer : {"fc1", "fc2"}) {
    ASSERT_TRUE(snap->custom_activations.count(layer)) << layer;
    const auto& out = snap->custom_activations.at(layer);
    ASSERT_TRUE(out.count("double")) << layer;
    EXPECT_TRUE(torch::allclose(out.at("double"), snap->activations.at(layer) * 2)) << layer;
    EXPECT_FALSE(out.count("boom"));
    EXPECT_FALSE(out.count("misshapen"));
  }
  const auto& custom = snap->custom_weight_tensors.at("fc1.weight").at("step_size");
  EXPECT_TRUE(torch::allclose(custom, snap->optimizer_state.at("fc1.weight").at("momentum_buffer") * 0.1));

  // Disabled and reported, once each.
  std::map<std::string, std::string> failed;
  for (const auto& f : session_->instrument_errors()) failed[f.name] += f.error;
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_NE(failed["boom"].find("instrument bug"), std::string::npos) << failed["boom"];
  EXPECT_NE(failed["misshapen"].find("must have its shape"), std::string::npos) << failed["misshapen"];
  std::string errors;
  for (const auto& e : status["internal_errors"]) errors += e.get<std::string>() + "\n";
  EXPECT_NE(errors.find("layer-tensor instrument \"boom\" failed"), std::string::npos) << errors;

  // Over HTTP: the snapshot lists the outputs, the pages draw them.
  json layers = get("/api/snapshot").json()["layers"];
  bool listed = false;
  for (const auto& l : layers) {
    if (l["name"] == "fc1") listed = l["instruments"].contains("double");
  }
  EXPECT_TRUE(listed);
  auto strip = get("/api/render/instrument_strip?layer=fc1&instrument=double&sample=1");
  ASSERT_EQ(strip.status, 200u) << strip.body;
  json info = json::parse(strip.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["kind"], "instrument:double");
  EXPECT_EQ(info["tiles"], 1);
  EXPECT_EQ(info["tile_width"], 8);
  auto missing = get("/api/render/instrument_strip?layer=fc1&instrument=boom");
  EXPECT_EQ(missing.status, 404u);
  EXPECT_NE(missing.json()["error"].get<std::string>().find("no output of the layer-tensor instrument \"boom\""),
            std::string::npos);
  json weights = get("/api/weight_stats?layer=fc1").json();
  EXPECT_TRUE(weights["parameters"][0]["instruments"].contains("step_size"));
  auto drawn = get("/api/render/weight_strip?layer=fc1&parameter=weight&tensor=instrument:step_size");
  ASSERT_EQ(drawn.status, 200u) << drawn.body;
  expect_pixels(drawn.body, custom.to(torch::kDouble).unsqueeze(0));
}

}  // namespace
