// A tiny synchronous HTTP client over loopback for the integration tests.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>

namespace nansense::testing {

struct Reply {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

// One request on a fresh loopback connection; throws on a transport failure
// or when the reply takes longer than `deadline`.
inline Reply http_request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                          const std::map<std::string, std::string>& headers = {},
                          std::chrono::seconds deadline = std::chrono::seconds(60)) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  stream.expires_after(deadline);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  for (const auto& [k, v] : headers) req.set(k, v);
  if (method == "POST" && !headers.count("Content-Type")) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  parser.skip(method == "HEAD");  // a HEAD reply announces a body it does not send
  http::read(stream, buffer, parser);
  auto res = parser.release();
  Reply reply;
  reply.status = res.result_int();
  reply.body = res.body();
  for (const auto& field : res) reply.headers[std::string(field.name_string())] = std::string(field.value());
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return reply;
}

}  // namespace nansense::testing
