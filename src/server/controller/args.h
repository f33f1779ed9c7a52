// Command arguments, declared once. A command lists its Args (name, type,
// range, choices, default, description); REST bodies and query strings, MCP
// tool calls and the push channel's watch entries are all checked against
// that list by the same code, and MCP's input schemas are written from it, so
// what a transport advertises and what it enforces cannot drift apart.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/controller/json_views.h"

namespace nansense::server {

struct Arg {
  enum class Type { kString, kInteger, kNumber, kBoolean, kStrings, kIntegers, kNumbers, kObject };

  std::string name;
  Type type = Type::kString;
  // What an agent (and the generated reference) reads: what it means, its unit.
  std::string description;
  bool required = false;
  // Numbers (and each item of a list of integers): inclusive bounds unless
  // the exclusive flag is set.
  std::optional<double> minimum;
  std::optional<double> maximum;
  bool exclusive_minimum = false;
  bool exclusive_maximum = false;
  // Strings: the only values accepted, when not empty.
  std::vector<std::string> choices;
  // Strings and list items: names must not be empty.
  bool non_empty = false;
  // Lists.
  std::optional<size_t> min_items;
  std::optional<size_t> max_items;
  // Lists: one item alone is accepted as a list of one (the render_weights of
  // the original NaNsense 0.4.0, Python on PyPI, takes index=0 where ours
  // takes [0]).
  bool single = false;
  // The value a command sees when the argument is absent; null for none (an
  // optional setting the command leaves alone).
  json fallback;
  // The name it had before it was renamed to its one name
  // (docs/guide/differences.md, "One name per concept"): still accepted
  // through release kOldNamesUntil, and said so in its description.
  std::string old_name;

  // Copies with one more constraint, so that one declaration can be shared
  // with a different default or bound.
  Arg mandatory() const;
  Arg at_least(double v) const;
  Arg above(double v) const;  // exclusive
  Arg at_most(double v) const;
  Arg one_of(std::vector<std::string> values) const;
  Arg not_empty() const;
  Arg items(size_t min, size_t max) const;
  Arg or_single() const;
  Arg or_else(json value) const;
  Arg described(std::string text) const;
  Arg formerly(std::string old) const;
};

// The release after which renamed arguments (Arg::old_name) and routes
// (Command::old_routes) stop answering to their old names.
inline constexpr const char* kOldNamesUntil = "0.2";

Arg string_arg(std::string name, std::string description);
Arg integer_arg(std::string name, std::string description);
Arg number_arg(std::string name, std::string description);
Arg boolean_arg(std::string name, std::string description);
Arg strings_arg(std::string name, std::string description);
// A list of integers; at_least/at_most bound each item.
Arg integers_arg(std::string name, std::string description);
// A list of finite numbers; at_least/at_most bound each item.
Arg numbers_arg(std::string name, std::string description);
// A JSON object of named values, checked by the command itself (an
// experiment's params, validated against the kind's own declarations).
Arg object_arg(std::string name, std::string description);

// {"type":"object","properties":…,"required":…,"additionalProperties":false}:
// JSON Schema for MCP's inputSchema, every constraint included.
json input_schema(const std::vector<Arg>& args);

// Arguments checked against their declarations, defaults filled in. Every
// refusal is a Refusal(kInvalidArgument) naming the argument, what it
// must be and what came.
class Args {
 public:
  // `given`: a JSON object of named arguments; null means none. An explicit
  // null counts as absent (many MCP clients send optional arguments so).
  Args(const std::vector<Arg>& declared, const json& given);

  // Whether the argument was given or has a default.
  bool has(const std::string& name) const;
  std::string string(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  bool boolean(const std::string& name) const;
  // Empty when absent.
  std::vector<std::string> strings(const std::string& name) const;
  std::vector<int64_t> integers(const std::string& name) const;
  std::vector<double> numbers(const std::string& name) const;
  // An empty object when absent.
  json object(const std::string& name) const;

  std::optional<std::string> optional_string(const std::string& name) const;
  std::optional<int64_t> optional_integer(const std::string& name) const;
  std::optional<double> optional_number(const std::string& name) const;
  std::optional<bool> optional_boolean(const std::string& name) const;
  std::optional<std::vector<std::string>> optional_strings(const std::string& name) const;

 private:
  // The checked value, or the default, or null. Throws std::logic_error for
  // a name the command does not declare (a bug, not a bad request).
  const json& value(const std::string& name) const;

  const std::vector<Arg>& declared_;
  json values_;
};

// A query string as the JSON object its declarations read: integers and
// numbers parsed, "true"/"false" (and "1"/"0", or no value) as booleans,
// lists split at commas. A value that does not parse stays a string, so the
// check refuses it with the usual message. `ignored` names keys a transport
// uses itself (a token, a cache buster), unless the command declares it.
json from_query(const std::vector<Arg>& declared, const std::map<std::string, std::string>& query,
                const std::vector<std::string>& ignored = {});

}  // namespace nansense::server
