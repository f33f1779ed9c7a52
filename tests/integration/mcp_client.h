// A raw MCP client over loopback HTTP for the integration tests: one session,
// JSON-RPC requests and tool calls, and the helpers to read their results.
#pragma once

#include <map>
#include <string>

#include "integration/http_client.h"
#include "integration/wire_check.h"
#include "server/controller/commands.h"

namespace nansense::testing {

using json = nlohmann::json;

// The Accept header the spec has clients send.
inline const std::map<std::string, std::string> kAccept = {{"Accept", "application/json, text/event-stream"}};

// Standard base64 (the MCP image encoding) back to bytes; "" when malformed.
inline std::string base64_decode(const std::string& in) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : in) {
    if (c == '=') break;
    auto v = alphabet.find(c);
    if (v == std::string::npos) return "";
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

// One MCP session over raw HTTP.
class McpClient {
 public:
  explicit McpClient(int port) : port_(port) {}

  Reply post(const std::string& body, std::map<std::string, std::string> headers = kAccept) {
    if (!session_.empty() && !headers.count("Mcp-Session-Id")) headers["Mcp-Session-Id"] = session_;
    return http_request(port_, "POST", "/mcp", body, headers);
  }

  json initialize(const std::string& version = "2025-06-18") {
    json msg = {{"jsonrpc", "2.0"},
                {"id", 0},
                {"method", "initialize"},
                {"params",
                 {{"protocolVersion", version},
                  {"capabilities", json::object()},
                  {"clientInfo", {{"name", "mcp_protocol_test"}, {"version", "1"}}}}}};
    Reply r = http_request(port_, "POST", "/mcp", msg.dump(), kAccept);
    EXPECT_EQ(r.status, 200u) << r.body;
    session_ = r.headers["Mcp-Session-Id"];
    EXPECT_FALSE(session_.empty());
    json reply = r.json();
    Reply ack = post(json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump());
    EXPECT_EQ(ack.status, 202u) << ack.body;
    return reply;
  }

  // A request's whole JSON-RPC reply.
  json request(const std::string& method, const json& params = json::object()) {
    Reply r = post(json{{"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", params}}.dump());
    EXPECT_EQ(r.status, 200u) << r.body;
    json reply = r.json();
    EXPECT_EQ(reply["id"], id_);
    return reply;
  }

  // A tools/call result. Its structuredContent is checked against the
  // tool's declared reply (a refusal's against ToolError, pictures' against
  // McpImages).
  json tool(const std::string& name, const json& arguments = json::object()) {
    json reply = request("tools/call", {{"name", name}, {"arguments", arguments}});
    EXPECT_TRUE(reply.contains("result")) << reply.dump();
    const json& result = reply["result"];
    const auto* command = server::find_command(name);
    if (result.contains("structuredContent") && command) {
      bool images = false;
      for (const auto& block : result["content"]) images = images || block["type"] == "image";
      if (result.value("isError", false)) {
        expect_wire(result["structuredContent"], "ToolError");
      } else if (images) {
        expect_wire(result["structuredContent"], "McpImages");
      } else if (!command->reply.empty()) {
        expect_wire(result["structuredContent"], command->reply);
      }
    }
    return result;
  }

  // The JSON a tool returned in its first text block.
  json tool_json(const std::string& name, const json& arguments = json::object()) {
    json result = tool(name, arguments);
    EXPECT_FALSE(result["isError"].get<bool>()) << result.dump();
    return json::parse(result["content"][0]["text"].get<std::string>());
  }

  const std::string& session() const { return session_; }
  void set_session(std::string id) { session_ = std::move(id); }

 private:
  int port_;
  std::string session_;
  int id_ = 0;
};

// Every text block of a tool result, one per line.
inline std::string text_of(const json& result) {
  std::string all;
  for (const auto& block : result["content"]) {
    if (block["type"] == "text") all += block["text"].get<std::string>() + "\n";
  }
  return all;
}

}  // namespace nansense::testing
