// The strip-push protocol over /ws: a page's "watch" message (the strips it
// shows) and the frames that carry rendered strips back to it.
#pragma once

#include <string>
#include <vector>

#include "render/strip.h"
#include "server/controller/json_views.h"

namespace nansense::server {

// One strip a page watches: what GET /api/render/strip would be asked.
struct WatchedStrip {
  std::string layer;
  std::string kind;  // "activation" or "gradient"
  render::StripOptions options;
};

// The most strips one watch message may list.
constexpr size_t kMaxWatchedStrips = 512;

// Parses a client's text message, which must be
//   {"type":"watch","strips":[{"layer":..,"kind":..,"sample":..,"average":..,"values":..}, ...]}
// each strip checked against render_strip's declared arguments (defaults
// included). Throws std::invalid_argument saying what is wrong and what is
// expected.
std::vector<WatchedStrip> parse_watch_message(const std::string& text);

// {"layer","kind","sample","average","values"}: how strips_done names a strip.
json to_json(const WatchedStrip& strip);

// A binary strip frame: 4-byte big-endian header length N, N bytes of JSON
// header (`info` plus "type":"strip"), then the PNG bytes.
std::string encode_strip_frame(const json& info, const std::string& png);

}  // namespace nansense::server
