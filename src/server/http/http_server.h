// A small HTTP/1.1 server on Boost.Beast: async I/O threads that never run
// handlers; a worker pool that runs them; and a bounded lane of threads for
// the requests that may wait long (a command waiting for the loop), so that
// waiting clients never starve the others.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nansense::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded path without the query
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  // The header's value, or "" when absent.
  const std::string& header(const std::string& lower_name) const;
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set by a handler that accepts a WebSocket upgrade request: the connection
  // becomes a WebSocket instead of carrying this response.
  bool accept_websocket = false;
};

// The server's side of an open WebSocket. Safe to use from any thread.
class WebSocketPeer {
 public:
  virtual ~WebSocketPeer() = default;
  // Queue a text or a binary frame; never block. Frames go out in the order
  // they were queued. A peer too slow to keep up (more than kMaxQueuedFrames
  // frames or kMaxQueuedBytes bytes waiting) is closed: its page reconnects
  // and starts from a fresh state.
  virtual void send(std::string text) = 0;
  virtual void send_binary(std::string bytes) = 0;
  virtual bool is_open() const = 0;

  static constexpr size_t kMaxQueuedFrames = 1024;
  static constexpr size_t kMaxQueuedBytes = size_t{64} << 20;
  // The largest message a client may send; a larger one closes the socket.
  static constexpr size_t kMaxIncomingMessage = size_t{1} << 20;
};

// Whether a request asks to become a WebSocket.
bool is_websocket_upgrade(const HttpRequest& request);

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;
// Receives a peer's text messages, one call at a time, on an I/O thread: it
// must be quick. An exception it throws is logged and the socket stays open.
// Binary frames from clients are ignored.
using WebSocketMessageHandler = std::function<void(const std::string& text)>;
// Called once a WebSocket accepted by the handler is open; returns the peer's
// message handler (or an empty one to ignore what the peer sends). The
// returned handler is dropped when the socket closes: it may hold the peer
// only weakly (a strong reference would be a cycle until then).
using WebSocketHandler = std::function<WebSocketMessageHandler(std::shared_ptr<WebSocketPeer>, const HttpRequest&)>;

struct HttpServerLimits {
  size_t body_limit = 1 << 20;  // larger bodies get 413
  int io_threads = 2;
  // Answer every request that does not wait for the loop, at a lower CPU
  // priority than the training thread (nice +10): a burst of heavy queries
  // takes spare CPU, not the training loop's.
  int worker_threads = 8;
  // Answer the status alone (Lane::kStatus), at normal priority, so that it
  // never queues behind heavy queries.
  int status_threads = 2;
  // Requests the classifier says may wait run on their own threads, at most
  // this many at once; one more gets 503 without running.
  int max_waiting = 64;
  // Open connections (HTTP and WebSocket); one more gets 503 and is closed.
  size_t max_connections = 1024;
  // To send one whole request, or to start the next on a kept-alive
  // connection; on expiry the connection is closed.
  std::chrono::milliseconds request_timeout{30'000};
  // To take one reply off the server's hands.
  std::chrono::milliseconds write_timeout{30'000};
};

// Where a request runs: the workers; the wait lane (a command that may wait
// for the loop to pause, each on its own thread, bounded); or the status
// lane (cheap, never blocking, answered first).
enum class Lane { kWorker, kWait, kStatus };
using LaneClassifier = std::function<Lane(const HttpRequest&)>;

class HttpServer {
 public:
  HttpServer(HttpHandler handler, WebSocketHandler on_websocket = {}, HttpServerLimits limits = {},
             LaneClassifier lane_of = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. Throws std::runtime_error naming the address and
  // the reason when the port cannot be bound. Port 0 picks a free port.
  void start(const std::string& host, int port);
  int port() const;
  void stop();
  // Before start(): replaces the limits given at construction.
  void set_limits(const HttpServerLimits& limits);
  // Open connections (HTTP and WebSocket) and requests waiting now.
  size_t connection_count() const;
  size_t waiting_count() const;

  struct Impl;  // the Beast machinery, defined in http_server.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

// One request read from raw bytes the way a connection reads it: Beast's
// parser with the connection's limits (body_limit; headers 16 KiB), then the
// same conversion to an HttpRequest. The in-process entry to the transport's
// parsing, for the fuzz harnesses (fuzz/), which hand it untrusted bytes.
struct ParsedRequest {
  enum class Outcome {
    kRequest,     // `request` is whole
    kIncomplete,  // the bytes end before the request does: a connection would wait for more
    kRefused,     // malformed or over a limit: `refusal` is what the connection answers before closing
  };
  Outcome outcome = Outcome::kIncomplete;
  HttpRequest request;
  HttpResponse refusal;
  size_t consumed = 0;  // bytes taken: a pipelined next request starts there
};
ParsedRequest parse_request(std::string_view bytes, const HttpServerLimits& limits = {});

// Percent-decoding for paths and query values ('+' is a space in queries).
std::string url_decode(const std::string& s, bool plus_is_space);

}  // namespace nansense::server
