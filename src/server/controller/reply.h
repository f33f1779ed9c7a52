// Typed replies, declared once. A reply is a struct that names its wire type
// and lists its fields, each with its JSON key and what it means:
//
//   struct ExperimentCancel {
//     static constexpr const char* kWireName = "ExperimentCancel";
//     int64_t cancelled = 0;
//     template <class Fields>
//     static void fields(Fields& f) {
//       f.field("cancelled", &ExperimentCancel::cancelled, "How many requests it stopped.");
//     }
//   };
//
// From that one list come the reply's JSON (to_json) and its JSON Schema in
// wire_types() (declare_reply), from which the web UI's TypeScript type
// and the HTTP/MCP reference are generated, and against which the
// integration tests check real replies. A field's schema follows from its
// C++ type (bool, integers, double, std::string, std::vector, std::optional
// as nullable, std::map<std::string, T>, another reply as a reference, a
// BatchPosition or TrainerStep as json_values.h writes them);
// where the type says too little (a json value, a string that is one of a
// few words, an enum, written as its to_string word) the field names its
// schema. A part of a reply with no name of its own (`static constexpr bool
// kInline = true;` in place of kWireName) lists its fields the same way; its
// schema is written out where it is used.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/json_values.h"

namespace nansense::server {

using common::json;

template <class T, class = void>
struct is_reply : std::false_type {};
template <class T>
struct is_reply<T, std::void_t<decltype(T::kWireName)>> : std::true_type {};

template <class T, class = void>
struct is_inline_reply : std::false_type {};
template <class T>
struct is_inline_reply<T, std::void_t<decltype(T::kInline)>> : std::true_type {};
template <class T>
struct has_fields : std::bool_constant<is_reply<T>::value || is_inline_reply<T>::value> {};

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};

template <class T>
std::enable_if_t<has_fields<T>::value, json> to_json(const T& reply);
// The object schema of a struct's fields (an inline part's, where it is used).
template <class T>
json fields_schema();

// A field's value on the wire.
template <class T>
json wire_value(const T& value) {
  if constexpr (has_fields<T>::value) {
    return to_json(value);
  } else if constexpr (is_optional<T>::value) {
    return value ? wire_value(*value) : json(nullptr);
  } else if constexpr (is_vector<T>::value) {
    json out = json::array();
    for (const auto& item : value) out.push_back(wire_value(item));
    return out;
  } else if constexpr (is_string_map<T>::value) {
    json out = json::object();
    for (const auto& [key, item] : value) out[key] = wire_value(item);
    return out;
  } else if constexpr (std::is_same_v<T, BatchPosition>) {
    return common::to_json(value);
  } else if constexpr (std::is_same_v<T, TrainerStep>) {
    return common::to_json(std::optional<TrainerStep>(value));
  } else if constexpr (std::is_enum_v<T>) {
    return json(std::string(to_string(value)));  // the enum's word, declared beside it
  } else {
    return json(value);
  }
}

// The JSON Schema of a field's C++ type.
template <class T>
json schema_of() {
  if constexpr (is_reply<T>::value) {
    return {{"$ref", std::string("#/$defs/") + T::kWireName}};
  } else if constexpr (is_inline_reply<T>::value) {
    return fields_schema<T>();
  } else if constexpr (is_optional<T>::value) {
    return {{"anyOf", {schema_of<typename T::value_type>(), {{"type", "null"}}}}};
  } else if constexpr (is_vector<T>::value) {
    return {{"type", "array"}, {"items", schema_of<typename T::value_type>()}};
  } else if constexpr (is_string_map<T>::value) {
    return {{"type", "object"}, {"additionalProperties", schema_of<typename T::mapped_type>()}};
  } else if constexpr (std::is_same_v<T, BatchPosition>) {
    return {{"$ref", "#/$defs/Position"}};
  } else if constexpr (std::is_same_v<T, TrainerStep>) {
    return {{"$ref", "#/$defs/TrainerStep"}};
  } else if constexpr (std::is_same_v<T, bool>) {
    return {{"type", "boolean"}};
  } else if constexpr (std::is_integral_v<T>) {
    return {{"type", "integer"}};
  } else if constexpr (std::is_floating_point_v<T>) {
    return {{"type", "number"}};
  } else if constexpr (std::is_same_v<T, std::string>) {
    return {{"type", "string"}};
  } else {
    static_assert(std::is_same_v<T, json>, "a reply field of a type reply.h cannot describe");
    return json::object();  // any value
  }
}

namespace reply_detail {

// Writes a reply's fields as JSON.
template <class T>
class JsonFields {
 public:
  JsonFields(const T& reply, json& out) : reply_(reply), out_(out) {}
  // `schema`: only for the declaration (SchemaFields).
  template <class C, class M>
  void field(const char* key, M C::*member, const char*, const json& = nullptr) {
    out_[key] = wire_value(reply_.*member);
  }
  // A key present only when the member holds a value.
  template <class C, class M>
  void optional_field(const char* key, std::optional<M> C::*member, const char*, const json& = nullptr) {
    if (const auto& value = reply_.*member) out_[key] = wire_value(*value);
  }

 private:
  const T& reply_;
  json& out_;
};

// Writes a reply's fields as a JSON Schema object with exactly these keys.
class SchemaFields {
 public:
  template <class C, class M>
  void field(const char* key, M C::*, const char* description, const json& schema = nullptr) {
    if constexpr (std::is_enum_v<M>) {
      // Which words an enum is written as only the field can say.
      if (schema.is_null()) {
        throw std::logic_error(std::string("reply field \"") + key + "\" names no schema for its enum");
      }
      add(key, schema, description);
    } else {
      add(key, schema.is_null() ? schema_of<M>() : schema, description);
    }
    required_.push_back(key);
  }
  template <class C, class M>
  void optional_field(const char* key, std::optional<M> C::*, const char* description, const json& schema = nullptr) {
    add(key, schema.is_null() ? schema_of<M>() : schema, description);
  }
  json schema() const {
    return {{"type", "object"}, {"properties", properties_}, {"required", required_}, {"additionalProperties", false}};
  }

 private:
  void add(const char* key, json schema, const char* description) {
    schema["description"] = description;
    properties_[key] = std::move(schema);
  }
  json properties_ = json::object();
  json required_ = json::array();
};

}  // namespace reply_detail

template <class T>
std::enable_if_t<has_fields<T>::value, json> to_json(const T& reply) {
  json out = json::object();
  reply_detail::JsonFields<T> fields(reply, out);
  T::fields(fields);
  return out;
}

template <class T>
json fields_schema() {
  reply_detail::SchemaFields fields;
  T::fields(fields);
  return fields.schema();
}

// Adds `T`'s JSON Schema to `defs` under its wire name.
template <class T>
void declare_reply(json& defs) {
  defs[T::kWireName] = fields_schema<T>();
}

}  // namespace nansense::server
