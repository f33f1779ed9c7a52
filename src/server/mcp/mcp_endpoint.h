// MCP over streamable HTTP at /mcp: JSON-RPC 2.0 in POST bodies, replies as
// application/json (or a one-event SSE stream for clients that accept only
// that), sessions issued at initialize, protocol revisions negotiated per
// session. The Server's Host/Origin/token checks run before this sees a request.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "server/controller/controller.h"
#include "server/http/http_server.h"
#include "server/mcp/mcp_tools.h"

namespace nansense::server::mcp {

// Newest first; an unknown requested revision is answered with the first.
extern const std::vector<std::string> kProtocolVersions;

class Endpoint {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // Sessions unused for longer than `idle_timeout` are dropped (a request
  // naming one gets 404, on which clients start a new session); at most
  // kMaxSessions live at once, the least recently used going first.
  // `clock`: the time source (tests pass their own).
  explicit Endpoint(Controller& controller, std::chrono::milliseconds idle_timeout = std::chrono::hours(1),
                    Clock clock = std::chrono::steady_clock::now);

  static constexpr size_t kMaxSessions = 1000;

  // Any request to /mcp: POST carries messages, DELETE ends a session, other
  // methods get 405 (no server-initiated stream is offered on GET).
  HttpResponse handle(const HttpRequest& request);

  size_t session_count() const;

 private:
  struct Session {
    std::string protocol_version;
    std::chrono::steady_clock::time_point last_used;
  };

  HttpResponse post(const HttpRequest& request);
  HttpResponse end_session(const HttpRequest& request);
  // A new session for an initialize request, and its reply.
  HttpResponse initialize(const json& message, bool sse);
  // The reply to one message, or null for a notification or a response.
  // `visitor`: the MCP session's visitor ("mcp:<session id>"): on a locked
  // session each MCP session has probes of its own (VisitorScope).
  json dispatch(const json& message, const std::string& protocol_version, const std::string& visitor);
  json call_method(const std::string& method, const json& params, const std::string& protocol_version,
                   const std::string& visitor);
  // The session's negotiated revision, or a refusal (400 missing, 404 unknown).
  std::variant<std::string, HttpResponse> session_version(const HttpRequest& request);
  // Drops the sessions idle for longer than idle_timeout_; under mu_.
  void drop_idle(std::chrono::steady_clock::time_point now);

  Tools tools_;
  std::chrono::milliseconds idle_timeout_;
  Clock clock_;
  mutable std::mutex mu_;
  std::map<std::string, Session> sessions_;
};

}  // namespace nansense::server::mcp
