// The MCP tools: one entry per Controller command or query, each with the JSON
// schema and description an agent reads, and a handler that only converts
// arguments in and results out.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/controller.h"
#include "server/mcp/arguments.h"

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
  json call(const std::string& name, const json& arguments, const std::string& protocol_version) const;

  struct Tool {
    std::string name;
    std::string title;
    std::string description;
    json input_schema;
    bool read_only = true;
    std::function<ToolResult(Controller&, const Arguments&)> handle;
  };

 private:
  Controller& controller_;
  std::vector<Tool> tools_;
};

// What the server's initialize result tells an agent about where to start.
extern const char* const kInstructions;

}  // namespace nansense::server::mcp
