// JSON-RPC 2.0 framing for the MCP endpoint: message classification, replies
// and the standard error codes.
#pragma once

#include <stdexcept>
#include <string>

#include "server/controller/json_views.h"

namespace nansense::server::mcp {

enum ErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
};

// A request that fails as a whole; the endpoint answers it with a JSON-RPC
// error object carrying `code` and the message.
class RpcError : public std::runtime_error {
 public:
  RpcError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  json id;  // string or integer for requests and responses
  std::string method;
  json params;  // as sent (null when absent); methods check it is an object
};

// Classifies one JSON-RPC message. Throws RpcError(kInvalidRequest) for
// anything that is not a well-formed request, notification or response;
// `id_out` then holds the id when one could be read (else null).
Message parse_message(const json& value, json& id_out);

json result_reply(const json& id, json result);
json error_reply(const json& id, int code, const std::string& message);

// Serialises a reply; invalid UTF-8 in strings is replaced, never thrown.
std::string dump(const json& value);

}  // namespace nansense::server::mcp
