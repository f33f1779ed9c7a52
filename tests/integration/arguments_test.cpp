// Every command's arguments at their boundaries, over REST and MCP. The probes
// are made from the schemas the server advertises (MCP's tools/list, and the
// same schema for REST-only commands): each bound's value and the one just
// past it, every choice and one outside, a wrong type, an unknown argument
// and each required one left out. Each must be accepted by both transports
// alike, or refused by both with a message naming the argument. A command or
// bound added to src/server/controller/commands.cpp is probed here without an edit.
//
// The session has finished, so a command that passes its checks is refused
// afterwards for the state (409) and nothing moves; queries answer.
#include <set>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "server/controller/wire_types.h"

namespace nansense::testing {
namespace {

struct Probe {
  std::string what;  // for failure messages
  json value;
  bool accepted;
  bool in_query = true;  // whether a query string can carry it
};

// Keywords the argument check enforces (and this test probes); anything else
// advertised in a schema would be a promise nobody keeps.
const std::set<std::string> kEnforced = {
    "type",      "description", "default",  "minimum",  "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum",
    "minLength", "items",       "minItems", "maxItems", "anyOf"};

// A valid value of an argument, for the required ones while another is probed:
// the fixture's first layer for names, the lowest allowed number.
json example(const json& spec) {
  if (spec.contains("enum")) return spec["enum"][0];
  const std::string type = spec["type"];
  if (type == "string") return "fc1";
  if (type == "array") {
    const json& items = spec["items"];
    const std::string item = items.value("type", "string");
    if (item == "integer") return json::array({items.value("minimum", 0)});
    if (item == "number") return json::array({items.value("minimum", 0.5)});
    if (items.contains("enum")) return json::array({items["enum"][0]});
    return json::array({"fc1"});
  }
  if (type == "boolean") return true;
  if (type == "object") return json::object();
  if (spec.contains("minimum")) return spec["minimum"];
  return type == "integer" ? json(1) : json(0.5);
}

std::vector<Probe> probes(const json& spec) {
  std::vector<Probe> out;
  const std::string type = spec["type"];
  if (type == "integer" || type == "number") {
    const double step = type == "integer" ? 1 : 1e-6;
    auto value = [&](double v) { return type == "integer" ? json(static_cast<int64_t>(v)) : json(v); };
    if (spec.contains("minimum")) {
      const double m = spec["minimum"];
      out.push_back({"the minimum", value(m), true});
      out.push_back({"just below the minimum", value(m - step), false});
    }
    if (spec.contains("exclusiveMinimum")) {
      const double m = spec["exclusiveMinimum"];
      out.push_back({"the exclusive minimum", value(m), false});
      out.push_back({"just above the exclusive minimum", value(m + step), true});
    }
    if (spec.contains("maximum")) {
      const double m = spec["maximum"];
      out.push_back({"the maximum", value(m), true});
      out.push_back({"just above the maximum", value(m + step), false});
    }
    if (spec.contains("exclusiveMaximum")) {
      const double m = spec["exclusiveMaximum"];
      out.push_back({"the exclusive maximum", value(m), false});
      out.push_back({"just below the exclusive maximum", value(m - step), true});
    }
    out.push_back({"a word", "many", false});
    if (type == "integer") out.push_back({"a fraction", 1.5, false});
  } else if (type == "string") {
    for (const auto& choice : spec.value("enum", json::array())) {
      out.push_back({"the choice " + choice.dump(), choice, true});
    }
    if (spec.contains("enum")) out.push_back({"a value outside the choices", "no-such-choice", false});
    if (spec.value("minLength", 0) > 0) out.push_back({"an empty string", "", false});
    out.push_back({"a number", 7, false, /*in_query=*/false});
  } else if (type == "boolean") {
    out.push_back({"true", true, true});
    out.push_back({"false", false, true});
    out.push_back({"a word", "maybe", false});
  } else if (type == "array" &&
             (spec["items"].value("type", "") == "integer" || spec["items"].value("type", "") == "number")) {
    // A list of integers (a weight strip's index) or numbers (a perturbation's values), each item bounded.
    const bool integers = spec["items"]["type"] == "integer";
    const double low = spec["items"].value("minimum", 0.0);
    auto item = [&](double v) { return integers ? json(static_cast<int64_t>(v)) : json(v); };
    auto list = [&](size_t n, double v) { return json(std::vector<json>(n, item(v))); };
    if (spec.contains("maxItems")) {
      const size_t max = spec["maxItems"];
      out.push_back({"the most items", list(max, low), true});
      out.push_back({"one item too many", list(max + 1, low), false});
    }
    if (spec["items"].contains("minimum")) out.push_back({"an item below the minimum", list(1, low - 1), false});
    out.push_back({"a word in the list", json::array({"many"}), false});
    out.push_back({"a fraction in the list", json::array({1.5}), !integers, /*in_query=*/false});
    out.push_back({"a plain string", "fc1", false, /*in_query=*/false});
  } else if (type == "array") {
    // Names, or choices (a gallery's rankings).
    const json filler = spec["items"].contains("enum") ? spec["items"]["enum"][0] : json("fc1");
    if (spec.contains("minItems") && spec["minItems"].get<size_t>() > 0) {
      out.push_back({"too few items", json::array(), false});
    }
    if (spec.contains("maxItems")) {
      const size_t max = spec["maxItems"];
      out.push_back({"the most items", json(std::vector<json>(max, filler)), true});
      out.push_back({"one item too many", json(std::vector<json>(max + 1, filler)), false});
    }
    if (spec["items"].contains("enum")) {
      out.push_back({"an item outside the choices", json::array({"no-such-choice"}), false});
    }
    if (spec["items"].value("minLength", 0) > 0) out.push_back({"an empty name", json::array({""}), false, false});
    out.push_back({"a plain string", "fc1", false, /*in_query=*/false});
    out.push_back({"a number in the list", json::array({7}), false, /*in_query=*/false});
  }
  return out;
}

// A JSON value as a query string carries it.
std::string query_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& item : v)
      out += (out.empty() ? "" : ",") + (item.is_string() ? item.get<std::string>() : item.dump());
    return out;
  }
  return v.dump();
}

std::string query_of(const json& args) {
  std::string out;
  for (const auto& [key, v] : args.items()) out += (out.empty() ? "?" : "&") + key + "=" + query_text(v);
  return out;
}

// What a transport answered: refused by the argument check (and the message),
// or anything else (an answer, or a refusal for the session's state).
struct Outcome {
  bool refused = false;
  std::string message;
};

bool argument_refusal(const std::string& message) {
  for (const char* prefix : {"argument \"", "unknown argument \"", "missing required argument \""}) {
    if (message.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

class ArgumentsTest : public TrainingServerTest {
 protected:
  void SetUp() override {
    start(/*epochs=*/1, /*train_batches=*/2, /*val_batches=*/1);
    wait_paused();
    ASSERT_EQ(post("/api/run", {{"detach", true}}).status, 200u);
    ASSERT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kFinished);
    mcp_ = std::make_unique<McpClient>(port_);
    mcp_->initialize();
    const json listed = mcp_->request("tools/list");
    for (const auto& tool : listed["result"]["tools"]) advertised_[tool["name"]] = tool;
  }

  Outcome over_rest(const json& command, const json& args) {
    const std::string method = command["rest"]["method"];
    const std::string path = command["rest"]["path"];
    Reply r = method == "GET" ? get(path + query_of(args)) : post(path, args);
    // 204: a picture of a replaced snapshot (`sequence`), an answer, not a refusal.
    if (r.status == 200 || r.status == 204 || r.headers.count("X-Nansense-Render")) return {};
    const std::string message = r.json().value("error", "");
    return {r.status == 400 && argument_refusal(message), message};
  }

  Outcome over_mcp(const json& command, const json& args) {
    json result = mcp_->tool(command["name"], args);
    if (!result.value("isError", false)) return {};
    const std::string message = result["content"][0]["text"];
    return {argument_refusal(message), message};
  }

  // Sends `args` over every transport of `command` and checks the outcome.
  void expect(const json& command, const json& args, bool accepted, const std::string& argument,
              const std::string& what, bool in_query = true) {
    const std::string name = command["name"];
    std::vector<std::pair<std::string, Outcome>> outcomes;
    if (!command["rest"].is_null() && (in_query || command["rest"]["method"] == "POST")) {
      outcomes.emplace_back("REST", over_rest(command, args));
    }
    if (command["mcp"].get<bool>()) outcomes.emplace_back("MCP", over_mcp(command, args));
    for (const auto& [transport, outcome] : outcomes) {
      SCOPED_TRACE(transport + " " + name + " " + args.dump().substr(0, 200) + ": " + argument + " " + what);
      EXPECT_EQ(outcome.refused, !accepted) << outcome.message;
      if (outcome.refused) {
        // A clear message names the argument.
        EXPECT_NE(outcome.message.find("\"" + argument + "\""), std::string::npos) << outcome.message;
      }
    }
    ++checked_;
  }

  std::unique_ptr<McpClient> mcp_;
  std::map<std::string, json> advertised_;
  int checked_ = 0;
};

TEST_F(ArgumentsTest, EveryBoundIsEnforcedAlikeOverRestAndMcp) {
  const json description = server::wire_description();
  for (const auto& command : description["commands"]) {
    const std::string name = command["name"];
    SCOPED_TRACE(name);
    json schema = command["input_schema"];
    if (command["mcp"].get<bool>()) {
      ASSERT_TRUE(advertised_.count(name)) << name << " is not listed by tools/list";
      // What MCP advertises is the declaration, every constraint included.
      EXPECT_EQ(advertised_[name]["inputSchema"], schema);
    }
    EXPECT_EQ(schema["additionalProperties"], false);
    const json required = schema.value("required", json::array());
    json base = json::object();
    for (const auto& key : required) base[key.get<std::string>()] = example(schema["properties"][key]);

    for (const auto& [arg, spec] : schema["properties"].items()) {
      // One item or a list (anyOf): each alternative is probed as it stands.
      const json alternatives = spec.contains("anyOf") ? spec["anyOf"] : json::array({spec});
      for (const auto& [keyword, _] : spec.items()) {
        EXPECT_TRUE(kEnforced.count(keyword))
            << name << "." << arg << " advertises \"" << keyword << "\", which the argument check does not enforce";
      }
      for (const auto& alternative : alternatives) {
        for (const auto& [keyword, _] : alternative.items()) {
          EXPECT_TRUE(kEnforced.count(keyword) && keyword != "anyOf")
              << name << "." << arg << " advertises \"" << keyword << "\", which the argument check does not enforce";
        }
        for (const auto& probe : probes(alternative)) {
          json args = base;
          args[arg] = probe.value;
          expect(command, args, probe.accepted, arg, probe.what, probe.in_query);
        }
      }
    }
    json unknown = base;
    unknown["no_such_argument"] = 1;
    expect(command, unknown, false, "no_such_argument", "an unknown argument");
    for (const auto& key : required) {
      json missing = base;
      missing.erase(key.get<std::string>());
      expect(command, missing, false, key, "left out");
    }
  }
  EXPECT_GT(checked_, 100);
}

TEST_F(ArgumentsTest, TheWaitLimitIsOneDeclaration) {
  // Every command that waits takes the same timeout_seconds: 0 to 300 s.
  int waiting = 0;
  const json description = server::wire_description();
  for (const auto& command : description["commands"]) {
    const json& properties = command["input_schema"]["properties"];
    if (!properties.contains("timeout_seconds")) continue;
    ++waiting;
    EXPECT_EQ(properties["timeout_seconds"]["minimum"], 0) << command["name"];
    EXPECT_EQ(properties["timeout_seconds"]["maximum"], 300) << command["name"];
  }
  // step, run, run_until, pause, refresh, time_travel, run_experiment, and the
  // probe's pin_batch, unpin_batch, set_probe_mode, add_perturbation, clear_perturbations.
  EXPECT_EQ(waiting, 12);
}

}  // namespace
}  // namespace nansense::testing
