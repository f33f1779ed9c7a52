#include "server/mcp/jsonrpc.h"

namespace nansense::server::mcp {

Message parse_message(const json& value, json& id_out) {
  id_out = nullptr;
  if (!value.is_object()) throw RpcError(kInvalidRequest, "a JSON-RPC message must be an object");
  if (value.contains("id")) {
    const json& id = value["id"];
    // MCP forbids null ids; JSON-RPC allows only strings and numbers.
    if (!id.is_string() && !id.is_number_integer()) {
      throw RpcError(kInvalidRequest, "\"id\" must be a string or an integer");
    }
    id_out = id;
  }
  auto version = value.find("jsonrpc");
  if (version == value.end() || *version != "2.0") {
    throw RpcError(kInvalidRequest, "\"jsonrpc\" must be \"2.0\"");
  }
  Message m;
  m.id = id_out;
  auto method = value.find("method");
  if (method == value.end()) {
    if (!value.contains("id") || (value.contains("result") == value.contains("error"))) {
      throw RpcError(kInvalidRequest,
                     "a message needs \"method\" (a request or notification) or an \"id\" with "
                     "\"result\" or \"error\" (a response)");
    }
    m.kind = Message::Kind::kResponse;
    return m;
  }
  if (!method->is_string()) throw RpcError(kInvalidRequest, "\"method\" must be a string");
  m.method = method->get<std::string>();
  m.kind = value.contains("id") ? Message::Kind::kRequest : Message::Kind::kNotification;
  if (auto params = value.find("params"); params != value.end()) m.params = *params;
  return m;
}

json result_reply(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json error_reply(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace nansense::server::mcp
