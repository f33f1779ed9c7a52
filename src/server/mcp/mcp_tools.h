// The MCP tools: the command table's MCP commands (commands.h), with input
// schemas written from their argument declarations. This file only turns
// replies into MCP content (text, structuredContent, captioned images).
#pragma once

#include <string>

#include "server/controller/controller.h"

namespace nansense::server::mcp {

// One tools/call outcome: MCP content blocks, the JSON for structuredContent
// (an object, or null) and whether it is a refusal the agent should read.
struct ToolResult {
  json content = json::array();
  json structured;
  bool is_error = false;
};

class Tools {
 public:
  explicit Tools(Controller& controller);

  // The tools/list result for a negotiated protocol revision ("2025-06-18").
  json list(const std::string& protocol_version) const;
  // The tools/call result. An unknown tool throws RpcError(kInvalidParams);
  // anything the tool refuses (bad arguments included) is an isError result.
  // `visitor`: who calls (VisitorScope): the MCP session's visitor.
  json call(const std::string& name, const json& arguments, const std::string& protocol_version,
            const std::string& visitor = "") const;

 private:
  Controller& controller_;
};

// What the server's initialize result tells an agent about where to start.
extern const char* const kInstructions;

}  // namespace nansense::server::mcp
