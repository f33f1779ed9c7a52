// The arguments of one REST command: the first byte picks the route (low
// seven bits, over the command table's routes in order), the rest is a
// POST's JSON body, or with the high bit set a GET's query string (read by
// the transport's own parser). Then the lane classifier and the Server's
// handler: arguments checked against the command's declarations, the
// command run against the finished session.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/served_session.h"
#include "server/controller/commands.h"
#include "server/http/waiting_requests.h"

using namespace nansense;

namespace {

const std::vector<const server::Command*>& routes(const std::string& method) {
  static std::vector<const server::Command*> get, post;
  if (get.empty()) {
    for (const auto& c : server::commands()) {
      if (c.rest) (c.rest->method == "GET" ? get : post).push_back(&c);
    }
  }
  return method == "GET" ? get : post;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::served_server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto& server = fuzz::served_server();
  const bool get = data[0] & 0x80;
  const auto& table = routes(get ? "GET" : "POST");
  const server::Command& command = *table[(data[0] & 0x7f) % table.size()];
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  server::HttpRequest request;
  if (get) {
    // The query as a browser sends it: the transport splits and decodes it.
    const auto parsed =
        server::parse_request("GET " + command.rest->path + "?" + rest + " HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n");
    if (parsed.outcome != server::ParsedRequest::Outcome::kRequest) return 0;
    request = parsed.request;
  } else {
    request = fuzz::page_request("POST", command.rest->path, std::move(rest));
  }
  (void)server::lane_of(request);
  fuzz::check_response(server.handle(request), command.name);
  return 0;
}
