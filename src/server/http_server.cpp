#include "server/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <thread>

namespace nansense::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

const std::string kEmpty;

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

}  // namespace

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
  HttpServerLimits limits;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  asio::thread_pool workers;
  std::vector<std::thread> threads;
  int port = 0;
  bool running = false;

  Impl(HttpHandler h, HttpServerLimits l)
      : handler(std::move(h)), limits(l), workers(static_cast<size_t>(std::max(1, l.worker_threads))) {}

  void accept();
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& server) : stream_(std::move(socket)), server_(server) {}

  void read() {
    parser_.emplace();
    parser_->body_limit(server_.limits.body_limit);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(std::chrono::seconds(120));
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_read, shared_from_this()));
  }

 private:
  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted || ec == beast::error::timeout ||
        ec == asio::error::eof || ec == asio::error::connection_reset) {
      return close();
    }
    if (ec == http::error::body_limit) {
      return respond_error(413, "request body too large: the limit is " + std::to_string(server_.limits.body_limit) +
                                    " bytes", 11);
    }
    if (ec) return respond_error(400, "malformed HTTP request: " + ec.message(), 11);
    // The handler may wait (up to 300 s): no timer runs until the reply is written.
    stream_.expires_never();
    auto req = parser_->release();
    auto request = std::make_shared<HttpRequest>(to_request(req));
    const bool keep_alive = req.keep_alive();
    const unsigned version = req.version();
    head_ = req.method() == http::verb::head;
    auto self = shared_from_this();
    asio::post(server_.workers, [self, request, keep_alive, version] {
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
      asio::post(self->stream_.get_executor(), [self, res = std::move(res), keep_alive, version]() mutable {
        self->write(std::move(res), keep_alive, version);
      });
    });
  }

  void respond_error(unsigned status, const std::string& message, unsigned version) {
    HttpResponse res;
    res.status = status;
    res.body = json_error(message);
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
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, *msg, [self, msg](beast::error_code ec, size_t) {
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
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor->async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) std::make_shared<Connection>(std::move(socket), *this)->read();
    accept();
  });
}

HttpServer::HttpServer(HttpHandler handler, HttpServerLimits limits)
    : impl_(std::make_unique<Impl>(std::move(handler), limits)) {}

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
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ec;
  impl_->acceptor->close(ec);  // free the port now, not when the server is destroyed
  impl_->workers.join();
}

}  // namespace nansense::server
