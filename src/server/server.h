// The session's web server: HTTP transport, access checks, the REST API, the
// push channel, MCP and the page, wired to one Controller. It attaches to a
// session through the session's port and is kept alive by it (an Attachment).
#pragma once

#include <memory>
#include <string>

#include "nansense/options.h"
#include "server/controller/controller.h"
#include "server/http/http_server.h"
#include "server/mcp/mcp_endpoint.h"
#include "server/http/push_channel.h"
#include "session/session_port.h"

namespace nansense::server {

class Server final : public detail::Attachment {
 public:
  explicit Server(detail::SessionPort& session);
  ~Server() override;

  // Binds, prints the banner and opens a browser as the options say. On a bind
  // failure prints one line saying why and returns false.
  bool start(const ServeOptions& options);
  // "http://127.0.0.1:8080/" (with ?token=... on a non-loopback bind).
  std::string url() const override;
  // Saves every recording (the session's close()).
  void session_closed() override { controller_.recordings().finish_recordings(); }
  // The command that adds this session's /mcp endpoint to Claude Code.
  std::string mcp_install_line() const;
  Controller& controller() { return controller_; }
  // Answers one parsed request as the transport does (access checks, then
  // the API, MCP, the push channel's upgrade or a web file), in-process: the
  // fuzz harnesses' entry, after parse_request() and lane_of().
  HttpResponse handle(const HttpRequest& request);

 private:
  // Host/Origin checks against DNS rebinding, and the token on remote binds.
  std::optional<HttpResponse> refuse(const HttpRequest& request) const;

  Controller controller_;
  std::unique_ptr<mcp::Endpoint> mcp_;  // null with ServeOptions().mcp(false)
  HttpServer http_;
  // Destroyed before http_: its peers live on http_'s I/O context.
  PushChannel push_;
  std::string host_;
  bool loopback_ = true;
  bool public_ = false;  // a locked session on a non-loopback bind: no token (start())
  std::string token_;
  int port_ = 0;
};

// Whether two strings are equal, in a time that depends on their lengths
// only (the token check: no timing tells an attacker a correct prefix).
bool constant_time_equal(const std::string& a, const std::string& b);

// Whether `host` (an address or host name, no port) names this machine only.
bool is_loopback_host(const std::string& host);

}  // namespace nansense::server
