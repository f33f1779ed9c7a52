// Checks a reply against its declared shape (src/server/wire_types.cpp):
// every required key present, no undeclared key, every value of its declared
// type. What the tests hold the server's real replies to, so that the
// declarations the page's types are checked against are the truth.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "server/controller/wire_types.h"

namespace nansense::testing {

// The first mismatch of `value` against `schema`, as "path: what", or "".
inline std::string wire_mismatch(const nlohmann::json& value, const nlohmann::json& schema, const std::string& path) {
  using nlohmann::json;
  const json& defs = server::wire_types();
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    const std::string name = ref->get<std::string>().substr(std::string("#/$defs/").size());
    return wire_mismatch(value, defs.at(name), path);
  }
  if (auto c = schema.find("const"); c != schema.end()) {
    return value == *c ? "" : path + ": expected " + c->dump() + ", got " + value.dump();
  }
  if (auto any = schema.find("anyOf"); any != schema.end()) {
    std::string reasons;
    for (const auto& option : *any) {
      std::string why = wire_mismatch(value, option, path);
      if (why.empty()) return "";
      reasons += (reasons.empty() ? "" : " | ") + why;
    }
    return path + ": matches no alternative (" + reasons + ")";
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    for (const auto& option : *e) {
      if (option == value) return "";
    }
    return path + ": " + value.dump() + " is not one of " + e->dump();
  }
  const std::string type = schema.value("type", "");
  const bool ok = type == "string"    ? value.is_string()
                  : type == "integer" ? value.is_number_integer()
                  : type == "number"  ? value.is_number()
                  : type == "boolean" ? value.is_boolean()
                  : type == "null"    ? value.is_null()
                  : type == "array"   ? value.is_array()
                  : type == "object"  ? value.is_object()
                                      : true;
  if (!ok) return path + ": expected " + type + ", got " + value.dump().substr(0, 80);
  if (type == "array") {
    for (size_t i = 0; i < value.size(); ++i) {
      std::string why = wire_mismatch(value[i], schema.at("items"), path + "[" + std::to_string(i) + "]");
      if (!why.empty()) return why;
    }
  }
  if (type == "object") {
    const json properties = schema.value("properties", json::object());
    for (const auto& key : schema.value("required", json::array())) {
      if (!value.contains(key.get<std::string>())) return path + ": lacks \"" + key.get<std::string>() + "\"";
    }
    for (const auto& [key, v] : value.items()) {
      if (auto p = properties.find(key); p != properties.end()) {
        std::string why = wire_mismatch(v, *p, path + "." + key);
        if (!why.empty()) return why;
      } else if (auto extra = schema.find("additionalProperties"); extra != schema.end() && extra->is_object()) {
        std::string why = wire_mismatch(v, *extra, path + "." + key);
        if (!why.empty()) return why;
      } else {
        return path + ": has \"" + key + "\", which " + path + " does not declare";
      }
    }
  }
  return "";
}

// Expects `value` to be a `type` as declared.
inline void expect_wire(const nlohmann::json& value, const std::string& type) {
  ASSERT_TRUE(server::wire_types().contains(type)) << "no declared type " << type;
  EXPECT_EQ(wire_mismatch(value, server::wire_types().at(type), type), "") << value.dump().substr(0, 2000);
}

}  // namespace nansense::testing
