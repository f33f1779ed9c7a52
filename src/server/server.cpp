#include "server/server.h"

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>

#include "server/http/api_routes.h"
#include "server/banner.h"
#include "server/http/static_assets.h"
#include "server/http/waiting_requests.h"

namespace nansense::server {

namespace {

// "localhost:8080" -> "localhost", "[::1]:8080" -> "::1"
std::string host_without_port(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string::npos ? host : host.substr(1, close - 1);
  }
  auto colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) return host.substr(0, colon);
  return host;
}

// "http://localhost:8080" -> "localhost:8080"
std::string origin_authority(const std::string& origin) {
  auto scheme = origin.find("://");
  return scheme == std::string::npos ? origin : origin.substr(scheme + 3);
}

// 128 random bits as 32 hex digits: the token, and each visitor's id (made
// for every cookie-less request to a locked session, so four draws, not 32).
std::string random_token() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int word = 0; word < 4; ++word) {
    uint32_t bits = rd();
    for (int i = 0; i < 8; ++i, bits >>= 4) token += hex[bits & 0xf];
  }
  return token;
}

std::string cookie_value(const std::string& cookies, const std::string& name) {
  size_t pos = 0;
  while (pos < cookies.size()) {
    size_t end = cookies.find(';', pos);
    if (end == std::string::npos) end = cookies.size();
    std::string part = cookies.substr(pos, end - pos);
    part.erase(0, part.find_first_not_of(' '));
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    pos = end + 1;
  }
  return "";
}

// A visitor id this server could have issued: 32 lowercase hex digits (what
// random_token makes). Anything else is not looked up at all.
bool well_formed_visitor(const std::string& id) {
  return id.size() == 32 &&
         std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The visitor a request comes from on a locked session: its nansense_visitor
// cookie when well formed, else a fresh random id (`issued` set: the reply
// sets the cookie). An id is only ever its holder's own slot: a made-up one
// is simply a new visitor.
std::string visitor_of(const HttpRequest& request, bool& issued) {
  std::string id = cookie_value(request.header("cookie"), "nansense_visitor");
  issued = !well_formed_visitor(id);
  return issued ? random_token() : id;
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is looked at whatever the contents, so
  // the time taken says nothing about how much of a guess was right.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool is_loopback_host(const std::string& host) {
  const std::string h = host_without_port(host);
  if (h == "localhost") return true;
  // An address, not a name: "127.attacker.example" must not pass as loopback.
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(h, ec);
  return !ec && address.is_loopback();
}

Server::Server(detail::SessionPort& session)
    : controller_(session),
      http_([this](const HttpRequest& r) { return handle(r); },
            [this](std::shared_ptr<WebSocketPeer> peer, const HttpRequest& request) {
              // The page's visitor (its own probe view on a locked session);
              // a socket without the cookie gets the shared view.
              bool issued = false;
              std::string visitor = controller_.locked() ? visitor_of(request, issued) : "";
              return push_.add(std::move(peer), issued ? "" : visitor);
            },
            HttpServerLimits{}, lane_of),
      push_(controller_) {}

Server::~Server() { http_.stop(); }

bool Server::start(const ServeOptions& options) {
  host_ = options.host();
  loopback_ = is_loopback_host(host_);
  // A locked session (Session::lock, before serve) bound to a non-loopback
  // address is a public playground: nothing a visitor sends can change the
  // run or what another visitor sees, so it is served without a token. Any
  // other non-loopback bind requires one. The lock is one way: it cannot be
  // lifted while served so.
  if (!loopback_ && !controller_.locked()) token_ = random_token();
  public_ = !loopback_ && token_.empty();
  const ServeLimits& limits = options.limits();
  if (options.mcp()) mcp_ = std::make_unique<mcp::Endpoint>(controller_, limits.mcp_session_idle_timeout());
  HttpServerLimits http_limits;
  http_limits.max_connections = static_cast<size_t>(std::max(1, limits.max_connections()));
  http_limits.max_waiting = std::max(1, limits.max_waiting_requests());
  http_limits.request_timeout = limits.request_timeout();
  try {
    http_.set_limits(http_limits);
    http_.start(host_ == "localhost" ? "127.0.0.1" : host_, options.port());
  } catch (const std::exception& e) {
    std::cerr << "[nansense] " << e.what() << " — training continues without the UI\n";
    return false;
  }
  port_ = http_.port();
  if (options.print_banner()) print_banner(url(), mcp_ ? mcp_install_line() : "");
  if (public_) {
    std::cerr << "[nansense] serving a locked session on " << host_ << ":" << port_
              << " without a token: anyone who can reach it may browse it (nothing they send changes the run)\n";
  }
  if (options.open_browser()) open_browser(url());
  return true;
}

std::string Server::url() const {
  // A wildcard bind is reachable on loopback; show the address that works here.
  std::string shown = (host_ == "0.0.0.0" || host_ == "::") ? "127.0.0.1" : host_;
  if (shown.find(':') != std::string::npos) shown = "[" + shown + "]";
  std::string url = "http://" + shown + ":" + std::to_string(port_) + "/";
  if (!token_.empty()) url += "?token=" + token_;
  return url;
}

std::string Server::mcp_install_line() const {
  std::string endpoint = url();
  endpoint = endpoint.substr(0, endpoint.find('?')) + "mcp";
  std::string line = "claude mcp add --transport http nansense " + endpoint;
  if (!token_.empty()) line += " --header \"Authorization: Bearer " + token_ + "\"";
  return line;
}

std::optional<HttpResponse> Server::refuse(const HttpRequest& request) const {
  const std::string& host = request.header("host");
  const std::string& origin = request.header("origin");
  if (loopback_) {
    if (!host.empty() && !is_loopback_host(host)) {
      return error_response(403, "Host \"" + host +
                                     "\" refused: this server answers loopback names only "
                                     "(DNS-rebinding protection); use " +
                                     url());
    }
    if (!origin.empty() && !is_loopback_host(origin_authority(origin))) {
      return error_response(403, "Origin \"" + origin + "\" refused: only pages served from this machine may call it");
    }
  } else if (!origin.empty() && origin_authority(origin) != host) {
    return error_response(403, "Origin \"" + origin + "\" refused: cross-site requests are not allowed");
  }
  // A cross-site form or sandboxed frame can POST text/plain without a CORS
  // preflight; a JSON content type cannot be sent that way.
  if (request.method == "POST" && request.header("content-type").rfind("application/json", 0) != 0) {
    return error_response(415, "POST requests must have Content-Type: application/json");
  }
  if (loopback_ || public_) return std::nullopt;
  std::string presented;
  if (auto q = request.query.find("token"); q != request.query.end()) presented = q->second;
  if (presented.empty()) {
    const std::string& auth = request.header("authorization");
    if (auth.rfind("Bearer ", 0) == 0) presented = auth.substr(7);
  }
  if (presented.empty()) presented = cookie_value(request.header("cookie"), "nansense_token");
  if (presented.empty() || !constant_time_equal(presented, token_)) {
    return error_response(401,
                          "a token is required on a non-loopback bind: open the URL printed in the "
                          "training log (it ends with ?token=...)");
  }
  return std::nullopt;
}

HttpResponse Server::handle(const HttpRequest& request) {
  if (auto refused = refuse(request)) return *refused;
  // On a locked session every browser is a visitor with probes of its own,
  // named by a random cookie the server issues (HttpOnly: no script reads it;
  // SameSite=Strict: no other site's page sends it).
  bool issued = false;
  const std::string visitor = controller_.locked() ? visitor_of(request, issued) : "";
  HttpResponse res;
  if (request.path.rfind("/api/", 0) == 0) {
    res = handle_api(controller_, request, visitor);
  } else if (request.path == "/mcp") {
    res = mcp_ ? mcp_->handle(request)
               : error_response(404, "the MCP endpoint is switched off for this session (ServeOptions().mcp(false))");
  } else if (request.path == "/ws") {
    if (is_websocket_upgrade(request)) {
      res.accept_websocket = true;
    } else {
      res = error_response(426, "/ws is the UI's WebSocket push channel: connect with a WebSocket client");
      res.headers.emplace_back("Upgrade", "websocket");
    }
  } else if (auto file = serve_web_file(request)) {
    res = std::move(*file);
  } else if (request.method != "GET" && request.method != "HEAD") {
    res = error_response(405, request.path + " accepts GET");
    res.headers.emplace_back("Allow", "GET");
  } else {
    res = error_response(404, "not found: " + request.path);
  }
  if (issued) {
    res.headers.emplace_back("Set-Cookie", "nansense_visitor=" + visitor + "; Path=/; HttpOnly; SameSite=Strict");
  }
  if (!token_.empty() && request.query.count("token")) {
    res.headers.emplace_back("Set-Cookie", "nansense_token=" + token_ + "; Path=/; HttpOnly; SameSite=Strict");
  }
  return res;
}

}  // namespace nansense::server
