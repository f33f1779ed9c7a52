#include "server/http/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nansense::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

const std::string kEmpty;

// How long stop() waits for replies in progress to be written.
constexpr std::chrono::seconds kStopDrain{2};

std::string json_error(const std::string& message) {
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpRequest to_request(const http::request<http::string_body>& req) {
  HttpRequest out;
  out.method = std::string(req.method_string());
  std::string target(req.target());
  auto q = target.find('?');
  out.path = url_decode(target.substr(0, q), false);
  if (q != std::string::npos) {
    std::string query = target.substr(q + 1);
    size_t start = 0;
    while (start <= query.size()) {
      size_t end = query.find('&', start);
      if (end == std::string::npos) end = query.size();
      std::string part = query.substr(start, end - start);
      if (!part.empty()) {
        auto eq = part.find('=');
        std::string key = url_decode(part.substr(0, eq), true);
        std::string value = eq == std::string::npos ? "" : url_decode(part.substr(eq + 1), true);
        out.query[key] = value;
      }
      start = end + 1;
    }
  }
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  out.body = req.body();
  return out;
}

constexpr size_t kHeaderLimit = 16 * 1024;

void configure(http::request_parser<http::string_body>& parser, const HttpServerLimits& limits) {
  parser.body_limit(limits.body_limit);
  parser.header_limit(kHeaderLimit);
}

// What a connection answers to a request its parser refused, before closing.
HttpResponse refusal_for(const beast::error_code& ec, const HttpServerLimits& limits) {
  HttpResponse res;
  if (ec == http::error::body_limit) {
    res.status = 413;
    res.body = json_error("request body too large: the limit is " + std::to_string(limits.body_limit) + " bytes");
  } else {
    res.status = 400;
    res.body = json_error("malformed HTTP request: " + ec.message());
  }
  return res;
}

}  // namespace

ParsedRequest parse_request(std::string_view bytes, const HttpServerLimits& limits) {
  http::request_parser<http::string_body> parser;
  configure(parser, limits);
  ParsedRequest out;
  beast::error_code ec;
  // Beast's parser takes what it can per call (a header whole, then the
  // body in pieces), as async_read feeds it.
  while (!parser.is_done()) {
    const size_t left = bytes.size() - out.consumed;
    const size_t n = left == 0 ? 0 : parser.put(asio::buffer(bytes.data() + out.consumed, left), ec);
    out.consumed += n;
    // Nothing taken (the bytes are used up): what the stream holds next decides.
    if (n == 0 && !ec) ec = http::error::need_more;
    if (ec == http::error::need_more) {
      if (n > 0 && out.consumed < bytes.size()) {
        ec = {};
        continue;
      }
      // The bytes end here: as a client closing its side after them.
      ec = {};
      parser.put_eof(ec);
      if (!ec && parser.is_done()) break;
      out.outcome = ParsedRequest::Outcome::kIncomplete;
      return out;
    }
    if (ec) {
      out.outcome = ParsedRequest::Outcome::kRefused;
      out.refusal = refusal_for(ec, limits);
      return out;
    }
  }
  out.outcome = ParsedRequest::Outcome::kRequest;
  out.request = to_request(parser.get());
  return out;
}

bool is_websocket_upgrade(const HttpRequest& request) {
  auto lower = [](std::string v) {
    for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v;
  };
  return request.method == "GET" && lower(request.header("upgrade")).find("websocket") != std::string::npos &&
         lower(request.header("connection")).find("upgrade") != std::string::npos;
}

const std::string& HttpRequest::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

std::string url_decode(const std::string& s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

struct HttpServer::Impl {
  HttpHandler handler;
  WebSocketHandler on_websocket;
  HttpServerLimits limits;
  LaneClassifier lane_of;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  // Made at start(), from the limits then in force.
  std::optional<asio::thread_pool> workers;
  std::optional<asio::thread_pool> waits;
  std::optional<asio::thread_pool> status;
  std::vector<std::thread> threads;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> waiting{0};
  int port = 0;
  bool running = false;
  // Requests read whose reply is not written yet: stop() lets them finish
  // (a command that ends the program still gets its answer), within a bound.
  std::mutex replies_mu;
  std::condition_variable replies_done;
  size_t replies_pending = 0;

  void reply_started() {
    std::lock_guard lock(replies_mu);
    ++replies_pending;
  }
  void reply_finished() {
    std::lock_guard lock(replies_mu);
    if (--replies_pending == 0) replies_done.notify_all();
  }

  Impl(HttpHandler h, WebSocketHandler ws, HttpServerLimits l, LaneClassifier c)
      : handler(std::move(h)), on_websocket(std::move(ws)), limits(l), lane_of(std::move(c)) {}

  void accept();
};

namespace {

// One open connection counted against limits.max_connections, for as long
// as its socket lives (passed on from the HTTP connection to its WebSocket).
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::atomic<size_t>& count) : count_(count) {}
  ~ConnectionSlot() { --count_; }
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;

 private:
  std::atomic<size_t>& count_;
};

// The calling pool thread's CPU priority, lowered once (Linux: per thread):
// request handlers yield the CPU to the training thread.
void lower_priority() {
  thread_local const bool lowered = [] {
    return ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) == 0;
  }();
  (void)lowered;
}

// A connection over the limit: a 503 saying why, then closed, without
// reading the request (its socket must not wait on the client either).
void refuse_connection(tcp::socket socket, size_t limit) {
  auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
  auto msg = std::make_shared<http::response<http::string_body>>(http::status::service_unavailable, 11);
  msg->set(http::field::server, "nansense");
  msg->set(http::field::content_type, "application/json");
  msg->set(http::field::retry_after, "1");
  msg->keep_alive(false);
  msg->body() = json_error("too many open connections (the limit is " + std::to_string(limit) +
                           ", ServeLimits::max_connections): close some pages or clients and retry");
  msg->prepare_payload();
  stream->expires_after(std::chrono::seconds(5));
  http::async_write(*stream, *msg, [stream, msg](beast::error_code, size_t) {
    beast::error_code ec;
    stream->socket().shutdown(tcp::socket::shutdown_both, ec);
  });
}

}  // namespace

namespace {

// An accepted WebSocket: a write queue on the connection's strand, and a read
// loop that hands the client's text messages to the app's handler.
class WebSocketSession : public WebSocketPeer, public std::enable_shared_from_this<WebSocketSession> {
 public:
  WebSocketSession(beast::tcp_stream stream, HttpServer::Impl& server, std::unique_ptr<ConnectionSlot> slot)
      : ws_(std::move(stream)), server_(server), slot_(std::move(slot)) {}

  void accept(std::shared_ptr<http::request<http::string_body>> upgrade, std::shared_ptr<HttpRequest> request) {
    // The WebSocket's own timeouts replace the HTTP ones: 30 s for the
    // handshake, and a ping after half the idle time (300 s) without a frame
    // from the peer; a page answers it, a half-open or dead peer is closed
    // when the other half passes without a frame.
    beast::get_lowest_layer(ws_).expires_never();
    auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::server);
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "nansense"); }));
    ws_.read_message_max(kMaxIncomingMessage);
    auto self = shared_from_this();
    ws_.async_accept(*upgrade, [self, upgrade, request](beast::error_code ec) {
      if (ec) return;
      self->open_ = true;
      if (self->server_.on_websocket) {
        try {
          self->on_message_ = self->server_.on_websocket(self, *request);
        } catch (const std::exception& e) {
          std::cerr << "[nansense] WebSocket handler failed: " << e.what() << "\n";
          self->close();
          return;
        }
      }
      self->read();
    });
  }

  void send(std::string text) override { enqueue(std::move(text), false); }
  void send_binary(std::string bytes) override { enqueue(std::move(bytes), true); }

  bool is_open() const override { return open_; }

 private:
  struct Frame {
    std::string bytes;
    bool binary = false;
  };

  void enqueue(std::string bytes, bool binary) {
    auto self = shared_from_this();
    asio::post(ws_.get_executor(), [self, bytes = std::move(bytes), binary]() mutable {
      if (!self->open_) return;
      if (self->queue_.size() >= kMaxQueuedFrames || self->queued_bytes_ + bytes.size() > kMaxQueuedBytes) {
        std::cerr << "[nansense] closing a WebSocket that stopped reading (" << self->queue_.size() << " frames, "
                  << self->queued_bytes_ << " bytes queued)\n";
        return self->close();
      }
      self->queued_bytes_ += bytes.size();
      self->queue_.push_back(Frame{std::move(bytes), binary});
      if (self->queue_.size() == 1) self->write();
    });
  }

  void read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        // Closed, failed, or a message over read_message_max (Beast closes
        // the socket with "message too big").
        self->open_ = false;
        self->on_message_ = nullptr;
        return;
      }
      if (self->ws_.got_text() && self->on_message_) {
        std::string text = beast::buffers_to_string(self->buffer_.data());
        try {
          self->on_message_(text);
        } catch (const std::exception& e) {
          std::cerr << "[nansense] WebSocket message handler failed: " << e.what() << "\n";
        } catch (...) {
          std::cerr << "[nansense] WebSocket message handler failed\n";
        }
      }
      self->buffer_.consume(self->buffer_.size());
      self->read();
    });
  }

  void write() {
    ws_.binary(queue_.front().binary);
    ws_.async_write(asio::buffer(queue_.front().bytes), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->open_ = false;
        self->queue_.clear();
        self->queued_bytes_ = 0;
        return;
      }
      self->queued_bytes_ -= self->queue_.front().bytes.size();
      self->queue_.pop_front();
      if (!self->queue_.empty()) self->write();
    });
  }

  void close() {
    open_ = false;
    on_message_ = nullptr;
    // A write in flight still owns the front frame's buffer.
    while (queue_.size() > 1) {
      queued_bytes_ -= queue_.back().bytes.size();
      queue_.pop_back();
    }
    ws_.async_close(websocket::close_code::try_again_later, [self = shared_from_this()](beast::error_code) {});
  }

  websocket::stream<beast::tcp_stream> ws_;
  HttpServer::Impl& server_;
  std::unique_ptr<ConnectionSlot> slot_;
  beast::flat_buffer buffer_;
  std::deque<Frame> queue_;             // touched on the strand only
  size_t queued_bytes_ = 0;             // the strand only
  WebSocketMessageHandler on_message_;  // the strand only
  std::atomic<bool> open_{false};
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& server, std::unique_ptr<ConnectionSlot> slot)
      : stream_(std::move(socket)), server_(server), slot_(std::move(slot)) {}

  void read() {
    parser_.emplace();
    configure(*parser_, server_.limits);
    // One deadline for the whole request (and the idle time before it):
    // bytes trickling in do not extend it.
    stream_.expires_after(server_.limits.request_timeout);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_read, shared_from_this()));
  }

 private:
  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted || ec == beast::error::timeout ||
        ec == asio::error::eof || ec == asio::error::connection_reset) {
      return close();
    }
    if (ec) return respond_error(refusal_for(ec, server_.limits), 11);
    // The handler may wait (up to 300 s): no timer runs until the reply is written.
    stream_.expires_never();
    auto req = std::make_shared<http::request<http::string_body>>(parser_->release());
    auto request = std::make_shared<HttpRequest>(to_request(*req));
    const bool keep_alive = req->keep_alive();
    const unsigned version = req->version();
    head_ = req->method() == http::verb::head;
    const bool upgrade = websocket::is_upgrade(*req);
    auto self = shared_from_this();
    // A request that may wait for the loop runs on the wait lane, so the
    // workers stay free for everyone else; the lane is bounded.
    const Lane lane = server_.lane_of && !upgrade ? server_.lane_of(*request) : Lane::kWorker;
    const bool waits = lane == Lane::kWait;
    if (waits && server_.waiting.fetch_add(1) >= static_cast<size_t>(std::max(0, server_.limits.max_waiting))) {
      --server_.waiting;
      HttpResponse busy;
      busy.status = 503;
      busy.body = json_error("too many requests waiting for the training loop (the limit is " +
                             std::to_string(server_.limits.max_waiting) +
                             ", ServeLimits::max_waiting_requests): retry, or send timeout_seconds 0 and follow "
                             "the run with get_status or the /ws push channel");
      busy.headers.emplace_back("Retry-After", "1");
      server_.reply_started();
      return write(std::move(busy), keep_alive, version);
    }
    server_.reply_started();
    auto& pool = lane == Lane::kStatus ? *server_.status : waits ? *server_.waits : *server_.workers;
    asio::post(pool, [self, req, request, keep_alive, version, upgrade, waits, lane] {
      if (lane != Lane::kStatus) lower_priority();
      HttpResponse res;
      try {
        res = self->server_.handler(*request);
      } catch (const std::exception& e) {
        res.status = 500;
        res.body = json_error(std::string("internal error: ") + e.what());
      } catch (...) {
        res.status = 500;
        res.body = json_error("internal error");
      }
      if (waits) --self->server_.waiting;
      if (upgrade && res.accept_websocket) {
        asio::post(self->stream_.get_executor(), [self, req, request] {
          self->server_.reply_finished();
          std::make_shared<WebSocketSession>(std::move(self->stream_), self->server_, std::move(self->slot_))
              ->accept(req, request);
        });
        return;
      }
      asio::post(self->stream_.get_executor(), [self, res = std::move(res), keep_alive, version]() mutable {
        self->write(std::move(res), keep_alive, version);
      });
    });
  }

  void respond_error(HttpResponse res, unsigned version) {
    server_.reply_started();
    write(std::move(res), false, version);
  }

  void write(HttpResponse res, bool keep_alive, unsigned version) {
    auto msg = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(res.status), version);
    msg->set(http::field::server, "nansense");
    msg->set(http::field::content_type, res.content_type);
    for (const auto& [name, value] : res.headers) msg->set(name, value);
    if (!msg->has_content_length() && msg->find(http::field::cache_control) == msg->end()) {
      msg->set(http::field::cache_control, "no-store");
    }
    msg->keep_alive(keep_alive);
    msg->body() = std::move(res.body);
    msg->prepare_payload();
    if (head_) {
      // A HEAD reply announces the body's length but sends none.
      const auto length = msg->body().size();
      msg->body().clear();
      msg->content_length(length);
    }
    auto self = shared_from_this();
    stream_.expires_after(server_.limits.write_timeout);
    http::async_write(stream_, *msg, [self, msg](beast::error_code ec, size_t) {
      self->server_.reply_finished();
      if (ec || !msg->keep_alive()) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool head_ = false;  // the request being answered is a HEAD
  HttpServer::Impl& server_;
  std::unique_ptr<ConnectionSlot> slot_;
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      if (connections.fetch_add(1) >= limits.max_connections) {
        --connections;
        refuse_connection(std::move(socket), limits.max_connections);
      } else {
        auto slot = std::make_unique<ConnectionSlot>(connections);
        std::make_shared<Connection>(std::move(socket), *this, std::move(slot))->read();
      }
    }
    accept();
  });
}

HttpServer::HttpServer(HttpHandler handler, WebSocketHandler on_websocket, HttpServerLimits limits,
                       LaneClassifier lane_of)
    : impl_(std::make_unique<Impl>(std::move(handler), std::move(on_websocket), limits, std::move(lane_of))) {}

void HttpServer::set_limits(const HttpServerLimits& limits) {
  if (impl_->running) throw std::logic_error("HttpServer::set_limits after start()");
  impl_->limits = limits;
}

size_t HttpServer::connection_count() const { return impl_->connections; }
size_t HttpServer::waiting_count() const { return impl_->waiting; }

HttpServer::~HttpServer() { stop(); }

void HttpServer::start(const std::string& host, int port) {
  beast::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("cannot serve on '" + host + "': not an IP address (" + ec.message() + ")");
  if (port < 0 || port > 65535) throw std::runtime_error("port " + std::to_string(port) + " is out of range 0..65535");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  const std::string where = host + ":" + std::to_string(port);
  tcp::acceptor acceptor(impl_->ioc);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::string why = ec == asio::error::address_in_use ? "the port is already in use" : ec.message();
    throw std::runtime_error("cannot serve on " + where + ": " + why);
  }
  impl_->port = acceptor.local_endpoint().port();
  impl_->workers.emplace(static_cast<size_t>(std::max(1, impl_->limits.worker_threads)));
  impl_->waits.emplace(static_cast<size_t>(std::max(1, impl_->limits.max_waiting)));
  impl_->status.emplace(static_cast<size_t>(std::max(1, impl_->limits.status_threads)));
  impl_->acceptor.emplace(std::move(acceptor));
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->accept();
  for (int i = 0; i < std::max(1, impl_->limits.io_threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  impl_->running = true;
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  if (!impl_ || !impl_->running) return;
  impl_->running = false;
  // No new connections (and the port is free again) from here on; the
  // acceptor belongs to the I/O threads, so they close it.
  std::promise<void> closed;
  asio::post(impl_->ioc, [this, &closed] {
    beast::error_code ec;
    impl_->acceptor->close(ec);
    closed.set_value();
  });
  closed.get_future().wait();
  {
    // Replies in progress are finished and written first, but a handler in
    // a long wait does not hold the program up.
    std::unique_lock lock(impl_->replies_mu);
    impl_->replies_done.wait_for(lock, kStopDrain, [this] { return impl_->replies_pending == 0; });
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->workers->join();
  impl_->waits->join();
  impl_->status->join();
}

}  // namespace nansense::server
