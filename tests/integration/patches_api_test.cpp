// Min/Max patches and bin samples over REST and MCP against a real training
// loop of a small CNN with a watched conv layer: the cells, their order and
// pictures, the average patches setting, patch layers, bin samples against
// the current batch's own histogram, and every refusal with what to do. Each
// reply is held to its declared wire type by the fixture.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include "integration/mcp_client.h"
#include "integration/cnn_fixture.h"
#include "render/downscale.h"
#include "stats/histogram.h"
#include "unit/test_models.h"

namespace {

using nansense::testing::base64_decode;
using nansense::testing::CnnServerTest;
using nansense::testing::McpClient;
using nansense::testing::text_of;
using json = nlohmann::json;

class PatchesApiTest : public CnnServerTest {
 protected:
  void start_cnn() { CnnServerTest::start_cnn(4); }
};

double value(const json& v) { return v.is_number() ? v.get<double>() : std::nan(""); }

TEST_F(PatchesApiTest, CellsRankTheBatchesSeenAndDrawTheirCrops) {
  start_cnn();
  wait_paused();
  for (int i = 0; i < 2; ++i) step();  // three collected batches: 18 samples

  json g = get("/api/stats/patches?layer=conv").json();
  EXPECT_EQ(g["phase"], "train");
  EXPECT_EQ(g["epoch"], 0);
  EXPECT_EQ(g["note"], nullptr);
  EXPECT_EQ(g["grid"], "max_pixel");
  EXPECT_EQ(g["grids"], json::array({"max_pixel", "min_pixel"}));
  EXPECT_EQ(g["samples"], 5);
  EXPECT_EQ(g["channels"], 4);
  // conv's 6x6 map over an 8x8 input: a crop of ceil(8/6) * 4 = 8 (the image).
  EXPECT_EQ(g["crop"], json({{"height", 8}, {"width", 8}}));
  ASSERT_EQ(g["cells"].size(), 20u);
  for (int64_t c = 0; c < 4; ++c) {
    double previous = std::numeric_limits<double>::infinity();
    std::set<std::pair<int64_t, int64_t>> seen;
    for (const auto& cell : g["cells"]) {
      if (cell["channel"] != c) continue;
      ASSERT_TRUE(cell["filled"].get<bool>()) << cell;
      const double score = value(cell["score"]);
      EXPECT_LE(score, previous) << "channel " << c << ": best first";
      previous = score;
      EXPECT_GE(cell["batch"].get<int64_t>(), 0);
      EXPECT_LE(cell["batch"].get<int64_t>(), 2);
      EXPECT_LT(cell["sample"].get<int64_t>(), 6);
      const std::pair<int64_t, int64_t> source{cell["batch"].get<int64_t>(), cell["sample"].get<int64_t>()};
      EXPECT_TRUE(seen.insert(source).second) << "a sample enters a channel once";
      const auto image = nansense::render::decode_png(base64_decode(cell["png"].get<std::string>()));
      EXPECT_EQ(image.width, 8);
      EXPECT_EQ(image.height, 8);
    }
  }
  // The min gallery ranks the other way.
  json low = get("/api/stats/patches?layer=conv&grid=min_pixel").json();
  EXPECT_EQ(low["grid"], "min_pixel");
  // The argument's old name answers the same through 0.2; both at once is refused.
  EXPECT_EQ(get("/api/stats/patches?layer=conv&ranking=min_pixel").json(), low);
  auto both = get("/api/stats/patches?layer=conv&grid=min_pixel&ranking=max_pixel");
  EXPECT_EQ(both.status, 400);
  EXPECT_NE(both.json()["error"].get<std::string>().find("old name of \"grid\""), std::string::npos) << both.body;
  for (size_t i = 4; i < low["cells"].size(); ++i) {
    EXPECT_GE(value(low["cells"][i]["score"]), value(low["cells"][i - 4]["score"]));
  }
  // A flat layer's channels are its features; its cells are whole inputs.
  json fc = get("/api/stats/patches?layer=fc").json();
  EXPECT_EQ(fc["channels"], 3);
  EXPECT_EQ(fc["crop"], json({{"height", 8}, {"width", 8}}));

  // The picture: every grid asked for, under a title each.
  auto png = get("/api/render/patches?layer=conv&grids=max_pixel,min_pixel&heatmap=true");
  ASSERT_EQ(png.status, 200) << png.body;
  const json info = json::parse(png.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["grids"], json::array({"max_pixel", "min_pixel"}));
  EXPECT_EQ(info["heatmap"], true);
  const auto picture = nansense::render::decode_png(png.body);
  EXPECT_EQ(picture.width, info["width"].get<int>());
  EXPECT_EQ(picture.height, info["height"].get<int>());

  // Refusals say what there is.
  auto unknown = get("/api/stats/patches?layer=nope");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("conv"), std::string::npos) << unknown.body;
  auto phase = get("/api/stats/patches?layer=conv&phase=val");
  EXPECT_EQ(phase.status, 404);
  EXPECT_NE(phase.body.find("its phases: train"), std::string::npos) << phase.body;
  auto average = get("/api/stats/patches?layer=conv&grid=max_average");
  EXPECT_EQ(average.status, 400);
  EXPECT_NE(average.body.find("average_patches"), std::string::npos) << average.body;
  auto grid = get("/api/stats/patches?layer=conv&grid=max");
  EXPECT_EQ(grid.status, 400);
  EXPECT_NE(grid.body.find("max_pixel"), std::string::npos) << grid.body;
  auto grids = get("/api/render/patches?layer=conv&grids=max_pixel,best");
  EXPECT_EQ(grids.status, 400);
  EXPECT_NE(grids.json()["error"].get<std::string>().find("got \"best\""), std::string::npos) << grids.body;

  // Average patches on: the statistics start over, with four grids.
  json settings = post("/api/stats/performance", {{"average_patches", true}, {"samples_per_channel", 3}}).json();
  EXPECT_EQ(settings["statistics_flushed"], true);
  EXPECT_EQ(settings["watch_performance"]["average_patches"], true);
  EXPECT_EQ(settings["watch_performance"]["samples_per_channel"], 3);
  step();
  json avg = get("/api/stats/patches?layer=conv&grid=max_average").json();
  EXPECT_EQ(avg["grids"].size(), 4u);
  EXPECT_EQ(avg["samples"], 3);
  auto too_many = post("/api/stats/performance", {{"samples_per_channel", 65}});
  EXPECT_EQ(too_many.status, 400);
  EXPECT_NE(too_many.body.find("samples_per_channel"), std::string::npos) << too_many.body;

  // Patch layers: only conv keeps patches from now on; fc says why.
  settings = post("/api/stats/patch_layers", {{"layers", {"conv"}}}).json();
  EXPECT_EQ(settings["patch_layers"], json::array({"conv"}));
  auto bad = post("/api/stats/patch_layers", {{"layers", {"conv", "nope"}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.json()["error"].get<std::string>().find("unknown layer \"nope\""), std::string::npos) << bad.body;
  ASSERT_EQ(post("/api/stats/performance", {{"samples_per_channel", 4}}).status, 200);  // flush
  step();
  json without = get("/api/stats/patches?layer=fc").json();
  EXPECT_TRUE(without["cells"].empty());
  EXPECT_NE(without["note"].get<std::string>().find("set_patch_layers"), std::string::npos) << without;
  EXPECT_FALSE(get("/api/stats/patches?layer=conv").json()["cells"].empty());
  settings = post("/api/stats/patch_layers", json::object()).json();
  EXPECT_EQ(settings["patch_layers"], nullptr);
}

TEST_F(PatchesApiTest, BinSamplesComeFromTheCurrentBatchsBin) {
  start_cnn();
  wait_paused();
  json current = get("/api/stats/current?layer=conv").json();
  const auto channel_hist = current["activation"]["channel_hists"][1].get<std::vector<int64_t>>();
  const int64_t bin = std::max_element(channel_hist.begin(), channel_hist.end()) - channel_hist.begin();
  json r = get("/api/stats/bin_samples?layer=conv&channel=1&count=5&bin=" + std::to_string(bin)).json();
  EXPECT_EQ(r["matches"], channel_hist[static_cast<size_t>(bin)]);
  ASSERT_EQ(r["samples"].size(), std::min<size_t>(5, channel_hist[static_cast<size_t>(bin)]));
  const auto& edges = nansense::stats::bin_edges();
  for (const auto& s : r["samples"]) {
    EXPECT_EQ(s["index"][0], 1) << "channel 1";
    ASSERT_EQ(s["index"].size(), 3u);
    const double v = value(s["value"]);
    EXPECT_EQ(nansense::stats::bin_index(torch::tensor({static_cast<float>(v)})).item<int64_t>(), bin) << v;
    EXPECT_GE(std::abs(v), std::min(std::abs(edges[bin]), std::abs(edges[bin + 1])) * (1 - 1e-6));
    const auto crop = nansense::render::decode_png(base64_decode(s["png"].get<std::string>()));
    EXPECT_EQ(crop.width, 8);
  }
  // The same draw for the same snapshot.
  EXPECT_EQ(get("/api/stats/bin_samples?layer=conv&channel=1&count=5&bin=" + std::to_string(bin)).json()["samples"],
            r["samples"]);
  // The whole layer's bin holds at least the channel's.
  json all = get("/api/stats/bin_samples?layer=conv&bin=" + std::to_string(bin)).json();
  EXPECT_GE(all["matches"].get<int64_t>(), r["matches"].get<int64_t>());
  EXPECT_EQ(all["channel"], nullptr);

  auto png = get("/api/render/bin_samples?layer=conv&channel=1&bin=" + std::to_string(bin));
  ASSERT_EQ(png.status, 200) << png.body;
  EXPECT_EQ(json::parse(png.headers["X-Nansense-Render"])["matches"], r["matches"]);

  // Refusals.
  auto channel = get("/api/stats/bin_samples?layer=conv&channel=9&bin=100");
  EXPECT_EQ(channel.status, 400);
  EXPECT_NE(channel.body.find("4 channels"), std::string::npos) << channel.body;
  auto range = get("/api/stats/bin_samples?layer=conv&bin=211");
  EXPECT_EQ(range.status, 400);
  EXPECT_NE(range.body.find("from 0 to 210"), std::string::npos) << range.body;
  auto layer = get("/api/stats/bin_samples?layer=nope&bin=100");
  EXPECT_EQ(layer.status, 404);
  EXPECT_NE(layer.body.find("conv"), std::string::npos) << layer.body;
  auto empty = get("/api/render/bin_samples?layer=conv&bin=0");  // the end bin at or below -1e6: empty
  EXPECT_EQ(empty.status, 404);
  EXPECT_NE(empty.body.find("falls in bin 0"), std::string::npos) << empty.body;
}

TEST_F(PatchesApiTest, McpToolsDrawPatchesAndBinSamples) {
  start_cnn();
  wait_paused();
  step();
  McpClient mcp(port_);
  mcp.initialize();
  json result = mcp.tool("render_extreme_patches", {{"layer", "conv"}, {"grids", {"min_pixel"}}});
  ASSERT_FALSE(result["isError"].get<bool>()) << result.dump().substr(0, 400);
  bool image = false;
  for (const auto& block : result["content"]) image = image || block["type"] == "image";
  EXPECT_TRUE(image);
  EXPECT_NE(text_of(result).find("Min/Max patches of layer \"conv\""), std::string::npos) << text_of(result);
  EXPECT_EQ(result["structuredContent"]["grids"], json::array({"min_pixel"}));
  json refused = mcp.tool("render_extreme_patches", {{"layer", "conv"}, {"grids", {"max_average"}}});
  EXPECT_TRUE(refused["isError"].get<bool>());
  EXPECT_NE(text_of(refused).find("average_patches"), std::string::npos) << text_of(refused);
  json current = mcp.tool_json("get_current_stats", {{"layer", "conv"}});
  const auto hist = current["activation"]["hist"].get<std::vector<int64_t>>();
  const int64_t bin = std::max_element(hist.begin(), hist.end()) - hist.begin();
  json bins = mcp.tool("render_bin_samples", {{"layer", "conv"}, {"bin", bin}, {"count", 3}});
  ASSERT_FALSE(bins["isError"].get<bool>()) << text_of(bins);
  EXPECT_NE(text_of(bins).find("3 of the " + std::to_string(hist[static_cast<size_t>(bin)])), std::string::npos)
      << text_of(bins);
  EXPECT_EQ(bins["structuredContent"]["shown"], 3);
  // Galleries are REST's JSON; MCP has the pictures.
  json tools = mcp.request("tools/list")["result"]["tools"];
  std::set<std::string> names;
  for (const auto& t : tools) names.insert(t["name"]);
  EXPECT_TRUE(names.count("render_extreme_patches"));
  EXPECT_TRUE(names.count("render_bin_samples"));
  EXPECT_TRUE(names.count("set_patch_layers"));
  EXPECT_FALSE(names.count("get_patches"));
}

TEST_F(PatchesApiTest, TheCurrentBatchRanksItsOwnSamplesForAnyLayer) {
  start_cnn();
  wait_paused();
  step();  // the second batch: the gallery must hold it alone

  // relu is not watched: no epoch gallery, but the current batch has one.
  EXPECT_EQ(get("/api/stats/patches?layer=relu").status, 404);
  json g = get("/api/stats/patches?layer=relu&current_batch=true").json();
  const json status = get("/api/status").json();
  EXPECT_EQ(g["current_batch"], true);
  EXPECT_EQ(g["position"], status["snapshot_position"]["text"]);
  EXPECT_EQ(g["sequence"], status["snapshot_sequence"]);
  EXPECT_EQ(g["phase"], "train");
  EXPECT_EQ(g["samples"], 5);
  EXPECT_EQ(g["channels"], 4);
  ASSERT_EQ(g["cells"].size(), 20u);
  for (int64_t c = 0; c < 4; ++c) {
    double previous = std::numeric_limits<double>::infinity();
    std::set<int64_t> samples;
    for (const auto& cell : g["cells"]) {
      if (cell["channel"] != c) continue;
      ASSERT_TRUE(cell["filled"].get<bool>()) << cell;
      EXPECT_EQ(cell["batch"], 1) << "the current batch's own samples only";
      EXPECT_TRUE(samples.insert(cell["sample"].get<int64_t>()).second) << "a sample enters a channel once";
      EXPECT_LE(value(cell["score"]), previous) << "best first";
      previous = value(cell["score"]);
    }
  }
  // The picture for an agent, the same way.
  auto png = get("/api/render/patches?layer=relu&current_batch=true");
  ASSERT_EQ(png.status, 200) << png.body;
  EXPECT_EQ(json::parse(png.headers["X-Nansense-Render"])["current_batch"], true);
  // A layer nobody has heard of is refused by name.
  auto unknown = get("/api/stats/patches?layer=nope&current_batch=true");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.json()["error"].get<std::string>().find("unknown layer \"nope\""), std::string::npos);
}

}  // namespace
