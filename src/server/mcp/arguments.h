// Tool arguments checked against the tool's own input schema, so what
// tools/list promises and what tools/call accepts cannot drift apart.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/controller.h"

namespace nansense::server::mcp {

// Schema pieces for the tool table. `description` is what an agent reads.
json string_arg(const std::string& description);
json enum_arg(const std::vector<std::string>& values, const std::string& fallback, const std::string& description);
json integer_arg(const std::string& description, std::optional<int64_t> minimum = std::nullopt,
                 std::optional<int64_t> maximum = std::nullopt, std::optional<int64_t> fallback = std::nullopt);
json number_arg(const std::string& description, double minimum, double maximum, double fallback);
json boolean_arg(const std::string& description, bool fallback);
json string_list_arg(const std::string& description, int64_t max_items);
// {"type":"object","properties":...,"required":...,"additionalProperties":false}
json object_schema(json properties, const std::vector<std::string>& required = {});

// Validates `arguments` (an object, or null for none) against `schema` (built
// from the pieces above) and reads them, defaults included. Every check
// failure throws ControllerError(kInvalidArgument) naming the argument, what
// it must be and what came.
class Arguments {
 public:
  Arguments(const json& schema, const json& arguments);

  std::string string(const std::string& key) const;
  std::optional<std::string> optional_string(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  std::optional<int64_t> optional_integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  // Absent (and without a default): nullopt, for partial updates.
  std::optional<bool> optional_boolean(const std::string& key) const;
  std::optional<double> optional_number(const std::string& key) const;
  std::optional<std::vector<std::string>> optional_strings(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;  // empty when absent

 private:
  // The argument as given, else the schema's default, else null.
  const json& value(const std::string& key) const;

  const json& schema_;
  json values_;
};

}  // namespace nansense::server::mcp
