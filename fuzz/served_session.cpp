#include "fuzz/served_session.h"

#include <torch/torch.h>

#include <nansense/nansense.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "session/session_port.h"

namespace nansense::fuzz {

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return torch::log_softmax(fc2(torch::relu(fc1(x))), 1); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyNet);

[[noreturn]] void fail(const std::string& what) {
  std::cerr << "[fuzz] setup failed: " << what << "\n";
  std::abort();
}

struct Served {
  TinyNet model{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> train, val;
  std::unique_ptr<Session> session;
  std::unique_ptr<server::Server> server;
  std::string mcp_newest, mcp_batches;

  Served() {
    torch::manual_seed(0);
    model = TinyNet();
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int i = 0; i < 4; ++i) train.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
    for (int i = 0; i < 2; ++i) val.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
    session = std::make_unique<Session>(nansense::start(model, StartOptions().optimizer(optimizer.get())));
    session->set_stats_scope(StatsScope::kAll);
    std::thread trainer([this] {
      try {
        session->epochs(
            2,
            [&](int64_t) {
              for (auto& batch : session->batches(train, "train")) {
                optimizer->zero_grad();
                auto loss = torch::nll_loss(model->forward(batch.first), batch.second);
                loss.backward();
                optimizer->step();
              }
              torch::NoGradGuard no_grad;
              for (auto& batch : session->batches(val, "val")) model->forward(batch.first);
            },
            EpochOptions().cache_dir(scratch_dir() + "/cache"));
        session->close();
      } catch (const std::exception& e) {
        fail(std::string("the training loop threw: ") + e.what());
      }
    });
    // Paused on the first batch; then to the last batch (a snapshot of it is
    // kept), then on to the end.
    if (session->wait_until_stopped(60s) != RunState::kPaused) fail("the loop never paused on its first batch");
    session->run();
    if (session->wait_until_stopped(60s) != RunState::kPaused) fail("the loop never paused on its last batch");
    session->detach();
    trainer.join();
    if (session->state() != RunState::kFinished) fail("the session did not finish");

    server = std::make_unique<server::Server>(*detail::port_of(*session));
    if (!server->start(ServeOptions().port(0).print_banner(false).open_browser(false))) fail("cannot serve");
    renew_mcp_sessions();
  }

  std::string initialize(const std::string& version) {
    auto request = page_request("POST", "/mcp",
                                json{{"jsonrpc", "2.0"},
                                     {"id", 1},
                                     {"method", "initialize"},
                                     {"params",
                                      {{"protocolVersion", version},
                                       {"capabilities", json::object()},
                                       {"clientInfo", {{"name", "fuzz"}, {"version", "1"}}}}}}
                                    .dump());
    auto res = server->handle(request);
    std::string id;
    for (const auto& [name, value] : res.headers) {
      if (name == "Mcp-Session-Id") id = value;
    }
    if (res.status != 200 || id.empty()) fail("MCP initialize: " + std::to_string(res.status) + " " + res.body);
    auto ack = page_request("POST", "/mcp", R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
    ack.headers["mcp-session-id"] = id;
    server->handle(ack);
    return id;
  }

  void renew_mcp_sessions() {
    mcp_newest = initialize("2025-11-25");
    mcp_batches = initialize("2025-03-26");
  }
};

Served& served() {
  static Served* s = new Served;  // never destroyed: threads still use it at exit
  return *s;
}

// Whether a message of ours reports a fault rather than a refusal: what our
// catch-alls say ("internal error..."), or an nlohmann exception's own text
// passed on as the whole message (a check that should have caught the value
// first). Judged by how a message starts, never by what it quotes: a
// refusal may echo anything the client sent.
bool is_fault(const std::string& message) {
  std::string_view m = message;
  for (std::string_view prefix : {"message refused: ", "internal error in nansense: "}) {
    if (m.substr(0, prefix.size()) == prefix) {
      if (prefix.front() == 'i') return true;
      m.remove_prefix(prefix.size());
    }
  }
  if (m.substr(0, 14) == "internal error") return true;
  return m.substr(0, 16) == "[json.exception." && m.substr(0, 28) != "[json.exception.parse_error.";
}

// Walks a reply: the messages ("error", "message", "text") are judged, and
// a JSON-RPC error with code -32603 (internal error) is a fault. Other
// strings (an "argument" naming what the client sent) are the client's.
bool has_fault(const json& reply, int depth = 0) {
  if (depth > 64) return false;
  if (reply.is_object()) {
    if (reply.contains("code") && reply["code"] == -32603) return true;
    for (const auto& [key, value] : reply.items()) {
      if (value.is_string() && (key == "error" || key == "message" || key == "text") &&
          is_fault(value.get<std::string>())) {
        return true;
      }
      if (has_fault(value, depth + 1)) return true;
    }
  }
  if (reply.is_array()) {
    for (const auto& value : reply) {
      if (has_fault(value, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace

const std::string& scratch_dir() {
  static const std::string dir = [] {
    auto path = std::filesystem::temp_directory_path() / ("nansense-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
    static std::string removed_at_exit = path.string();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed_at_exit, ec);
    });
    return path.string();
  }();
  return dir;
}

server::Server& served_server() { return *served().server; }
const std::string& mcp_session_newest() { return served().mcp_newest; }
const std::string& mcp_session_with_batches() { return served().mcp_batches; }
void renew_mcp_sessions() { served().renew_mcp_sessions(); }

server::HttpRequest page_request(std::string method, std::string path, std::string body) {
  server::HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.body = std::move(body);
  r.headers["host"] = "127.0.0.1:8080";
  r.headers["origin"] = "http://127.0.0.1:8080";
  r.headers["content-type"] = "application/json";
  r.headers["accept"] = "application/json, text/event-stream";
  return r;
}

void check_text(std::string_view text, std::string_view what) {
  // A JSON reply, or an SSE event carrying one.
  std::string_view body = text;
  if (body.substr(0, 6) == "event:") {
    const auto data = body.find("data: ");
    body = data == std::string_view::npos ? std::string_view() : body.substr(data + 6);
  }
  const auto reply = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) {
    std::cerr << "[fuzz] " << what << ": a JSON reply that is not JSON:\n" << text << "\n";
    std::abort();
  }
  if (has_fault(reply)) {
    std::cerr << "[fuzz] " << what << ": a fault, not a refusal:\n" << text << "\n";
    std::abort();
  }
}

void check_response(const server::HttpResponse& response, std::string_view what) {
  if (response.status == 500 || response.status < 100 || response.status > 599) {
    std::cerr << "[fuzz] " << what << ": status " << response.status << "\n" << response.body << "\n";
    std::abort();
  }
  for (const auto& [name, value] : response.headers) {
    if (name.find_first_of("\r\n") != std::string::npos ||
        value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      std::cerr << "[fuzz] " << what << ": header " << name << " carries a line break or NUL\n";
      std::abort();
    }
    if (name == "X-Nansense-Render") check_text(value, what);
  }
  const bool json_reply =
      response.content_type == "application/json" || response.content_type.rfind("text/event-stream", 0) == 0;
  if (json_reply && !response.body.empty()) check_text(response.body, what);
}

}  // namespace nansense::fuzz
