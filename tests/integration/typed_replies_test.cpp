// Typed replies (src/server/controller/reply.h): a reply's JSON and its JSON
// Schema in wire_types() come from one field list, so the two cannot
// disagree, and the schema carries what each field means.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "integration/wire_check.h"
#include "server/controller/controller.h"
#include "server/controller/replies_views.h"
#include "server/controller/reply.h"
#include "server/controller/wire_types.h"

namespace nansense::testing {
namespace {

using server::json;

struct Sample {
  static constexpr const char* kWireName = "Sample";
  int64_t count = 0;
  std::string name;
  std::optional<double> ratio;
  std::vector<std::string> tags;
  std::optional<bool> note;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("count", &Sample::count, "How many.");
    f.field("name", &Sample::name, "Its name.");
    f.field("ratio", &Sample::ratio, "A ratio; null when unknown.");
    f.field("tags", &Sample::tags, "Its tags.");
    f.optional_field("note", &Sample::note, "Only sometimes.");
  }
};

TEST(TypedReplies, JsonAndSchemaComeFromOneFieldList) {
  json defs = json::object();
  server::declare_reply<Sample>(defs);
  const json& schema = defs.at("Sample");
  EXPECT_EQ(schema["required"], json({"count", "name", "ratio", "tags"}));
  EXPECT_EQ(schema["additionalProperties"], false);
  EXPECT_EQ(schema["properties"]["count"]["type"], "integer");
  EXPECT_EQ(schema["properties"]["ratio"]["anyOf"][0]["type"], "number");
  EXPECT_EQ(schema["properties"]["ratio"]["anyOf"][1]["type"], "null");
  EXPECT_EQ(schema["properties"]["tags"]["items"]["type"], "string");
  EXPECT_EQ(schema["properties"]["note"]["type"], "boolean");
  EXPECT_EQ(schema["properties"]["note"]["description"], "Only sometimes.");

  Sample sample{3, "a", std::nullopt, {"x"}, std::nullopt};
  // An optional field without a value is absent; a nullable one is null.
  EXPECT_EQ(server::to_json(sample), json({{"count", 3}, {"name", "a"}, {"ratio", nullptr}, {"tags", {"x"}}}));
  sample.ratio = 0.5;
  sample.note = true;
  const json full = server::to_json(sample);
  EXPECT_EQ(full["ratio"], 0.5);
  EXPECT_EQ(full["note"], true);
  EXPECT_EQ(full.size(), schema["properties"].size());
  for (const auto& [key, value] : full.items()) EXPECT_TRUE(schema["properties"].contains(key)) << key;
}

// A part with no wire name of its own is written out where it is used.
struct Range {
  static constexpr bool kInline = true;
  int64_t low = 0;
  std::optional<int64_t> high;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("low", &Range::low, "From.");
    f.optional_field("high", &Range::high, "To, when bounded.");
  }
};

struct Ranges {
  static constexpr const char* kWireName = "Ranges";
  std::vector<Range> ranges;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("ranges", &Ranges::ranges, "The ranges.");
  }
};

TEST(TypedReplies, AnInlinePartIsWrittenOutWhereItIsUsed) {
  json defs = json::object();
  server::declare_reply<Ranges>(defs);
  EXPECT_FALSE(defs.contains("Range"));  // no def of its own
  const json& items = defs.at("Ranges")["properties"]["ranges"]["items"];
  EXPECT_EQ(items["type"], "object");
  EXPECT_EQ(items["required"], json({"low"}));
  EXPECT_EQ(items["additionalProperties"], false);
  EXPECT_EQ(items["properties"]["high"]["description"], "To, when bounded.");
  Ranges reply{{{1, std::nullopt}, {2, 5}}};
  EXPECT_EQ(server::to_json(reply), json({{"ranges", {{{"low", 1}}, {{"low", 2}, {"high", 5}}}}}));
  EXPECT_EQ(wire_mismatch(server::to_json(reply), defs.at("Ranges"), "Ranges"), "");
}

// The engine's own values a reply may hold: an enum (as its word), a
// position and a trainer step (as json_values.h writes them).
struct EngineValues {
  static constexpr const char* kWireName = "EngineValues";
  RunState state{};
  BatchPosition position;
  std::optional<TrainerStep> step;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("state", &EngineValues::state, "The run state.", {{"$ref", "#/$defs/RunState"}});
    f.field("position", &EngineValues::position, "A batch.");
    f.field("step", &EngineValues::step, "A trainer step; null when none.");
  }
};

// An enum field that does not name its words.
struct UnnamedEnum {
  static constexpr const char* kWireName = "UnnamedEnum";
  RunState state{};
  template <class Fields>
  static void fields(Fields& f) {
    f.field("state", &UnnamedEnum::state, "The run state.");
  }
};

TEST(TypedReplies, EnumsPositionsAndTrainerStepsAreWrittenAsTheirOwnWireTypes) {
  json defs = json::object();
  server::declare_reply<EngineValues>(defs);
  const json& properties = defs.at("EngineValues")["properties"];
  EXPECT_EQ(properties["state"]["$ref"], "#/$defs/RunState");
  EXPECT_EQ(properties["position"]["$ref"], "#/$defs/Position");
  EXPECT_EQ(properties["step"]["anyOf"][0]["$ref"], "#/$defs/TrainerStep");
  EXPECT_EQ(properties["step"]["anyOf"][1]["type"], "null");

  EngineValues values;
  values.state = RunState::kPaused;
  values.position.phase = "train";
  values.position.batch_idx = 3;
  json out = server::to_json(values);
  EXPECT_EQ(out["state"], "paused");
  EXPECT_EQ(out["position"], common::to_json(values.position));
  EXPECT_EQ(out["position"]["batch_idx"], 3);
  EXPECT_EQ(out["step"], nullptr);
  values.step = TrainerStep{7, 4, -1};
  out = server::to_json(values);
  EXPECT_EQ(out["step"], json({{"global_step", 7}, {"micro_batches", 4}, {"micro_batch", nullptr}}));
  expect_wire(out["position"], "Position");
  expect_wire(out["step"], "TrainerStep");

  // Which words an enum is written as, only the field can say.
  json more = json::object();
  EXPECT_THROW(server::declare_reply<UnnamedEnum>(more), std::logic_error);
}

TEST(TypedReplies, DeclaredRepliesAreWireTypesThatSayWhatEachFieldMeans) {
  const auto expect_described = [](const char* name) {
    ASSERT_TRUE(server::wire_types().contains(name)) << name;
    for (const auto& [key, field] : server::wire_types().at(name)["properties"].items()) {
      EXPECT_FALSE(field.value("description", "").empty()) << name << "." << key << " says nothing";
    }
  };
  for (const char* name :
       {"Settings", "WatchPerformance", "ExperimentDefaults", "ExperimentCancel", "ExperimentAutoRun", "AutoExperiment",
        "AutoExperimentCleared", "ProbeStatus", "Perturbation", "ProbeResultSummary", "StatsSummary",
        "TimeTravelStatus", "TimeTravelReport", "Checkpoint", "DebugReport", "DebugRerun", "UncheckedTensor"}) {
    expect_described(name);
  }
  // replies_views.h
  for (const char* name : {"Architecture",
                           "Layer",
                           "Edge",
                           "Snapshot",
                           "SnapshotBudget",
                           "SnapshotInput",
                           "SnapshotLayer",
                           "SnapshotParameter",
                           "SnapshotProbe",
                           "LayerStats",
                           "LayerStatsEntry",
                           "SamplesKept",
                           "WeightStats",
                           "ParameterStats",
                           "StatsList",
                           "StatsHistory",
                           "EpochStats",
                           "TensorStatsSnapshot",
                           "ParameterSample",
                           "CurrentStats",
                           "ValueCounts"}) {
    expect_described(name);
  }
  // replies_status.h
  for (const char* name : {"Status", "Schedule", "PhaseSchedule", "DebugSummary", "DebugErrorSummary", "ProducerBrief",
                           "Patches", "PatchCell", "PatchCrop", "BinSamples", "BinSample"}) {
    expect_described(name);
  }
  // A reply that extends another lists the other's fields and its own.
  const json& defaults = server::wire_types().at("ExperimentDefaults")["properties"];
  EXPECT_TRUE(defaults.contains("watched_layers"));
  EXPECT_TRUE(defaults.contains("ignored_params"));
}

TEST(TypedReplies, ARepliesJsonMatchesItsDeclaration) {
  server::TimeTravelReport report;
  report.reason = "no epochs() loop";
  report.checkpoints.push_back({0, 1024});
  report.budget_bytes = 1 << 20;
  expect_wire(server::to_json(report), "TimeTravelReport");
  server::ProbeStatus probe;
  probe.mode = "eval";
  probe.perturbations.push_back({"x", 0, {1, 2}, {1.5, "nan"}});
  probe.cleared = 2;
  expect_wire(server::to_json(probe), "ProbeStatus");
  // Inline parts (list_stats' layers and phases) and optional keys.
  server::StatsList list;
  list.edges = {-1.0, 0.0, 1.0};
  list.layers.push_back({"fc1", {{"train", {0, 1}}}});
  list.parameters["fc1"] = {"fc1.weight"};
  list.series.push_back({"loss", "train", ""});
  const json list_json = server::to_json(list);
  EXPECT_EQ(list_json["layers"][0]["phases"][0]["epochs"], json({0, 1}));
  expect_wire(list_json, "StatsList");
  server::CurrentStats current;
  current.layer = "mask";
  current.position = {{"phase", "train"},
                      {"epoch", 0},
                      {"batch_idx", 0},
                      {"is_last_in_phase", false},
                      {"is_last_in_epoch", false},
                      {"is_last_in_run", false},
                      {"text", "train e0 b0"}};
  current.values = server::ValueCounts{"bool", 4, 0, 1, 2, 3, 0.75};
  current.note = "counted";
  const json current_json = server::to_json(current);
  EXPECT_TRUE(current_json["activation"].is_null());
  EXPECT_FALSE(current_json.contains("samples"));
  expect_wire(current_json, "CurrentStats");
  // A key the declaration does not list would fail the check.
  json extra = server::to_json(probe);
  extra["undeclared"] = 1;
  EXPECT_NE(wire_mismatch(extra, server::wire_types().at("ProbeStatus"), "ProbeStatus"), "");
}

TEST(TypedReplies, TheStatusKeysThatComeOnlyWithAValue) {
  server::Status status;
  status.state = RunState::kLost;
  status.hint = server::status_hint(status.state, false);
  status.debug.loss_scale = {{"in_use", false},   {"scale", nullptr},        {"skipped_steps", 0},
                             {"skips_in_row", 0}, {"last_skipped", nullptr}, {"collapse_skips", 0},
                             {"floor", 1.0}};
  status.stats.update_frequency = {{"unit", "batch"}, {"n", 1}, {"phase", nullptr}};
  status.stats.scope = "watched";
  status.probe.mode = "unchanged";
  json quiet = server::to_json(status);
  expect_wire(quiet, "Status");
  for (const char* key : {"paused_at_ms", "lost_reason", "internal_errors", "refreshed"}) {
    EXPECT_FALSE(quiet.contains(key)) << key;
  }
  EXPECT_EQ(quiet["state"], "lost");
  EXPECT_EQ(quiet["mode"], "step_batch");
  EXPECT_EQ(quiet["live_position"], nullptr);
  EXPECT_EQ(quiet["debug"]["error"], nullptr);

  status.lost_reason = "the loop threw";
  status.internal_errors = std::vector<std::string>{"strips: out of memory"};
  status.paused_at_ms = 5;
  status.refreshed = false;
  status.schedule.phases.push_back({"train", std::nullopt});
  status.debug.error.emplace();
  status.debug.error->reasons = {"nan"};
  status.debug.error->update = "held";
  status.debug.error->producer = server::ProducerBrief{"aten::div", "forward", std::nullopt};
  const json loud = server::to_json(status);
  expect_wire(loud, "Status");
  EXPECT_EQ(loud["lost_reason"], "the loop threw");
  EXPECT_EQ(loud["internal_errors"], json({"strips: out of memory"}));
  EXPECT_EQ(loud["refreshed"], false);
  EXPECT_EQ(loud["schedule"]["phases"][0], json({{"name", "train"}, {"batches", nullptr}}));
  EXPECT_EQ(loud["debug"]["error"]["update"], "held");
  EXPECT_EQ(loud["debug"]["error"]["producer"]["layer"], nullptr);
  EXPECT_EQ(loud["debug"]["error"]["capsule"], nullptr);
}

}  // namespace
}  // namespace nansense::testing
