// What clients can hold of the server (ServeLimits, docs/guide/security.md): waits run off the workers and are bounded,
// idle MCP sessions expire, a slow client runs out of time, connections and a WebSocket's queued frames are capped,
// incoming frames and bodies are bounded, and the access checks (token, static files) hold. No test sleeps to
// synchronise: each waits for the event it is about, with a bound that only ends a test gone wrong.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>

#include <condition_variable>
#include <functional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"
#include "server/controller/controller.h"
#include "server/http/http_server.h"
#include "server/mcp/mcp_endpoint.h"
#include "server/server.h"
#include "server/http/static_assets.h"
#include "server/http/waiting_requests.h"
#include "session/session_port.h"

namespace nansense::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

// A latch the tests open; waiting on it is bounded so a broken test ends.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds bound = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Replies collected from client threads, in the order they came.
class Replies {
 public:
  void add(Reply reply) {
    std::lock_guard lock(mu_);
    replies_.push_back(std::move(reply));
    cv_.notify_all();
  }
  // Waits (bounded) until at least `n` replies came; returns them.
  std::vector<Reply> at_least(size_t n, std::chrono::seconds bound = 30s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, bound, [&] { return replies_.size() >= n; });
    return replies_;
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return replies_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Reply> replies_;
};

// Everything a raw socket receives until the server closes it (or the bound
// passes: then `closed` is false). Asynchronous, as only those reads obey a
// deadline.
struct Received {
  std::string bytes;
  bool closed = false;
};
Received read_until_closed(asio::io_context& ioc, tcp::socket& socket, std::chrono::seconds bound = 30s) {
  Received out;
  beast::tcp_stream stream(std::move(socket));
  stream.expires_after(bound);
  char buffer[4096];
  std::function<void()> next = [&] {
    stream.async_read_some(asio::buffer(buffer), [&](beast::error_code ec, size_t n) {
      out.bytes.append(buffer, n);
      if (!ec) return next();
      out.closed = ec == asio::error::eof || ec == asio::error::connection_reset;
    });
  };
  next();
  ioc.restart();
  ioc.run();
  return out;
}

// Reads a WebSocket until it fails or closes (or the bound passes); returns
// the frames read and why reading ended.
std::pair<size_t, beast::error_code> read_ws_until_closed(asio::io_context& ioc,
                                                          websocket::stream<beast::tcp_stream>& ws,
                                                          std::chrono::seconds bound = 60s) {
  size_t frames = 0;
  beast::error_code end;
  beast::flat_buffer buffer;
  beast::get_lowest_layer(ws).expires_after(bound);
  std::function<void()> next = [&] {
    ws.async_read(buffer, [&](beast::error_code ec, size_t) {
      if (ec) {
        end = ec;
        return;
      }
      ++frames;
      buffer.clear();
      next();
    });
  };
  next();
  ioc.restart();
  ioc.run();
  return {frames, end};
}

tcp::socket connect(asio::io_context& ioc, int port) {
  tcp::socket socket(ioc);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  return socket;
}

// --- the HTTP server alone -------------------------------------------------

// A server whose "/wait" (wait lane) and "/busy" (a worker) requests block on
// a latch (and count themselves in), and whose other requests answer at once.
class BlockingServer {
 public:
  explicit BlockingServer(server::HttpServerLimits limits)
      : http_([this](const server::HttpRequest& r) { return handle(r); }, {}, limits,
              [](const server::HttpRequest& r) {
                if (r.path == "/api/status") return server::Lane::kStatus;
                return r.path == "/wait" ? server::Lane::kWait : server::Lane::kWorker;
              }) {
    http_.start("127.0.0.1", 0);
  }
  ~BlockingServer() {
    release.open();
    http_.stop();
  }
  int port() const { return http_.port(); }
  // Waits (bounded) until `n` waits are inside the handler at once.
  bool waiting(size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return inside_ >= n; });
  }
  server::HttpServer& http() { return http_; }
  Latch release;

 private:
  server::HttpResponse handle(const server::HttpRequest& request) {
    server::HttpResponse res;
    if (request.path == "/wait" || request.path == "/busy") {
      {
        std::lock_guard lock(mu_);
        ++inside_;
        cv_.notify_all();
      }
      release.wait();
      res.body = R"({"waited":true})";
    } else {
      res.body = R"({"ok":true})";
    }
    return res;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  size_t inside_ = 0;
  server::HttpServer http_;
};

TEST(HttpServerLimits, WaitingRequestsRunBesideTheWorkersAndAreBounded) {
  server::HttpServerLimits limits;
  limits.worker_threads = 2;
  limits.max_waiting = 6;
  BlockingServer server(limits);
  Replies waits;
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&] { waits.add(http_request(server.port(), "GET", "/wait")); });
  }
  // Three times as many waits as workers are inside their handlers at once.
  ASSERT_TRUE(server.waiting(6)) << "the waits did not all start: they queue behind the workers";
  EXPECT_EQ(server.http().waiting_count(), 6u);
  // One more is refused at once, saying which limit.
  Reply busy = http_request(server.port(), "GET", "/wait");
  EXPECT_EQ(busy.status, 503u);
  EXPECT_NE(busy.body.find("max_waiting_requests"), std::string::npos) << busy.body;
  EXPECT_EQ(busy.headers["Retry-After"], "1");
  // Everything else is answered while they wait.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(http_request(server.port(), "GET", "/other").status, 200u);
  EXPECT_EQ(waits.size(), 0u) << "a wait ended before it was released";
  server.release.open();
  for (auto& t : clients) t.join();
  for (const auto& reply : waits.at_least(6)) EXPECT_EQ(reply.status, 200u) << reply.body;
}

TEST(HttpServerLimits, TheStatusIsAnsweredWhileEveryWorkerIsBusy) {
  server::HttpServerLimits limits;
  limits.worker_threads = 2;
  BlockingServer server(limits);
  Replies busy;
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&] { busy.add(http_request(server.port(), "GET", "/busy")); });
  }
  ASSERT_TRUE(server.waiting(2)) << "the workers did not both start";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(http_request(server.port(), "GET", "/api/status").status, 200u);
  EXPECT_EQ(busy.size(), 0u);
  server.release.open();
  for (auto& t : clients) t.join();
}

TEST(HttpServerLimits, ConnectionsOverTheLimitGet503AndAreClosed) {
  server::HttpServerLimits limits;
  limits.max_connections = 3;
  BlockingServer server(limits);
  asio::io_context ioc;
  std::vector<beast::tcp_stream> open;
  for (int i = 0; i < 3; ++i) {
    // A kept-alive connection that has been answered is surely counted.
    open.emplace_back(connect(ioc, server.port()));
    beast::http::request<beast::http::empty_body> req(beast::http::verb::get, "/other", 11);
    req.set(beast::http::field::host, "127.0.0.1");
    beast::http::write(open.back(), req);
    beast::flat_buffer buffer;
    beast::http::response<beast::http::string_body> res;
    beast::http::read(open.back(), buffer, res);
    EXPECT_EQ(res.result_int(), 200u);
  }
  EXPECT_EQ(server.http().connection_count(), 3u);
  auto extra = connect(ioc, server.port());
  Received got = read_until_closed(ioc, extra);
  EXPECT_TRUE(got.closed);
  EXPECT_EQ(got.bytes.rfind("HTTP/1.1 503", 0), 0u) << got.bytes;
  EXPECT_NE(got.bytes.find("max_connections"), std::string::npos) << got.bytes;
}

TEST(HttpServerLimits, AClientTooSlowToSendItsRequestIsClosed) {
  server::HttpServerLimits limits;
  limits.request_timeout = 200ms;
  BlockingServer server(limits);
  asio::io_context ioc;
  // Half a request, and nothing more: the deadline covers the whole request,
  // so trickling bytes could not extend it either.
  auto slow = connect(ioc, server.port());
  asio::write(slow, asio::buffer(std::string("GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")));
  Received got = read_until_closed(ioc, slow);
  EXPECT_TRUE(got.closed) << "the half-sent request was never closed";
  EXPECT_TRUE(got.bytes.empty()) << got.bytes;
  // A kept-alive connection that goes quiet is closed the same way.
  auto idle = connect(ioc, server.port());
  asio::write(idle, asio::buffer(std::string("GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")));
  got = read_until_closed(ioc, idle);
  EXPECT_TRUE(got.closed);
  EXPECT_EQ(got.bytes.rfind("HTTP/1.1 200", 0), 0u) << got.bytes;
}

TEST(HttpServerLimits, AWebSocketThatStopsReadingIsClosedAtItsQueueCap) {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<server::WebSocketPeer> peer;
  server::HttpServer http(
      [](const server::HttpRequest&) {
        server::HttpResponse res;
        res.accept_websocket = true;
        return res;
      },
      [&](std::shared_ptr<server::WebSocketPeer> p, const server::HttpRequest&) {
        std::lock_guard lock(mu);
        peer = std::move(p);
        cv.notify_all();
        return server::WebSocketMessageHandler{};
      });
  http.start("127.0.0.1", 0);
  asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws(ioc);
  beast::get_lowest_layer(ws).connect(
      tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(http.port())));
  ws.handshake("127.0.0.1", "/ws");
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return peer != nullptr; }));
  }
  // The client reads nothing while the server queues twice the byte cap.
  const size_t frame = 64 * 1024;
  const size_t frames = 2 * server::WebSocketPeer::kMaxQueuedBytes / frame;
  for (size_t i = 0; i < frames; ++i) peer->send_binary(std::string(frame, 'x'));
  // Now it reads what was sent before the cap closed the socket.
  auto [received, ec] = read_ws_until_closed(ioc, ws);
  EXPECT_EQ(ec, websocket::error::closed) << ec.message();
  EXPECT_EQ(ws.reason().code, websocket::close_code::try_again_later);
  EXPECT_LT(received, frames);
  EXPECT_FALSE(peer->is_open());
  // The peer lives on the server's I/O context: it goes first.
  peer.reset();
  http.stop();
}

// --- the served session --------------------------------------------------

class LimitsTest : public TrainingServerTest {
 protected:
  // A served loop whose train batches after the first (at whose end the
  // session pauses) each wait for `gate_` inside the batch: while it is
  // closed the loop is running and cannot pause, so a request waiting for
  // the pause stays waiting until the test opens it.
  void start_gated(nansense::ServeOptions serve) {
    serve_session(3, 1, nansense::StartOptions().epochs(1).phases(nansense::PhaseCounts{{"train", 3}, {"val", 1}}),
                  std::move(serve));
    if (HasFatalFailure()) return;
    trainer_ = std::thread([this] {
      try {
        int64_t index = 0;
        for (auto& batch : session_->batches(train_, "train")) {
          if (index++ > 0) gate_.wait();
          optimizer_->zero_grad();
          torch::nll_loss(model_->forward(batch.first), batch.second).backward();
          optimizer_->step();
        }
        torch::NoGradGuard no_grad;
        for (auto& batch : session_->batches(val_, "val")) model_->forward(batch.first);
        session_->close();
      } catch (const std::exception&) {
      }
    });
  }
  void TearDown() override {
    gate_.open();
    TrainingServerTest::TearDown();
  }
  Latch gate_;
};

TEST_F(LimitsTest, StatusIsServedWhileMoreWaitsThanWorkersArePending) {
  // Twelve waits (more than the eight workers) fill the wait lane.
  constexpr int kWaits = 12;
  start_gated(nansense::ServeOptions().limits(nansense::ServeLimits().max_waiting_requests(kWaits)));
  wait_paused();
  McpClient agent(port_);
  agent.initialize();
  // Into the first batch, where the gate holds the loop running.
  ASSERT_EQ(post("/api/run", {{"timeout_seconds", 0}}).status, 200u);
  // One more wait than the lane holds, over REST and MCP: the first reply
  // is the one refused (no wait can end while the gate is closed), and it
  // means the other twelve are all waiting. The waits are pauses: in
  // whatever order they land, each asks for the same thing (a run landing
  // after a pause would take it back, and the loop would finish instead).
  Replies replies;
  std::vector<std::thread> clients;
  for (int i = 0; i <= kWaits; ++i) {
    clients.emplace_back([&, i] {
      if (i % 3 == 0) {
        json call = {{"jsonrpc", "2.0"},
                     {"id", i},
                     {"method", "tools/call"},
                     {"params", {{"name", "pause"}, {"arguments", {{"timeout_seconds", 60}}}}}};
        replies.add(agent.post(call.dump()));
      } else {
        replies.add(http_request(port_, "POST", "/api/pause", json{{"timeout_seconds", 60}}.dump()));
      }
    });
  }
  auto first = replies.at_least(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].status, 503u) << first[0].body;
  EXPECT_NE(first[0].body.find("max_waiting_requests"), std::string::npos) << first[0].body;
  // Everything else is served meanwhile: status, the page, MCP's get_status.
  for (int i = 0; i < 20; ++i) {
    Reply status = get("/api/status");
    ASSERT_EQ(status.status, 200u);
    EXPECT_EQ(status.json()["state"], "running");
  }
  EXPECT_EQ(get("/").status, 200u);
  EXPECT_EQ(agent.tool_json("get_status")["state"], "running");
  EXPECT_EQ(replies.size(), 1u) << "a wait ended while the loop could not pause";
  // The loop may pause now: every wait ends with the pause.
  gate_.open();
  for (auto& t : clients) t.join();
  auto all = replies.at_least(kWaits + 1);
  ASSERT_EQ(all.size(), static_cast<size_t>(kWaits + 1));
  for (size_t i = 1; i < all.size(); ++i) {
    ASSERT_EQ(all[i].status, 200u) << all[i].body;
    json body = all[i].json();
    // An MCP reply carries the status in its structured content.
    const json status = body.contains("result") ? body["result"]["structuredContent"] : body;
    EXPECT_EQ(status["state"], "paused") << body;
  }
}

TEST(WaitingRequests, EveryMovingCommandWithATimeoutIsAWait) {
  auto post = [](const std::string& path, const std::string& body) {
    server::HttpRequest r;
    r.method = "POST";
    r.path = path;
    r.body = body;
    return r;
  };
  auto tool = [&](const std::string& name, const json& arguments) {
    return post("/mcp", json{{"jsonrpc", "2.0"},
                             {"id", 1},
                             {"method", "tools/call"},
                             {"params", {{"name", name}, {"arguments", arguments}}}}
                            .dump());
  };
  size_t waiting_commands = 0;
  for (const auto& command : server::commands()) {
    bool has_timeout = false;
    for (const auto& arg : command.args) has_timeout = has_timeout || arg.name == "timeout_seconds";
    // The declared default waits; 0 does not.
    const json defaults = command.name == "time_travel" ? json{{"epoch", 0}} : json::object();
    if (command.rest && command.rest->method == "POST") {
      EXPECT_EQ(server::may_wait(post(command.rest->path, defaults.dump())), has_timeout) << command.name;
      EXPECT_EQ(server::may_wait(post(command.rest->path, "")), has_timeout) << command.name;
      json none = defaults;
      none["timeout_seconds"] = 0;
      EXPECT_FALSE(server::may_wait(post(command.rest->path, none.dump()))) << command.name;
    }
    if (command.mcp) {
      EXPECT_EQ(server::may_wait(tool(command.name, defaults)), has_timeout) << command.name;
      json none = defaults;
      none["timeout_seconds"] = 0;
      EXPECT_FALSE(server::may_wait(tool(command.name, none))) << command.name;
    }
    waiting_commands += has_timeout;
  }
  EXPECT_GE(waiting_commands, 6u);  // step, run, run_until, pause, refresh, time_travel
  server::HttpRequest status;
  status.method = "GET";
  status.path = "/api/status";
  EXPECT_EQ(server::lane_of(status), server::Lane::kStatus);
  EXPECT_EQ(server::lane_of(post("/api/step", "{}")), server::Lane::kWait);
  EXPECT_EQ(server::lane_of(post("/api/step", R"({"timeout_seconds":0})")), server::Lane::kWorker);
  EXPECT_FALSE(server::may_wait(post("/api/run", R"({"detach":true})")));
  EXPECT_FALSE(server::may_wait(post("/api/step", "{not json")));
  EXPECT_TRUE(server::may_wait(
      post("/mcp",
           json::array({json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "tools/call"}, {"params", {{"name", "step"}}}}})
               .dump())));
}

TEST_F(LimitsTest, AnIdleMcpSessionExpiresAndItsIdGets404) {
  // Expiry after no idle time at all: the session is gone by its next request.
  start_gated(nansense::ServeOptions().limits(nansense::ServeLimits().mcp_session_idle_timeout(0ms)));
  McpClient agent(port_);
  json init = {{"jsonrpc", "2.0"},
               {"id", 0},
               {"method", "initialize"},
               {"params",
                {{"protocolVersion", "2025-06-18"},
                 {"capabilities", json::object()},
                 {"clientInfo", {{"name", "limits_test"}, {"version", "1"}}}}}};
  Reply opened = agent.post(init.dump());
  ASSERT_EQ(opened.status, 200u) << opened.body;
  agent.set_session(opened.headers["Mcp-Session-Id"]);
  Reply later = agent.post(json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}}.dump());
  EXPECT_EQ(later.status, 404u) << later.body;
  EXPECT_NE(later.json()["error"]["message"].get<std::string>().find("expired"), std::string::npos) << later.body;
}

TEST_F(LimitsTest, McpSessionsLiveWhileUsedAndExpireAfterTheirIdleTime) {
  start_gated(nansense::ServeOptions());
  // The endpoint on its own clock, over this session's controller.
  server::Controller controller(*detail::port_of(*session_));
  auto now = std::chrono::steady_clock::now();
  server::mcp::Endpoint endpoint(controller, 10min, [&] { return now; });
  auto request = [&](const std::string& session, const json& message) {
    server::HttpRequest r;
    r.method = "POST";
    r.path = "/mcp";
    r.headers["accept"] = "application/json, text/event-stream";
    if (!session.empty()) r.headers["mcp-session-id"] = session;
    r.body = message.dump();
    return endpoint.handle(r);
  };
  auto open = [&] {
    auto res = request("", {{"jsonrpc", "2.0"},
                            {"id", 0},
                            {"method", "initialize"},
                            {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", json::object()}}}});
    EXPECT_EQ(res.status, 200u) << res.body;
    for (const auto& [name, value] : res.headers) {
      if (name == "Mcp-Session-Id") return value;
    }
    ADD_FAILURE() << "no session id";
    return std::string();
  };
  const json ping = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", "ping"}};
  const std::string used = open();
  const std::string idle = open();
  EXPECT_EQ(endpoint.session_count(), 2u);
  now += 9min;
  EXPECT_EQ(request(used, ping).status, 200u);
  now += 9min;  // `used` was idle 9 minutes, `idle` 18
  EXPECT_EQ(request(used, ping).status, 200u);
  EXPECT_EQ(endpoint.session_count(), 1u);
  auto gone = request(idle, ping);
  EXPECT_EQ(gone.status, 404u) << gone.body;
  now += 11min;
  EXPECT_EQ(request(used, ping).status, 404u);
  EXPECT_EQ(endpoint.session_count(), 0u);
}

TEST_F(LimitsTest, AWebSocketMessageOverTheLimitClosesTheSocket) {
  start_gated(nansense::ServeOptions());
  wait_paused();
  asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws(ioc);
  beast::get_lowest_layer(ws).connect(
      tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)));
  ws.handshake("127.0.0.1:" + std::to_string(port_), "/ws");
  beast::flat_buffer buffer;
  ws.read(buffer);  // the status on connect
  ws.text(true);
  beast::error_code ec;
  ws.write(asio::buffer(std::string(server::WebSocketPeer::kMaxIncomingMessage + 1, ' ')), ec);
  ec = read_ws_until_closed(ioc, ws, 30s).second;
  EXPECT_EQ(ec, websocket::error::closed) << ec.message();
  EXPECT_EQ(ws.reason().code, websocket::close_code::too_big);
}

// --- access checks ---------------------------------------------------------

TEST(AccessChecks, TheTokenIsComparedInConstantTime) {
  // The check itself (server.cpp's refuse() uses it): equal strings only,
  // whatever their length; the time depends on the lengths alone.
  EXPECT_TRUE(server::constant_time_equal("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(server::constant_time_equal("0123456789abcdef", "0123456789abcdeF"));
  EXPECT_FALSE(server::constant_time_equal("0123456789abcdef", "0123456789abcde"));
  EXPECT_FALSE(server::constant_time_equal("0123456789abcde", "0123456789abcdef"));
  EXPECT_FALSE(server::constant_time_equal("", "0123456789abcdef"));
  EXPECT_FALSE(server::constant_time_equal(std::string("ab\0c", 4), "ab"));
  EXPECT_TRUE(server::constant_time_equal("", ""));
}

TEST(AccessChecks, StaticFilesNeverLeaveTheirFolder) {
  // The development folder (NANSENSE_WEB_DIR) with a file beside it.
  const auto root = std::filesystem::temp_directory_path() / ("nansense_web_" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "web" / "assets");
  std::ofstream(root / "web" / "index.html") << "<html>page</html>";
  std::ofstream(root / "secret.txt") << "secret";
  ::setenv("NANSENSE_WEB_DIR", (root / "web").c_str(), 1);
  auto get = [](const std::string& raw_path) {
    server::HttpRequest r;
    r.method = "GET";
    r.path = server::url_decode(raw_path, false);  // as the server decodes it
    return server::serve_web_file(r);
  };
  auto page = get("/index.html");
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->body, "<html>page</html>");
  for (const std::string path :
       {"/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E%2Fsecret.txt", "/assets/../../secret.txt", "/..\\secret.txt",
        "/%2e%2e%5csecret.txt", "/index.html%00.png"}) {
    auto file = get(path);
    EXPECT_FALSE(file.has_value()) << path << " served " << (file ? file->body : "");
  }
  ::unsetenv("NANSENSE_WEB_DIR");
  std::filesystem::remove_all(root);
}

TEST_F(LimitsTest, EncodedTraversalIsRefusedOverHttp) {
  start_gated(nansense::ServeOptions());
  for (const std::string path : {"/../CMakeLists.txt", "/%2e%2e/CMakeLists.txt", "/%2e%2e%2fCMakeLists.txt",
                                 "/assets/%2e%2e/%2e%2e/CMakeLists.txt", "/..%5cCMakeLists.txt"}) {
    Reply reply = get(path);
    EXPECT_EQ(reply.status, 404u) << path;
    EXPECT_EQ(reply.body.find("cmake_minimum_required"), std::string::npos) << path;
  }
}

TEST(AccessChecks, ATokenMustMatchWhole) {
  torch::manual_seed(0);
  TinyNet model;
  auto session = nansense::start(model, nansense::StartOptions());
  ASSERT_TRUE(nansense::serve(
      session, nansense::ServeOptions().host("0.0.0.0").port(0).open_browser(false).print_banner(false)));
  const std::string url = session.url();
  const auto at = url.find("?token=");
  ASSERT_NE(at, std::string::npos) << url;
  const std::string token = url.substr(at + 7);
  const int port = port_of(url.substr(0, at - 1));
  for (const std::string wrong :
       {token.substr(0, token.size() - 1), token + "0", std::string(token.size(), '0'), std::string("")}) {
    EXPECT_EQ(http_request(port, "GET", "/api/status?token=" + wrong).status, 401u) << wrong;
    EXPECT_EQ(http_request(port, "GET", "/api/status", "", {{"Authorization", "Bearer " + wrong}}).status, 401u);
  }
  EXPECT_EQ(http_request(port, "GET", "/api/status?token=" + token).status, 200u);
  session.close();
}

}  // namespace
}  // namespace nansense::testing
