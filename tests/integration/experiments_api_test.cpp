// Experiments over REST and MCP against a real training loop: listing,
// running, results, pictures and refusals, each reply held to its declared
// wire type by the fixture.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "render/downscale.h"

namespace {

using nansense::testing::base64_decode;
using nansense::testing::McpClient;
using nansense::testing::text_of;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;

class ExperimentsApiTest : public TrainingServerTest {};

const json* kind_of(const json& list, const std::string& kind) {
  for (const auto& k : list["kinds"]) {
    if (k["kind"] == kind) return &k;
  }
  return nullptr;
}

TEST_F(ExperimentsApiTest, RestListsRunsRendersAndRefuses) {
  start();
  wait_paused();
  json list = get("/api/experiments").json();
  ASSERT_EQ(list["kinds"].size(), 5u);
  EXPECT_EQ(list["time_limit_seconds"], 90);
  EXPECT_EQ(list["forward_known"], true);
  const json* gradcam = kind_of(list, "gradcam");
  ASSERT_TRUE(gradcam);
  // An MLP has no spatial maps: every layer is unusable, with the reason.
  EXPECT_TRUE((*gradcam)["layers"].empty());
  ASSERT_FALSE((*gradcam)["unusable_layers"].empty());
  EXPECT_NE((*gradcam)["unusable_layers"][0]["reason"].get<std::string>().find("spatial"), std::string::npos);
  const json* ig = kind_of(list, "neuron_ig");
  ASSERT_TRUE(ig);
  EXPECT_NE(std::find((*ig)["layers"].begin(), (*ig)["layers"].end(), "relu"), (*ig)["layers"].end()) << *ig;
  bool steps_listed = false;
  for (const auto& p : (*ig)["params"]) {
    if (p["key"] == "ig_steps") steps_listed = p["default"] == 32 && p["minimum"] == 2;
  }
  EXPECT_TRUE(steps_listed) << (*ig)["params"];

  // Integrated gradients on the parameterless relu: complete within 1%.
  auto ran =
      post("/api/experiments/run", {{"kind", "neuron_ig"},
                                    {"layer", "relu"},
                                    {"params", {{"channel", 2}, {"ig_steps", 64}, {"batch", 5}, {"colour", 1}}}});
  ASSERT_EQ(ran.status, 200) << ran.body;
  json r = ran.json();
  ASSERT_EQ(r["stage"], "done") << r;
  EXPECT_EQ(r["ignored_params"], json::array({"colour"}));
  ASSERT_EQ(r["attribution_sums"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const double expected = r["target_values"][i].get<double>();
    EXPECT_NEAR(r["attribution_sums"][i].get<double>(), expected, 0.01 * std::abs(expected) + 1e-5) << i;
  }
  const int64_t seq = r["seq"];
  json again = get("/api/experiments/result?seq=" + std::to_string(seq)).json();
  EXPECT_EQ(again["attribution_sums"], r["attribution_sums"]);
  auto png = get("/api/render/experiment?seq=" + std::to_string(seq) + "&overlay=true");
  ASSERT_EQ(png.status, 200) << png.body;
  auto image = nansense::render::decode_png(png.body);
  EXPECT_GT(image.width, 0);
  EXPECT_GT(image.height, 0);

  // Refusals name what is wrong.
  auto bad_kind = post("/api/experiments/run", {{"kind", "dream"}, {"layer", "relu"}});
  EXPECT_EQ(bad_kind.status, 400);
  EXPECT_NE(bad_kind.body.find("deep_dream"), std::string::npos) << bad_kind.body;
  auto bad_layer = post("/api/experiments/run", {{"kind", "neuron_gradient"}, {"layer", "fc9"}});
  EXPECT_EQ(bad_layer.status, 404);
  EXPECT_NE(bad_layer.body.find("fc1"), std::string::npos) << bad_layer.body;
  auto unusable = post("/api/experiments/run", {{"kind", "gradcam"}, {"layer", "fc1"}});
  EXPECT_EQ(unusable.status, 400);
  EXPECT_NE(unusable.body.find("spatial"), std::string::npos) << unusable.body;
  auto range = post("/api/experiments/run", {{"kind", "neuron_ig"}, {"layer", "fc1"}, {"params", {{"ig_steps", 1}}}});
  EXPECT_EQ(range.status, 400);
  EXPECT_NE(range.body.find("ig_steps"), std::string::npos) << range.body;
  auto channel =
      post("/api/experiments/run", {{"kind", "neuron_gradient"}, {"layer", "fc1"}, {"params", {{"channel", 8}}}});
  EXPECT_EQ(channel.status, 400);
  EXPECT_NE(channel.body.find("8 channels"), std::string::npos) << channel.body;
  auto missing = get("/api/experiments/result?seq=999");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(post("/api/experiments/cancel", json::object()).json()["cancelled"], 0);
  EXPECT_EQ(post("/api/experiments/auto_run", {{"enabled", true}}).json()["auto_run_experiments"], true);
  EXPECT_EQ(get("/api/experiments").json()["auto_run"], true);

  // Session defaults sit between the kind's and the caller's; unknown keys are
  // reported, not kept; bad values are refused naming them; get_settings and
  // list_experiments show them; an empty object clears them.
  auto set = post("/api/experiments/defaults",
                  {{"kind", "neuron_ig"}, {"params", {{"ig_steps", 8}, {"batch", 2}, {"colour", 1}}}});
  ASSERT_EQ(set.status, 200) << set.body;
  json settings = set.json();
  EXPECT_EQ(settings["ignored_params"], json::array({"colour"}));
  EXPECT_EQ(settings["experiment_defaults"], json({{"neuron_ig", {{"batch", 2}, {"ig_steps", 8}}}}));
  EXPECT_EQ(get("/api/settings").json()["experiment_defaults"], settings["experiment_defaults"]);
  EXPECT_EQ(get("/api/settings").json()["auto_run_experiments"], true);
  EXPECT_EQ(get("/api/settings").json()["experiment_time_limit_seconds"], 90);
  const json listed = get("/api/experiments").json();
  for (const auto& p : (*kind_of(listed, "neuron_ig"))["params"]) {
    if (p["key"] == "ig_steps") EXPECT_EQ(p["default"], 8);
  }
  json layered =
      post("/api/experiments/run", {{"kind", "neuron_ig"}, {"layer", "relu"}, {"params", {{"batch", 3}}}}).json();
  EXPECT_EQ(layered["params"]["ig_steps"], 8) << layered;
  EXPECT_EQ(layered["params"]["batch"], 3) << layered;
  EXPECT_EQ(layered["params"]["channel"], 0) << layered;
  auto bad_default = post("/api/experiments/defaults", {{"kind", "neuron_ig"}, {"params", {{"ig_steps", 1}}}});
  EXPECT_EQ(bad_default.status, 400);
  EXPECT_NE(bad_default.body.find("ig_steps"), std::string::npos) << bad_default.body;
  EXPECT_EQ(get("/api/settings").json()["experiment_defaults"]["neuron_ig"]["ig_steps"], 8);
  auto cleared = post("/api/experiments/defaults", {{"kind", "neuron_ig"}, {"params", json::object()}});
  EXPECT_EQ(cleared.json()["experiment_defaults"], json::object());

  // Paused in the val phase, whose loop runs under NoGradGuard: gradients still flow.
  post("/api/step", {{"unit", "phase"}, {"timeout_seconds", 20}});
  ASSERT_EQ(wait_paused()["live_position"]["phase"], "val");
  json val =
      post("/api/experiments/run", {{"kind", "neuron_gradient"}, {"layer", "relu"}, {"params", {{"channel", -1}}}})
          .json();
  EXPECT_EQ(val["stage"], "done") << val;
  EXPECT_GT(std::abs(val["attribution_sums"][0].get<double>()) + std::abs(val["target_values"][0].get<double>()), 0);
}

TEST_F(ExperimentsApiTest, McpToolsRunAndPictureAnExperiment) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json list = client.tool_json("list_experiments");
  EXPECT_EQ(list["kinds"].size(), 5u);
  json dream = client.tool_json("run_experiment", {{"kind", "deep_dream"},
                                                   {"layer", "fc1"},
                                                   {"params", {{"steps", 20}, {"channels", 3}}},
                                                   {"timeout_seconds", 60}});
  ASSERT_EQ(dream["stage"], "done") << dream;
  EXPECT_EQ(dream["step"], 20);
  EXPECT_EQ(dream["objectives"].size(), 20u);
  EXPECT_GT(dream["objectives"][19].get<double>(), dream["objectives"][0].get<double>());
  json picture = client.tool("render_experiment", {{"seq", dream["seq"]}});
  ASSERT_FALSE(picture["isError"].get<bool>()) << picture.dump();
  int images = 0;
  for (const auto& block : picture["content"]) images += block["type"] == "image";
  EXPECT_EQ(images, 1);
  EXPECT_NE(text_of(picture).find("Deep Dream of layer \"fc1\""), std::string::npos) << text_of(picture);
  // Occlusion slides windows over images; this model's input is [5, 4].
  json bad = client.tool("run_experiment", {{"kind", "occlusion"}, {"layer", "fc1"}});
  EXPECT_TRUE(bad["isError"].get<bool>());
  EXPECT_NE(text_of(bad).find("[N,C,H,W]"), std::string::npos) << text_of(bad);
  json cancelled = client.tool_json("cancel_experiment", json::object());
  EXPECT_EQ(cancelled["cancelled"], 0);
}

}  // namespace
