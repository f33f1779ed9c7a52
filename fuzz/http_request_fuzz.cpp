// Raw bytes as a client sends them on one connection: Beast's request parser
// with the connection's limits (server::parse_request), the lane classifier
// (which reads the bodies of POSTs to find the requests that wait), then the
// Server's own handler: Host/Origin/content-type checks, the REST routes and
// their argument checking, MCP, the WebSocket upgrade and the web files.
// Up to four pipelined requests per input, as a kept-alive connection reads
// them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/served_session.h"
#include "server/http/waiting_requests.h"

using namespace nansense;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::served_server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& server = fuzz::served_server();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 4 && !bytes.empty(); ++i) {
    const auto parsed = server::parse_request(bytes);
    if (parsed.outcome == server::ParsedRequest::Outcome::kIncomplete) break;
    if (parsed.outcome == server::ParsedRequest::Outcome::kRefused) {
      fuzz::check_response(parsed.refusal, "refused request");
      break;
    }
    (void)server::lane_of(parsed.request);
    fuzz::check_response(server.handle(parsed.request), "request");
    if (parsed.consumed == 0) break;
    bytes.remove_prefix(parsed.consumed);
  }
  return 0;
}
