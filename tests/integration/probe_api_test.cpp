// Probes over REST and MCP against a real training loop: pin, forward mode,
// perturbations and clearing, what every query then shows (the probe's
// result in the snapshot's place), and each refusal with what to do. Every
// reply is held to its declared wire type by the fixture.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"

namespace {

using nansense::testing::McpClient;
using nansense::testing::text_of;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;

class ProbeApiTest : public TrainingServerTest {};

TEST_F(ProbeApiTest, RestPinsPerturbsShowsTheProbeAndEndsIt) {
  start();
  json status = wait_paused();
  ASSERT_EQ(status["probe"]["active"], false);
  EXPECT_EQ(status["probe"]["result"], nullptr);
  const uint64_t live_sequence = status["snapshot_sequence"];
  const json live = get("/api/snapshot").json();
  EXPECT_EQ(live["probe"], nullptr);

  // Pin: the batch re-runs; the status and the snapshot show the probe.
  json pinned = post("/api/probe/pin", {{"timeout_seconds", 10}}).json();
  EXPECT_EQ(pinned["active"], true);
  EXPECT_EQ(pinned["pinned"], true);
  EXPECT_EQ(pinned["pinned_position"]["batch_idx"], 0);
  ASSERT_NE(pinned["result"], nullptr) << pinned;
  EXPECT_EQ(pinned["result"]["diff"], false);
  EXPECT_EQ(pinned["pending"], false);
  status = get("/api/status").json();
  EXPECT_GT(status["snapshot_sequence"].get<uint64_t>(), live_sequence);
  json shown = get("/api/snapshot").json();
  ASSERT_NE(shown["probe"], nullptr);
  EXPECT_EQ(shown["probe"]["mode"], "unchanged");
  // Forward only: no gradients, said so when a gradient picture is asked for.
  for (const auto& layer : shown["layers"]) EXPECT_EQ(layer["gradient"], nullptr) << layer["name"];
  auto gradient = get("/api/render/strip?layer=fc1&kind=gradient&sample=0");
  EXPECT_EQ(gradient.status, 404);
  EXPECT_NE(gradient.body.find("no gradients on probe runs"), std::string::npos) << gradient.body;
  EXPECT_EQ(get("/api/render/strip?layer=fc1&kind=activation&sample=0").status, 200);

  // A perturbation of the flat [5,4] input: the strips become differences;
  // the input shows the perturbed value.
  json perturbed =
      post("/api/probe/perturb", {{"index", {2}}, {"values", {7.5}}, {"sample", 1}, {"timeout_seconds", 10}}).json();
  ASSERT_EQ(perturbed["perturbations"].size(), 1u) << perturbed;
  EXPECT_EQ(perturbed["perturbations"][0]["input"], "input");
  EXPECT_EQ(perturbed["perturbations"][0]["values"][0], 7.5);
  ASSERT_NE(perturbed["result"], nullptr);
  EXPECT_EQ(perturbed["result"]["diff"], true);
  EXPECT_EQ(perturbed["result"]["perturbations_applied"], 1);
  shown = get("/api/snapshot").json();
  EXPECT_EQ(shown["probe"]["diff"], true);
  // Only sample 1 changed: fc1's difference is zero elsewhere (an MLP's samples never meet).
  json fc1;
  for (const auto& layer : shown["layers"]) {
    if (layer["name"] == "fc1") fc1 = layer["activation"];
  }
  ASSERT_FALSE(fc1.is_null()) << shown;
  EXPECT_GT(fc1["max"].get<double>() - fc1["min"].get<double>(), 0.0) << fc1;

  // Refusals say what fits.
  auto rank = post("/api/probe/perturb", {{"index", {1, 2}}, {"values", {1.0}}});
  EXPECT_EQ(rank.status, 400);
  EXPECT_NE(rank.body.find("[feature]"), std::string::npos) << rank.body;
  auto range = post("/api/probe/perturb", {{"index", {4}}, {"values", {1.0}}});
  EXPECT_EQ(range.status, 400);
  EXPECT_NE(range.body.find("feature in 0..3"), std::string::npos) << range.body;
  auto sample = post("/api/probe/perturb", {{"index", {0}}, {"values", {1.0}}, {"sample", 5}});
  EXPECT_EQ(sample.status, 400);
  EXPECT_NE(sample.body.find("samples 0..4"), std::string::npos) << sample.body;
  EXPECT_EQ(sample.json()["argument"], "sample");
  auto values = post("/api/probe/perturb", {{"index", {0}}, {"values", {1.0, 2.0}}});
  EXPECT_EQ(values.status, 400);
  EXPECT_NE(values.body.find("give 1 value"), std::string::npos) << values.body;
  EXPECT_EQ(values.json()["argument"], "values");
  EXPECT_EQ(range.json()["argument"], "index");
  auto input = post("/api/probe/perturb", {{"index", {0}}, {"values", {1.0}}, {"input_name", "image"}});
  EXPECT_EQ(input.status, 404);
  EXPECT_NE(input.body.find("the model's inputs: input"), std::string::npos) << input.body;
  auto mode = post("/api/probe/mode", {{"mode", "test"}});
  EXPECT_EQ(mode.status, 400);
  EXPECT_NE(mode.body.find("eval"), std::string::npos) << mode.body;
  auto nan = post("/api/probe/perturb", {{"index", {0}}, {"values", {"NaN"}}});
  EXPECT_EQ(nan.status, 400) << nan.body;
  EXPECT_EQ(get("/api/probe").json()["perturbations"].size(), 1u) << "a refused perturbation was kept";

  // Eval mode, then clear and unpin: the probe still runs (eval), then ends.
  json eval = post("/api/probe/mode", {{"mode", "eval"}, {"timeout_seconds", 10}}).json();
  EXPECT_EQ(eval["mode"], "eval");
  json cleared = post("/api/probe/clear", {{"timeout_seconds", 10}}).json();
  EXPECT_EQ(cleared["cleared"], 1);
  EXPECT_EQ(cleared["result"]["diff"], false);
  json unpinned = post("/api/probe/unpin", {{"timeout_seconds", 10}}).json();
  EXPECT_EQ(unpinned["pinned"], false);
  EXPECT_EQ(unpinned["active"], true) << "eval mode keeps the probe";
  EXPECT_EQ(post("/api/probe/unpin", json::object()).status, 409);
  json off = post("/api/probe/mode", {{"mode", "unchanged"}}).json();
  EXPECT_EQ(off["active"], false);
  EXPECT_EQ(off["result"], nullptr);
  status = get("/api/status").json();
  shown = get("/api/snapshot").json();
  EXPECT_EQ(shown["probe"], nullptr);
  EXPECT_EQ(shown["position"], live["position"]);
  EXPECT_GT(shown["sequence"].get<uint64_t>(), live_sequence) << "sequences only grow";
  EXPECT_EQ(get("/api/render/strip?layer=fc1&kind=gradient&sample=0").status, 200);

  // While the loop runs, nothing can be turned on.
  post("/api/run", {{"detach", true}});
  // (The short run may already have finished: refused too, saying so.)
  auto running = post("/api/probe/pin", json::object());
  EXPECT_EQ(running.status, 409) << running.body;
  EXPECT_TRUE(running.body.find("pause the loop first") != std::string::npos ||
              running.body.find("training has finished") != std::string::npos)
      << running.body;
}

TEST_F(ProbeApiTest, McpToolsPinPerturbAndReportMisfits) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  json status = client.tool_json("get_probe_status");
  EXPECT_EQ(status["active"], false);
  EXPECT_NE(status["hint"].get<std::string>().find("pin_batch"), std::string::npos) << status;
  json pinned = client.tool_json("pin_batch", {{"timeout_seconds", 10}});
  EXPECT_EQ(pinned["pinned"], true);
  ASSERT_NE(pinned["result"], nullptr);
  json mode = client.tool_json("set_probe_mode", {{"mode", "train"}, {"timeout_seconds", 10}});
  EXPECT_EQ(mode["mode"], "train");
  json perturbed = client.tool_json("add_perturbation", {{"index", {3}}, {"values", {-2}}, {"timeout_seconds", 10}});
  EXPECT_EQ(perturbed["result"]["diff"], true);
  // A misfit is a tool error that says what fits, not a protocol error.
  json misfit = client.tool("add_perturbation", {{"index", {9}}, {"values", {1}}});
  EXPECT_EQ(misfit["isError"], true);
  EXPECT_NE(text_of(misfit).find("feature in 0..3"), std::string::npos) << misfit;
  // render_layer draws the probe's result (no gradient strip, said why).
  json picture = client.tool("render_layer", {{"layers", {"fc1"}}});
  EXPECT_NE(text_of(picture).find("no gradients on probe runs"), std::string::npos) << text_of(picture);
  EXPECT_EQ(client.tool_json("clear_perturbations")["cleared"], 1);
  EXPECT_EQ(client.tool_json("unpin_batch")["pinned"], false);
  EXPECT_EQ(client.tool_json("set_probe_mode", {{"mode", "unchanged"}})["active"], false);
}

}  // namespace
