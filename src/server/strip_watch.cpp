#include "server/strip_watch.h"

#include <limits>
#include <stdexcept>

namespace nansense::server {

namespace {

const char* kExpected =
    "expected {\"type\":\"watch\",\"strips\":[{\"layer\":\"<name>\",\"kind\":\"activation\"|\"gradient\","
    "\"sample\":<integer >= 0>,\"average\":<bool, optional>,\"values\":\"unchanged\"|\"abs\"|\"square\" (optional)}, ...]}";

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument(what + "; " + kExpected);
}

std::string type_name(const json& v) { return v.type_name(); }

// A value for a message, cut short: a client may send anything.
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

WatchedStrip parse_entry(const json& entry, size_t index) {
  const std::string where = "strips[" + std::to_string(index) + "]";
  if (!entry.is_object()) refuse(where + " must be an object, got " + type_name(entry));
  for (const auto& [key, _] : entry.items()) {
    if (key != "layer" && key != "kind" && key != "sample" && key != "average" && key != "values") {
      refuse(where + " has an unknown field " + shown(json(key)) + " (fields: layer, kind, sample, average, values)");
    }
  }
  WatchedStrip out;
  auto layer = entry.find("layer");
  if (layer == entry.end()) refuse(where + " lacks \"layer\"");
  if (!layer->is_string() || layer->get_ref<const std::string&>().empty()) {
    refuse(where + ".layer must be a non-empty string, got " + shown(*layer));
  }
  out.layer = layer->get<std::string>();

  auto kind = entry.find("kind");
  if (kind == entry.end()) refuse(where + " lacks \"kind\"");
  if (!kind->is_string() || (*kind != "activation" && *kind != "gradient")) {
    refuse(where + ".kind must be \"activation\" or \"gradient\", got " + shown(*kind));
  }
  out.kind = kind->get<std::string>();

  auto sample = entry.find("sample");
  if (sample == entry.end()) refuse(where + " lacks \"sample\"");
  const bool in_range =
      (sample->is_number_unsigned() &&
       sample->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
      (sample->is_number_integer() && !sample->is_number_unsigned() && sample->get<int64_t>() >= 0);
  if (!in_range) refuse(where + ".sample must be an integer >= 0, got " + shown(*sample));
  out.options.sample = sample->get<int64_t>();

  if (auto average = entry.find("average"); average != entry.end()) {
    if (!average->is_boolean()) refuse(where + ".average must be true or false, got " + shown(*average));
    out.options.average = average->get<bool>();
  }
  if (auto values = entry.find("values"); values != entry.end()) {
    if (!values->is_string()) refuse(where + ".values must be a string, got " + shown(*values));
    try {
      out.options.values = render::parse_values(values->get<std::string>());
    } catch (const std::invalid_argument&) {
      refuse(where + ".values must be \"unchanged\", \"abs\" or \"square\", got " + shown(*values));
    }
  }
  return out;
}

}  // namespace

std::vector<WatchedStrip> parse_watch_message(const std::string& text) {
  json message = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) refuse("the message is not JSON");
  if (!message.is_object()) refuse("the message must be a JSON object, got " + type_name(message));
  auto type = message.find("type");
  if (type == message.end() || !type->is_string()) refuse("the message lacks a string \"type\"");
  if (*type != "watch") {
    refuse("unknown message type " + shown(*type) + " (the only type a page sends is \"watch\")");
  }
  for (const auto& [key, _] : message.items()) {
    if (key != "type" && key != "strips") {
      refuse("unknown field " + shown(json(key)) + " in a watch message (fields: type, strips)");
    }
  }
  auto strips = message.find("strips");
  if (strips == message.end()) refuse("the watch message lacks \"strips\"");
  if (!strips->is_array()) refuse("\"strips\" must be an array, got " + type_name(*strips));
  if (strips->size() > kMaxWatchedStrips) {
    refuse("too many strips: " + std::to_string(strips->size()) + " listed, at most " +
           std::to_string(kMaxWatchedStrips) + " may be watched");
  }
  std::vector<WatchedStrip> out;
  out.reserve(strips->size());
  for (size_t i = 0; i < strips->size(); ++i) out.push_back(parse_entry((*strips)[i], i));
  return out;
}

json to_json(const WatchedStrip& strip) {
  return {{"layer", strip.layer},
          {"kind", strip.kind},
          {"sample", strip.options.sample},
          {"average", strip.options.average},
          {"values", std::string(render::to_string(strip.options.values))}};
}

std::string encode_strip_frame(const json& info, const std::string& png) {
  json header = info;
  header["type"] = "strip";
  const std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  const auto n = static_cast<uint32_t>(text.size());
  std::string frame;
  frame.reserve(4 + text.size() + png.size());
  frame += static_cast<char>((n >> 24) & 0xff);
  frame += static_cast<char>((n >> 16) & 0xff);
  frame += static_cast<char>((n >> 8) & 0xff);
  frame += static_cast<char>(n & 0xff);
  frame += text;
  frame += png;
  return frame;
}

}  // namespace nansense::server
