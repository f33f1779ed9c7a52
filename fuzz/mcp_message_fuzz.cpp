// A POST to /mcp: a JSON-RPC message or batch. The first byte says how it is
// sent: bit 0 in the MCP session initialized with 2025-03-26 (batches
// allowed) or the newest revision; bit 1 without a session id; bit 2 with
// an MCP-Protocol-Version header naming the session's revision; bit 3
// accepting only text/event-stream. The rest is the body. Then the lane
// classifier (which reads tools/call arguments) and the Server's handler.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/served_session.h"
#include "server/http/waiting_requests.h"

using namespace nansense;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::served_server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto& server = fuzz::served_server();
  const uint8_t how = data[0];
  auto request = fuzz::page_request("POST", "/mcp", std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  const bool batches = how & 1;
  if (!(how & 2)) {
    request.headers["mcp-session-id"] = batches ? fuzz::mcp_session_with_batches() : fuzz::mcp_session_newest();
  }
  if (how & 4) request.headers["mcp-protocol-version"] = batches ? "2025-03-26" : "2025-11-25";
  if (how & 8) request.headers["accept"] = "text/event-stream";
  (void)server::lane_of(request);
  const auto response = server.handle(request);
  fuzz::check_response(response, "MCP");
  // The fuzzer's own initialize requests can push ours out of the sessions
  // kept (at most 1000, least recently used first).
  if (response.status == 404 && !(how & 2)) fuzz::renew_mcp_sessions();
  return 0;
}
