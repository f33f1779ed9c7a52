#include "server/http/strip_watch.h"

#include <stdexcept>

#include "server/controller/commands.h"

namespace nansense::server {

namespace {

const char* kExpected =
    "expected {\"type\":\"watch\",\"strips\":[{…}, ...]} where each strip takes render_strip's arguments "
    "(layer, kind, sample, average, values)";

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument(what + "; " + kExpected); }

std::string type_name(const json& v) { return v.type_name(); }

// A value for a message, cut short: a client may send anything.
std::string shown(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// One entry, checked against render_strip's declared arguments: a watched
// strip is exactly what GET /api/render/strip would be asked (without the
// snapshot's sequence).
WatchedStrip parse_entry(const json& entry, size_t index) {
  const std::string where = "strips[" + std::to_string(index) + "]";
  if (!entry.is_object()) refuse(where + " must be an object, got " + type_name(entry));
  // Every snapshot's strips are pushed: a watched strip names none.
  if (entry.contains("sequence")) refuse(where + ": a watched strip takes no \"sequence\"");
  try {
    const Args args(args_of("render_strip"), entry);
    WatchedStrip out;
    out.layer = args.string("layer");
    out.kind = args.string("kind");
    out.options.sample = args.integer("sample");
    out.options.average = args.boolean("average");
    out.options.values = render::parse_values(args.string("values"));
    return out;
  } catch (const Refusal& e) {
    refuse(where + ": " + e.what());
  }
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
