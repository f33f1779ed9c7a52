#include "server/mcp/mcp_endpoint.h"

#include <algorithm>
#include <random>

#include "server/mcp/jsonrpc.h"

#ifndef NANSENSE_VERSION
#define NANSENSE_VERSION "0"
#endif

namespace nansense::server::mcp {

const std::vector<std::string> kProtocolVersions = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

namespace {

// Revisions before this one allow JSON-RPC batches; 2025-06-18 removed them.
constexpr const char* kFirstWithoutBatches = "2025-06-18";

std::string known_versions() {
  std::string out;
  for (const auto& v : kProtocolVersions) out += (out.empty() ? "" : ", ") + v;
  return out;
}

std::string new_session_id() {
  std::random_device rd;
  const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) id += hex[rd() % 16];
  return id;
}

struct Accepts {
  bool json = false;
  bool sse = false;
};

// What the Accept header allows. The spec has clients list both types; a
// client that sends none gets JSON.
Accepts accepts(const std::string& header) {
  Accepts a;
  if (header.find_first_not_of(" \t") == std::string::npos) {
    a.json = true;
    return a;
  }
  size_t start = 0;
  while (start <= header.size()) {
    size_t end = header.find(',', start);
    if (end == std::string::npos) end = header.size();
    std::string type = header.substr(start, end - start);
    type = type.substr(0, type.find(';'));
    type.erase(0, type.find_first_not_of(" \t"));
    type.erase(type.find_last_not_of(" \t") + 1);
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    if (type == "application/json" || type == "application/*" || type == "*/*") a.json = true;
    if (type == "text/event-stream" || type == "text/*") a.sse = true;
    start = end + 1;
  }
  return a;
}

// A reply the transport refuses before any message is handled, as a
// JSON-RPC error with a null id so SDK clients surface its message.
HttpResponse refusal(unsigned status, int code, const std::string& message, const json& id = nullptr) {
  HttpResponse res;
  res.status = status;
  res.body = dump(error_reply(id, code, message));
  return res;
}

HttpResponse reply(const json& body, bool sse) {
  HttpResponse res;
  if (sse) {
    // One event carrying the whole reply, for clients that take only streams.
    res.content_type = "text/event-stream";
    res.body = "event: message\ndata: " + dump(body) + "\n\n";
  } else {
    res.body = dump(body);
  }
  return res;
}

HttpResponse accepted() {
  HttpResponse res;
  res.status = 202;
  return res;
}

bool is_initialize(const json& message) {
  return message.is_object() && message.contains("method") && message["method"] == "initialize";
}

}  // namespace

Endpoint::Endpoint(Controller& controller, std::chrono::milliseconds idle_timeout, Clock clock)
    : tools_(controller), idle_timeout_(idle_timeout), clock_(std::move(clock)) {}

void Endpoint::drop_idle(std::chrono::steady_clock::time_point now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = now - it->second.last_used > idle_timeout_ ? sessions_.erase(it) : std::next(it);
  }
}

size_t Endpoint::session_count() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

HttpResponse Endpoint::handle(const HttpRequest& request) {
  if (request.method == "POST") return post(request);
  if (request.method == "DELETE") return end_session(request);
  auto res = refusal(405, kInvalidRequest,
                     "/mcp takes POST (JSON-RPC messages) and DELETE (end a session), not " + request.method +
                         "; this server opens no event stream on GET");
  res.headers.emplace_back("Allow", "POST, DELETE");
  return res;
}

HttpResponse Endpoint::post(const HttpRequest& request) {
  const Accepts accept = accepts(request.header("accept"));
  if (!accept.json && !accept.sse) {
    return refusal(
        406, kInvalidRequest,
        "the Accept header must allow application/json or text/event-stream, got \"" + request.header("accept") + "\"");
  }
  const bool sse = !accept.json;
  json body;
  try {
    body = json::parse(request.body);
  } catch (const json::exception& e) {
    return refusal(400, kParseError, std::string("malformed JSON: ") + e.what());
  }
  const bool batch = body.is_array();
  if (batch) {
    if (body.empty()) return refusal(400, kInvalidRequest, "an empty JSON-RPC batch: send at least one message");
    if (std::any_of(body.begin(), body.end(), is_initialize)) {
      return refusal(400, kInvalidRequest, "initialize must be sent on its own, not in a batch");
    }
  } else if (is_initialize(body)) {
    return initialize(body, sse);
  }

  auto version_or = session_version(request);
  if (auto* refused = std::get_if<HttpResponse>(&version_or)) return *refused;
  const std::string version = std::get<std::string>(version_or);
  // Each MCP session is a visitor of its own (its probes on a locked session).
  const std::string visitor = "mcp:" + request.header("mcp-session-id");

  if (batch) {
    if (version >= kFirstWithoutBatches) {
      return refusal(
          400, kInvalidRequest,
          "JSON-RPC batches are not part of MCP " + version + " (removed in 2025-06-18): send one message per POST");
    }
    json replies = json::array();
    for (const auto& message : body) {
      json r = dispatch(message, version, visitor);
      if (!r.is_null()) replies.push_back(std::move(r));
    }
    return replies.empty() ? accepted() : reply(replies, sse);
  }
  json r = dispatch(body, version, visitor);
  if (r.is_null()) return accepted();
  // A message that is not JSON-RPC at all is refused at the HTTP level too.
  if (r.contains("error") && r["error"]["code"] == kInvalidRequest) {
    return refusal(400, kInvalidRequest, r["error"]["message"], r["id"]);
  }
  return reply(r, sse);
}

HttpResponse Endpoint::initialize(const json& message, bool sse) {
  json id;
  Message m;
  try {
    m = parse_message(message, id);
  } catch (const RpcError& e) {
    return refusal(400, e.code(), e.what(), id);
  }
  if (m.kind != Message::Kind::kRequest) {
    return refusal(400, kInvalidRequest, "initialize must be a request with an id");
  }
  if (!m.params.is_object() || !m.params.contains("protocolVersion") || !m.params["protocolVersion"].is_string()) {
    return reply(error_reply(m.id, kInvalidParams,
                             "initialize needs params.protocolVersion (a string such as \"" + kProtocolVersions[0] +
                                 "\"); supported: " + known_versions()),
                 sse);
  }
  const std::string requested = m.params["protocolVersion"];
  const bool supported =
      std::find(kProtocolVersions.begin(), kProtocolVersions.end(), requested) != kProtocolVersions.end();
  const std::string version = supported ? requested : kProtocolVersions[0];

  const std::string session_id = new_session_id();
  {
    std::lock_guard lock(mu_);
    const auto now = clock_();
    drop_idle(now);
    if (sessions_.size() >= kMaxSessions) {
      auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
      });
      sessions_.erase(oldest);
    }
    sessions_[session_id] = Session{version, now};
  }
  json server_info = {{"name", "nansense"}, {"version", NANSENSE_VERSION}};
  if (version >= "2025-06-18") server_info["title"] = "NaNsense training debugger";
  json result = {{"protocolVersion", version},
                 {"capabilities", {{"tools", {{"listChanged", false}}}}},
                 {"serverInfo", server_info},
                 {"instructions", kInstructions}};
  HttpResponse res = reply(result_reply(m.id, std::move(result)), sse);
  res.headers.emplace_back("Mcp-Session-Id", session_id);
  return res;
}

std::variant<std::string, HttpResponse> Endpoint::session_version(const HttpRequest& request) {
  const std::string& id = request.header("mcp-session-id");
  if (id.empty()) {
    return refusal(400, kInvalidRequest,
                   "missing Mcp-Session-Id header: send initialize first, then repeat the Mcp-Session-Id it "
                   "returned on every request");
  }
  std::string version;
  {
    std::lock_guard lock(mu_);
    const auto now = clock_();
    drop_idle(now);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return refusal(404, kInvalidRequest,
                     "unknown, ended or expired MCP session \"" + id + "\" (sessions idle for " +
                         std::to_string(idle_timeout_.count()) + " ms are dropped): initialize a new one");
    }
    it->second.last_used = now;
    version = it->second.protocol_version;
  }
  const std::string& stated = request.header("mcp-protocol-version");
  if (!stated.empty() && stated != version) {
    const bool known = std::find(kProtocolVersions.begin(), kProtocolVersions.end(), stated) != kProtocolVersions.end();
    return refusal(
        400, kInvalidRequest,
        known ? "MCP-Protocol-Version " + stated + " is not the revision this session negotiated (" + version + ")"
              : "unsupported MCP-Protocol-Version \"" + stated + "\"; supported: " + known_versions());
  }
  return version;
}

HttpResponse Endpoint::end_session(const HttpRequest& request) {
  const std::string& id = request.header("mcp-session-id");
  if (id.empty())
    return refusal(400, kInvalidRequest, "DELETE /mcp needs the Mcp-Session-Id header of the session to end");
  std::lock_guard lock(mu_);
  drop_idle(clock_());
  if (sessions_.erase(id) == 0) {
    return refusal(404, kInvalidRequest, "unknown or ended MCP session \"" + id + "\"");
  }
  HttpResponse res;
  res.body = "{}";
  return res;
}

json Endpoint::dispatch(const json& message, const std::string& version, const std::string& visitor) {
  json id;
  Message m;
  try {
    m = parse_message(message, id);
  } catch (const RpcError& e) {
    return error_reply(id, e.code(), e.what());
  }
  // Notifications (initialized, cancelled, ...) and responses need no answer.
  if (m.kind != Message::Kind::kRequest) return nullptr;
  try {
    return result_reply(m.id, call_method(m.method, m.params, version, visitor));
  } catch (const RpcError& e) {
    return error_reply(m.id, e.code(), e.what());
  } catch (const std::exception& e) {
    return error_reply(m.id, kInternalError, std::string("internal error in nansense: ") + e.what());
  }
}

json Endpoint::call_method(const std::string& method, const json& params, const std::string& version,
                           const std::string& visitor) {
  if (!params.is_null() && !params.is_object()) {
    throw RpcError(kInvalidParams, "params must be an object (named parameters), got " + dump(params));
  }
  if (method == "ping") return json::object();
  if (method == "tools/list") {
    if (params.is_object() && params.contains("cursor") && !params["cursor"].is_null()) {
      throw RpcError(kInvalidParams, "unknown cursor: tools/list returns every tool in one page");
    }
    return tools_.list(version);
  }
  if (method == "tools/call") {
    if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
      throw RpcError(kInvalidParams, "tools/call needs params.name, a tool name from tools/list");
    }
    json arguments = params.value("arguments", json());
    if (!arguments.is_null() && !arguments.is_object()) {
      throw RpcError(kInvalidParams,
                     "tools/call params.arguments must be an object of named arguments, got " + dump(arguments));
    }
    return tools_.call(params["name"], arguments, version, visitor);
  }
  throw RpcError(kMethodNotFound,
                 "method \"" + method + "\" not found: this server offers initialize, ping, tools/list and tools/call");
}

}  // namespace nansense::server::mcp
