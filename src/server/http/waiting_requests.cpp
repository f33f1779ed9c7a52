#include "server/http/waiting_requests.h"

#include "server/controller/commands.h"

namespace nansense::server {

namespace {

// Whether `command` called with `arguments` (a JSON object, or null for
// none) waits: it declares timeout_seconds, the value (or its default) is
// above zero, and it is not a detached run (which returns at once).
bool waits(const Command& command, const json& arguments) {
  const json none = json::object();
  const json& given = arguments.is_object() ? arguments : none;
  for (const auto& arg : command.args) {
    if (arg.name == "detach" && given.contains("detach") && given["detach"] == true) return false;
  }
  for (const auto& arg : command.args) {
    if (arg.name != "timeout_seconds") continue;
    const json& value = given.contains(arg.name) && !given[arg.name].is_null() ? given[arg.name] : arg.fallback;
    return value.is_number() && value.get<double>() > 0;
  }
  return false;
}

json parse_or_null(const std::string& body) { return json::parse(body, nullptr, /*allow_exceptions=*/false); }

// One JSON-RPC message of an MCP POST.
bool message_waits(const json& message) {
  if (!message.is_object() || message.value("method", json()) != "tools/call") return false;
  const json params = message.value("params", json());
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) return false;
  const Command* command = find_command(params["name"].get<std::string>());
  return command && command->mcp && waits(*command, params.value("arguments", json()));
}

}  // namespace

bool may_wait(const HttpRequest& request) {
  if (request.method != "POST") return false;
  if (request.path == "/mcp") {
    const json body = parse_or_null(request.body);
    if (body.is_array()) {
      for (const auto& message : body) {
        if (message_waits(message)) return true;
      }
      return false;
    }
    return message_waits(body);
  }
  if (request.path.rfind("/api/", 0) != 0) return false;
  for (const auto& command : commands()) {
    if (!command.rest || command.rest->method != "POST" || command.rest->path != request.path) continue;
    const json body =
        request.body.find_first_not_of(" \t\r\n") == std::string::npos ? json::object() : parse_or_null(request.body);
    return !body.is_discarded() && waits(command, body);
  }
  return false;
}

Lane lane_of(const HttpRequest& request) {
  if ((request.method == "GET" || request.method == "HEAD") && request.path == "/api/status") return Lane::kStatus;
  return may_wait(request) ? Lane::kWait : Lane::kWorker;
}

}  // namespace nansense::server
