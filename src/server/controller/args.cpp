#include "server/controller/args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "server/controller/refusal.h"

namespace nansense::server {

namespace {

[[noreturn]] void refuse(const Arg& arg, const std::string& message) {
  throw Refusal(Refusal::Kind::kInvalidArgument, message, arg.name);
}

// Whether `key` names the argument: its name, or the name it had before
// (Arg::old_name), which Args maps to the new one.
bool answers_to(const Arg& d, const std::string& key) {
  return d.name == key || (!d.old_name.empty() && d.old_name == key);
}

// A value as a client sent it, cut short: a client may send anything.
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

// 300 rather than 300.000000.
std::string bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string quoted_list(const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + json(values[i]).dump();
  }
  return out;
}

// "from 2 to 512", "greater than 0 and at most 1", "0 or more".
std::string range_text(const Arg& a) {
  std::string low, high;
  if (a.minimum) low = a.exclusive_minimum ? "greater than " + bound(*a.minimum) : bound(*a.minimum) + " or more";
  if (a.maximum) high = a.exclusive_maximum ? "less than " + bound(*a.maximum) : "at most " + bound(*a.maximum);
  if (a.minimum && a.maximum && !a.exclusive_minimum && !a.exclusive_maximum) {
    return "from " + bound(*a.minimum) + " to " + bound(*a.maximum);
  }
  if (!low.empty() && !high.empty()) return low + " and " + high;
  return low.empty() ? high : low;
}

const char* type_text(Arg::Type type) {
  switch (type) {
    case Arg::Type::kString:
      return "a string";
    case Arg::Type::kInteger:
      return "an integer";
    case Arg::Type::kNumber:
      return "a number";
    case Arg::Type::kBoolean:
      return "true or false";
    case Arg::Type::kStrings:
      return "a list of strings";
    case Arg::Type::kIntegers:
      return "a list of integers";
    case Arg::Type::kNumbers:
      return "a list of numbers";
    case Arg::Type::kObject:
      return "a JSON object";
  }
  return "a value";
}

// JSON Schema counts 3.0 as an integer; nlohmann parses it as a float.
bool integral(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
}

// Checks one given value and returns it normalised (3.0 -> 3).
json checked(const Arg& a, const json& v) {
  const std::string what = "argument \"" + a.name + "\"";
  switch (a.type) {
    case Arg::Type::kString: {
      if (!v.is_string()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      if (!a.choices.empty() && std::find(a.choices.begin(), a.choices.end(), v) == a.choices.end()) {
        refuse(a, what + " must be " + quoted_list(a.choices) + ", got " + shown(v));
      }
      if (a.non_empty && v.get_ref<const std::string&>().empty()) refuse(a, what + " must not be empty");
      return v;
    }
    case Arg::Type::kInteger:
    case Arg::Type::kNumber: {
      const bool ok = a.type == Arg::Type::kInteger ? integral(v) : v.is_number();
      if (!ok) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
        refuse(a, what + " is too large: " + shown(v));
      }
      const double d = v.get<double>();
      if (!std::isfinite(d)) refuse(a, what + " must be a finite number, got " + shown(v));
      const bool low = a.minimum && (a.exclusive_minimum ? d <= *a.minimum : d < *a.minimum);
      const bool high = a.maximum && (a.exclusive_maximum ? d >= *a.maximum : d > *a.maximum);
      if (low || high) refuse(a, what + " must be " + range_text(a) + ", got " + shown(v));
      if (a.type == Arg::Type::kInteger && !v.is_number_integer()) return static_cast<int64_t>(d);
      return v;
    }
    case Arg::Type::kBoolean:
      if (!v.is_boolean()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      return v;
    case Arg::Type::kStrings: {
      if (a.single && v.is_string()) return checked(a, json::array({v}));
      if (!v.is_array()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      for (const auto& item : v) {
        if (!item.is_string()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
        if (a.non_empty && item.get_ref<const std::string&>().empty()) {
          refuse(a, what + " must not hold an empty name");
        }
        if (!a.choices.empty() && std::find(a.choices.begin(), a.choices.end(), item) == a.choices.end()) {
          refuse(a, what + "'s items must be " + quoted_list(a.choices) + ", got " + shown(item));
        }
      }
      if (a.min_items && v.size() < *a.min_items) {
        refuse(a, what + " needs at least " + std::to_string(*a.min_items) + " item" + (*a.min_items == 1 ? "" : "s"));
      }
      if (a.max_items && v.size() > *a.max_items) {
        refuse(a, what + " takes at most " + std::to_string(*a.max_items) + " items, got " + std::to_string(v.size()));
      }
      return v;
    }
    case Arg::Type::kIntegers:
    case Arg::Type::kNumbers: {
      const bool integers = a.type == Arg::Type::kIntegers;
      if (a.single && v.is_number()) return checked(a, json::array({v}));
      if (!v.is_array()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      json out = json::array();
      for (const auto& item : v) {
        if (integers ? !integral(item) : !item.is_number()) {
          refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
        }
        const double d = item.get<double>();
        if (!std::isfinite(d)) refuse(a, what + "'s items must be finite numbers, got " + shown(v));
        const bool low = a.minimum && (a.exclusive_minimum ? d <= *a.minimum : d < *a.minimum);
        const bool high = a.maximum && (a.exclusive_maximum ? d >= *a.maximum : d > *a.maximum);
        if (low || high) refuse(a, what + "'s items must be " + range_text(a) + ", got " + shown(v));
        if (integers) {
          out.push_back(static_cast<int64_t>(d));
        } else {
          out.push_back(d);
        }
      }
      if (a.min_items && out.size() < *a.min_items) {
        refuse(a, what + " needs at least " + std::to_string(*a.min_items) + " item" + (*a.min_items == 1 ? "" : "s"));
      }
      if (a.max_items && out.size() > *a.max_items) {
        refuse(a,
               what + " takes at most " + std::to_string(*a.max_items) + " items, got " + std::to_string(out.size()));
      }
      return out;
    }
    case Arg::Type::kObject:
      if (!v.is_object()) refuse(a, what + " must be " + type_text(a.type) + ", got " + shown(v));
      return v;
  }
  return v;
}

Arg make(std::string name, Arg::Type type, std::string description) {
  Arg a;
  a.name = std::move(name);
  a.type = type;
  a.description = std::move(description);
  return a;
}

}  // namespace

Arg Arg::mandatory() const {
  Arg a = *this;
  a.required = true;
  return a;
}
Arg Arg::at_least(double v) const {
  Arg a = *this;
  a.minimum = v;
  a.exclusive_minimum = false;
  return a;
}
Arg Arg::above(double v) const {
  Arg a = *this;
  a.minimum = v;
  a.exclusive_minimum = true;
  return a;
}
Arg Arg::at_most(double v) const {
  Arg a = *this;
  a.maximum = v;
  a.exclusive_maximum = false;
  return a;
}
Arg Arg::one_of(std::vector<std::string> values) const {
  Arg a = *this;
  a.choices = std::move(values);
  return a;
}
Arg Arg::not_empty() const {
  Arg a = *this;
  a.non_empty = true;
  return a;
}
Arg Arg::items(size_t min, size_t max) const {
  Arg a = *this;
  a.min_items = min;
  a.max_items = max;
  return a;
}
Arg Arg::or_single() const {
  Arg a = *this;
  a.single = true;
  return a;
}
Arg Arg::or_else(json value) const {
  Arg a = *this;
  a.fallback = std::move(value);
  return a;
}
Arg Arg::described(std::string text) const {
  Arg a = *this;
  a.description = std::move(text);
  return a;
}
Arg Arg::formerly(std::string old) const {
  Arg a = *this;
  a.old_name = std::move(old);
  return a;
}

Arg string_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kString, std::move(description));
}
Arg integer_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kInteger, std::move(description));
}
Arg number_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kNumber, std::move(description));
}
Arg boolean_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kBoolean, std::move(description));
}
Arg strings_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kStrings, std::move(description));
}

Arg integers_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kIntegers, std::move(description));
}
Arg numbers_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kNumbers, std::move(description));
}
Arg object_arg(std::string name, std::string description) {
  return make(std::move(name), Arg::Type::kObject, std::move(description));
}

json input_schema(const std::vector<Arg>& args) {
  json properties = json::object();
  json required = json::array();
  for (const auto& a : args) {
    json p = {{"description", a.old_name.empty() ? a.description
                                                 : a.description + " Formerly \"" + a.old_name +
                                                       "\", still accepted through " + kOldNamesUntil + "."}};
    switch (a.type) {
      case Arg::Type::kString:
        p["type"] = "string";
        break;
      case Arg::Type::kInteger:
        p["type"] = "integer";
        break;
      case Arg::Type::kNumber:
        p["type"] = "number";
        break;
      case Arg::Type::kBoolean:
        p["type"] = "boolean";
        break;
      case Arg::Type::kStrings:
        p["type"] = "array";
        break;
      case Arg::Type::kIntegers:
        p["type"] = "array";
        break;
      case Arg::Type::kNumbers:
        p["type"] = "array";
        break;
      case Arg::Type::kObject:
        p["type"] = "object";
        break;
    }
    const bool list = a.type == Arg::Type::kIntegers || a.type == Arg::Type::kNumbers;
    json& bounded = list ? p["items"] : p;
    if (list) {
      bounded = {{"type", a.type == Arg::Type::kIntegers ? "integer" : "number"}};
      if (a.min_items) p["minItems"] = *a.min_items;
      if (a.max_items) p["maxItems"] = *a.max_items;
    }
    if (a.minimum) bounded[a.exclusive_minimum ? "exclusiveMinimum" : "minimum"] = *a.minimum;
    if (a.maximum) bounded[a.exclusive_maximum ? "exclusiveMaximum" : "maximum"] = *a.maximum;
    if (!a.choices.empty() && a.type != Arg::Type::kStrings) p["enum"] = a.choices;
    if (a.type == Arg::Type::kString && a.non_empty) p["minLength"] = 1;
    if (a.type == Arg::Type::kStrings) {
      p["items"] = {{"type", "string"}};
      if (!a.choices.empty()) p["items"]["enum"] = a.choices;
      if (a.non_empty) p["items"]["minLength"] = 1;
      if (a.min_items) p["minItems"] = *a.min_items;
      if (a.max_items) p["maxItems"] = *a.max_items;
    }
    if (a.single) {
      // One item alone, or the list: {"anyOf": [item, list]}.
      json list = p;
      list.erase("description");
      json item = list["items"];
      p = {{"description", a.description}, {"anyOf", json::array({std::move(item), std::move(list)})}};
    }
    if (!a.fallback.is_null()) p["default"] = a.fallback;
    properties[a.name] = std::move(p);
    if (a.required) required.push_back(a.name);
  }
  json schema = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) schema["required"] = std::move(required);
  return schema;
}

Args::Args(const std::vector<Arg>& declared, const json& given) : declared_(declared), values_(json::object()) {
  if (!given.is_null() && !given.is_object()) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "arguments must be a JSON object of named arguments, got " + shown(given));
  }
  if (given.is_object()) {
    for (const auto& [key, v] : given.items()) {
      auto a =
          std::find_if(declared.begin(), declared.end(), [&key = key](const Arg& d) { return answers_to(d, key); });
      if (a != declared.end() && a->name != key && given.contains(a->name)) {
        throw Refusal(Refusal::Kind::kInvalidArgument,
                      "\"" + key + "\" is the old name of \"" + a->name + "\"; give one of them, not both", key);
      }
      if (a == declared.end()) {
        std::string names;
        for (const auto& d : declared) names += (names.empty() ? "" : ", ") + d.name;
        throw Refusal(Refusal::Kind::kInvalidArgument,
                      "unknown argument \"" + key + "\"; " +
                          (names.empty() ? std::string("this command takes no arguments") : "accepted: " + names),
                      key);
      }
      if (!v.is_null()) values_[a->name] = checked(*a, v);
    }
  }
  for (const auto& a : declared) {
    if (a.required && !values_.contains(a.name)) refuse(a, "missing required argument \"" + a.name + "\"");
  }
}

const json& Args::value(const std::string& name) const {
  auto a = std::find_if(declared_.begin(), declared_.end(), [&](const Arg& d) { return d.name == name; });
  if (a == declared_.end()) throw std::logic_error("the command reads an undeclared argument \"" + name + "\"");
  if (auto v = values_.find(name); v != values_.end()) return *v;
  return a->fallback;
}

bool Args::has(const std::string& name) const { return !value(name).is_null(); }
std::string Args::string(const std::string& name) const { return value(name).get<std::string>(); }
int64_t Args::integer(const std::string& name) const { return value(name).get<int64_t>(); }
double Args::number(const std::string& name) const { return value(name).get<double>(); }
bool Args::boolean(const std::string& name) const { return value(name).get<bool>(); }
std::vector<std::string> Args::strings(const std::string& name) const {
  return has(name) ? value(name).get<std::vector<std::string>>() : std::vector<std::string>{};
}

json Args::object(const std::string& name) const { return has(name) ? value(name) : json::object(); }

std::optional<std::string> Args::optional_string(const std::string& name) const {
  return has(name) ? std::optional(string(name)) : std::nullopt;
}
std::optional<int64_t> Args::optional_integer(const std::string& name) const {
  return has(name) ? std::optional(integer(name)) : std::nullopt;
}
std::optional<double> Args::optional_number(const std::string& name) const {
  return has(name) ? std::optional(number(name)) : std::nullopt;
}
std::optional<bool> Args::optional_boolean(const std::string& name) const {
  return has(name) ? std::optional(boolean(name)) : std::nullopt;
}
std::optional<std::vector<std::string>> Args::optional_strings(const std::string& name) const {
  return has(name) ? std::optional(strings(name)) : std::nullopt;
}
std::vector<int64_t> Args::integers(const std::string& name) const {
  return has(name) ? value(name).get<std::vector<int64_t>>() : std::vector<int64_t>{};
}
std::vector<double> Args::numbers(const std::string& name) const {
  return has(name) ? value(name).get<std::vector<double>>() : std::vector<double>{};
}

json from_query(const std::vector<Arg>& declared, const std::map<std::string, std::string>& query,
                const std::vector<std::string>& ignored) {
  json out = json::object();
  for (const auto& [key, text] : query) {
    // Parsed under the name given; Args maps an old name to its new one.
    auto a = std::find_if(declared.begin(), declared.end(), [&key = key](const Arg& d) { return answers_to(d, key); });
    // A transport's key that the command declares itself is the command's.
    if (a == declared.end() && std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
    if (a == declared.end()) {
      out[key] = text;  // refused as unknown by the check
      continue;
    }
    switch (a->type) {
      case Arg::Type::kInteger: {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) {
          out[key] = v;
          break;
        }
        // "1.0": a whole number written as a float, as JSON bodies may send it.
        char* stop = nullptr;
        const double d = std::strtod(text.c_str(), &stop);
        out[key] = !text.empty() && stop == text.c_str() + text.size() ? json(d) : json(text);
        break;
      }
      case Arg::Type::kNumber: {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        out[key] = !text.empty() && end == text.c_str() + text.size() ? json(v) : json(text);
        break;
      }
      case Arg::Type::kBoolean:
        out[key] = text == "true" || text == "1" || text.empty() ? json(true)
                   : text == "false" || text == "0"              ? json(false)
                                                                 : json(text);
        break;
      case Arg::Type::kStrings: {
        json items = json::array();
        size_t start = 0;
        while (start <= text.size()) {
          size_t end = text.find(',', start);
          if (end == std::string::npos) end = text.size();
          if (end > start) items.push_back(text.substr(start, end - start));
          start = end + 1;
        }
        out[key] = std::move(items);
        break;
      }
      case Arg::Type::kIntegers:
      case Arg::Type::kNumbers: {
        // "0,3" or "0.5,-1e-3": numbers split at commas; an item that does
        // not parse stays a string for the check to refuse.
        json items = json::array();
        size_t start = 0;
        while (start <= text.size()) {
          size_t end = text.find(',', start);
          if (end == std::string::npos) end = text.size();
          const std::string item = text.substr(start, end - start);
          const char* last = item.data() + item.size();
          if (!item.empty()) {
            if (a->type == Arg::Type::kIntegers) {
              int64_t v = 0;
              auto [stop, ec] = std::from_chars(item.data(), last, v);
              items.push_back(ec == std::errc() && stop == last ? json(v) : json(item));
            } else {
              double v = 0;
              auto [stop, ec] = std::from_chars(item.data(), last, v);
              items.push_back(ec == std::errc() && stop == last ? json(v) : json(item));
            }
          }
          start = end + 1;
        }
        out[key] = std::move(items);
        break;
      }
      case Arg::Type::kString:
        out[key] = text;
        break;
      case Arg::Type::kObject: {
        json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
        out[key] = parsed.is_discarded() ? json(text) : parsed;
        break;
      }
    }
  }
  return out;
}

}  // namespace nansense::server
