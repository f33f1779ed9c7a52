#include "server/mcp/arguments.h"

#include <cmath>
#include <cstdio>

namespace nansense::server::mcp {

namespace {

[[noreturn]] void refuse(const std::string& message) {
  throw ControllerError(ControllerError::Kind::kInvalidArgument, message);
}

std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

// 300 rather than 300.0 for a bound written as a double.
std::string bound(const json& v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v.get<double>());
  return buf;
}

// JSON Schema counts 3.0 as an integer; nlohmann parses it as a float.
bool is_integer(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
}

void check(const std::string& key, const json& spec, const json& v) {
  const std::string type = spec.at("type");
  const std::string what = "argument \"" + key + "\"";
  if (type == "string") {
    if (!v.is_string()) refuse(what + " must be a string, got " + shown(v));
    if (auto e = spec.find("enum"); e != spec.end()) {
      bool known = false;
      std::string list;
      for (const auto& option : *e) {
        known = known || option == v;
        list += (list.empty() ? "" : ", ") + option.dump();
      }
      if (!known) refuse(what + " must be one of " + list + ", got " + shown(v));
    }
  } else if (type == "integer" || type == "number") {
    if (type == "integer" ? !is_integer(v) : !v.is_number()) {
      refuse(what + " must be " + (type == "integer" ? "an integer" : "a number") + ", got " + shown(v));
    }
    const double d = v.get<double>();
    auto min = spec.find("minimum");
    auto max = spec.find("maximum");
    if ((min != spec.end() && d < min->get<double>()) || (max != spec.end() && d > max->get<double>())) {
      std::string range = min != spec.end() && max != spec.end() ? "from " + bound(*min) + " to " + bound(*max)
                          : min != spec.end()                    ? bound(*min) + " or more"
                                                                 : bound(*max) + " or less";
      refuse(what + " must be " + range + ", got " + shown(v));
    }
  } else if (type == "boolean") {
    if (!v.is_boolean()) refuse(what + " must be true or false, got " + shown(v));
  } else if (type == "array") {
    if (!v.is_array()) refuse(what + " must be an array of strings, got " + shown(v));
    for (const auto& item : v) {
      if (!item.is_string()) refuse(what + " must hold strings only, got " + shown(item));
    }
    if (auto min = spec.find("minItems"); min != spec.end() && v.size() < min->get<size_t>()) {
      refuse(what + " needs at least " + min->dump() + " item(s)");
    }
    if (auto max = spec.find("maxItems"); max != spec.end() && v.size() > max->get<size_t>()) {
      refuse(what + " takes at most " + max->dump() + " items, got " + std::to_string(v.size()));
    }
  }
}

}  // namespace

json string_arg(const std::string& description) { return {{"type", "string"}, {"description", description}}; }

json enum_arg(const std::vector<std::string>& values, const std::string& fallback, const std::string& description) {
  return {{"type", "string"}, {"enum", values}, {"default", fallback}, {"description", description}};
}

json integer_arg(const std::string& description, std::optional<int64_t> minimum, std::optional<int64_t> maximum,
                 std::optional<int64_t> fallback) {
  json out = {{"type", "integer"}, {"description", description}};
  if (minimum) out["minimum"] = *minimum;
  if (maximum) out["maximum"] = *maximum;
  if (fallback) out["default"] = *fallback;
  return out;
}

json number_arg(const std::string& description, double minimum, double maximum, double fallback) {
  return {{"type", "number"},
          {"minimum", minimum},
          {"maximum", maximum},
          {"default", fallback},
          {"description", description}};
}

json boolean_arg(const std::string& description, bool fallback) {
  return {{"type", "boolean"}, {"default", fallback}, {"description", description}};
}

json string_list_arg(const std::string& description, int64_t max_items) {
  return {{"type", "array"},
          {"items", {{"type", "string"}}},
          {"minItems", 1},
          {"maxItems", max_items},
          {"description", description}};
}

json object_schema(json properties, const std::vector<std::string>& required) {
  json out = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) out["required"] = required;
  return out;
}

Arguments::Arguments(const json& schema, const json& arguments) : schema_(schema) {
  if (arguments.is_null()) {
    values_ = json::object();
  } else if (!arguments.is_object()) {
    refuse("arguments must be an object of named arguments, got " + shown(arguments));
  } else {
    values_ = arguments;
  }
  const json& properties = schema_.at("properties");
  for (const auto& [key, v] : values_.items()) {
    auto spec = properties.find(key);
    if (spec == properties.end()) {
      std::string list;
      for (const auto& [name, _] : properties.items()) list += (list.empty() ? "" : ", ") + name;
      refuse("unknown argument \"" + key + "\"; " +
             (list.empty() ? std::string("this tool takes no arguments") : "accepted: " + list));
    }
    // An explicit null means "not given" (many clients send optional
    // arguments that way).
    if (!v.is_null()) check(key, *spec, v);
  }
  if (auto required = schema_.find("required"); required != schema_.end()) {
    for (const auto& key : *required) {
      if (!values_.contains(key) || values_[key].is_null()) {
        refuse("missing required argument \"" + key.get<std::string>() + "\"");
      }
    }
  }
}

const json& Arguments::value(const std::string& key) const {
  static const json kNull;
  if (auto v = values_.find(key); v != values_.end() && !v->is_null()) return *v;
  const json& spec = schema_.at("properties").at(key);
  if (auto d = spec.find("default"); d != spec.end()) return *d;
  return kNull;
}

std::string Arguments::string(const std::string& key) const { return value(key).get<std::string>(); }

std::optional<std::string> Arguments::optional_string(const std::string& key) const {
  const json& v = value(key);
  return v.is_null() ? std::nullopt : std::optional<std::string>(v.get<std::string>());
}

int64_t Arguments::integer(const std::string& key) const {
  return static_cast<int64_t>(std::llround(value(key).get<double>()));
}

std::optional<int64_t> Arguments::optional_integer(const std::string& key) const {
  if (value(key).is_null()) return std::nullopt;
  return integer(key);
}

double Arguments::number(const std::string& key) const { return value(key).get<double>(); }

bool Arguments::boolean(const std::string& key) const { return value(key).get<bool>(); }

std::optional<bool> Arguments::optional_boolean(const std::string& key) const {
  const json& v = value(key);
  return v.is_null() ? std::nullopt : std::optional<bool>(v.get<bool>());
}

std::optional<double> Arguments::optional_number(const std::string& key) const {
  const json& v = value(key);
  return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
}

std::optional<std::vector<std::string>> Arguments::optional_strings(const std::string& key) const {
  const json& v = value(key);
  return v.is_null() ? std::nullopt : std::optional<std::vector<std::string>>(v.get<std::vector<std::string>>());
}

std::vector<std::string> Arguments::strings(const std::string& key) const {
  const json& v = value(key);
  return v.is_null() ? std::vector<std::string>{} : v.get<std::vector<std::string>>();
}

}  // namespace nansense::server::mcp
