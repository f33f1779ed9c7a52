// Many viewers against one training run: WebSocket viewers watching strips,
// REST pollers, MCP agents and clients parked in long waits, plus slow and
// dead clients (WebSockets that never read, requests sent a byte a second),
// against the demo's CNN training on synthetic data while a driver runs,
// pauses and steps it. Prints how many clients of each kind were served,
// /api/status latency under the load, the process's memory before, during
// and after, and the training thread's CPU time per batch as a ratio to the
// plain loop measured in the same run.
//
// Loopback only, bounded in clients and time. Exits non-zero when a client
// was not served or a request failed in a way no limit explains (the figures
// themselves are printed, never judged: this machine is shared and noisy).
// `--viewers 20 --clients 5 --seconds 5` is the short version the test suite
// runs (tests/load/load_short.sh).

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "integration/http_client.h"

namespace {

using namespace nansense::bench;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// Resident and peak memory of this process, in MiB.
double proc_status_mib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
  }
  return 0;
}
double rss_mib() { return proc_status_mib("VmRSS:"); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

struct HttpReply {
  unsigned status = 0;  // 0: the request failed at the transport
  std::string body;
  std::string session;  // Mcp-Session-Id
};

// The tests' loopback client, with a deadline past the longest wait here
// (60 s) and a failed transport counted rather than thrown.
HttpReply request(int port, const std::string& method, const std::string& target, const std::string& body = "",
                  const std::string& session = "", bool mcp = false) {
  HttpReply out;
  try {
    std::map<std::string, std::string> headers;
    if (mcp) headers["Accept"] = "application/json, text/event-stream";
    if (!session.empty()) headers["Mcp-Session-Id"] = session;
    auto reply = nansense::testing::http_request(port, method, target, body, headers, 120s);
    out.status = reply.status;
    out.body = std::move(reply.body);
    if (auto it = reply.headers.find("Mcp-Session-Id"); it != reply.headers.end()) out.session = it->second;
  } catch (const std::exception&) {
    out.status = 0;
  }
  return out;
}

// What one kind of client saw.
struct Tally {
  std::atomic<int> clients{0};
  std::atomic<int> served{0};   // clients with at least one answered request
  std::atomic<long> ok{0};      // 2xx replies (409: a command refused for the run's state, counted here too)
  std::atomic<long> busy{0};    // 503: a documented limit said no
  std::atomic<long> failed{0};  // transport failures and other statuses
};

void count(Tally& t, const HttpReply& r, bool& served) {
  if ((r.status >= 200 && r.status < 300) || r.status == 409) {
    ++t.ok;
    if (!served) {
      served = true;
      ++t.served;
    }
  } else if (r.status == 503) {
    ++t.busy;
  } else {
    ++t.failed;
    static std::atomic<int> shown{0};
    if (shown++ < 5) std::fprintf(stderr, "load: request answered %u: %.200s\n", r.status, r.body.c_str());
  }
}

// --- WebSocket viewers --------------------------------------------------------

struct ViewerTally {
  std::atomic<int> connected{0};
  std::atomic<int> served{0};  // got a status and, once snapshots came, strips
  std::atomic<long> frames{0};
  std::atomic<long> strips{0};
  std::atomic<int> closed_by_server{0};
  std::atomic<int> failed{0};
};

class Viewer : public std::enable_shared_from_this<Viewer> {
 public:
  Viewer(asio::io_context& ioc, ViewerTally& tally, int index, bool reads)
      : ws_(asio::make_strand(ioc)), tally_(tally), index_(index), reads_(reads) {}

  void start(int port) {
    port_ = port;
    beast::get_lowest_layer(ws_).expires_after(30s);
    beast::get_lowest_layer(ws_).async_connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)),
        [self = shared_from_this()](beast::error_code ec) {
          if (ec) return self->fail();
          self->ws_.async_handshake("127.0.0.1:" + std::to_string(self->port_), "/ws",
                                    [self](beast::error_code ec) { self->on_handshake(ec); });
        });
  }
  // From any thread: close the socket (the read loop ends).
  void stop() {
    stopping_ = true;
    asio::post(ws_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      beast::get_lowest_layer(self->ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(self->ws_).close();
    });
  }

 private:
  void on_handshake(beast::error_code ec) {
    if (ec) return fail();
    beast::get_lowest_layer(ws_).expires_never();
    ++tally_.connected;
    // Strips like a page's: a few layers, most pages on one of a few samples.
    static const char* layers[] = {"features.0", "features.3", "classifier.1", "classifier.4"};
    json strips = json::array();
    for (int i = 0; i < 2; ++i) {
      strips.push_back(
          {{"layer", layers[(index_ + i) % 4]}, {"kind", i == 0 ? "activation" : "gradient"}, {"sample", index_ % 8}});
    }
    watch_ = json{{"type", "watch"}, {"strips", strips}}.dump();
    ws_.text(true);
    ws_.async_write(asio::buffer(watch_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->fail();
      if (self->reads_) self->read();
    });
  }

  void read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        if (!self->stopping_) {
          self->closed_by_server_ = true;
          ++self->tally_.closed_by_server;
        }
        return;
      }
      ++self->tally_.frames;
      if (self->ws_.got_binary()) {
        ++self->tally_.strips;
      } else {
        const std::string text = beast::buffers_to_string(self->buffer_.data());
        if (text.find("\"type\":\"status\"") != std::string::npos) self->got_status_ = true;
        if (text.find("\"type\":\"strips_done\"") != std::string::npos) self->got_strips_done_ = true;
        if (!self->served_ && self->got_status_ && self->got_strips_done_) {
          self->served_ = true;
          ++self->tally_.served;
        }
      }
      self->buffer_.consume(self->buffer_.size());
      self->read();
    });
  }

  void fail() {
    if (!stopping_) ++tally_.failed;
  }

  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::string watch_;
  ViewerTally& tally_;
  int index_;
  bool reads_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  bool got_status_ = false;
  bool got_strips_done_ = false;
  bool served_ = false;
  bool closed_by_server_ = false;
};

// A request sent a byte a second: the server must close it when the
// request time runs out. Returns the seconds it held on (or -1: never closed).
double slow_loris(int port, const std::atomic<bool>& stop) {
  const std::string request = "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + std::string(400, 'a');
  const auto start = Clock::now();
  try {
    asio::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    for (char c : request) {
      if (stop) return -1;
      boost::system::error_code ec;
      asio::write(socket, asio::buffer(&c, 1), ec);
      if (ec) break;
      std::this_thread::sleep_for(1s);
      // Closed by the server: a read would end at once.
      socket.non_blocking(true);
      char b;
      socket.read_some(asio::buffer(&b, 1), ec);
      socket.non_blocking(false);
      if (ec && ec != asio::error::would_block) break;
    }
  } catch (const std::exception&) {
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Many viewers, agents and waiting clients against a training run: who was served, status latency, "
      "memory, and the training loop's cost under the load"};
  int viewers = 200;
  int clients = 50;
  int stalled = 5;
  int loris = 5;
  double seconds = 30;
  double request_timeout = 10;
  int64_t batch_size = 64;
  app.add_option("--viewers", viewers, "WebSocket viewers watching two strips each")->check(CLI::Range(0, 1000));
  app.add_option("--clients", clients, "REST and MCP clients (40% parked in long waits)")->check(CLI::Range(0, 200));
  app.add_option("--stalled", stalled, "WebSocket viewers that never read")->check(CLI::Range(0, 100));
  app.add_option("--loris", loris, "clients sending a request a byte a second")->check(CLI::Range(0, 100));
  app.add_option("--seconds", seconds, "how long the load runs")->check(CLI::Range(1.0, 600.0));
  app.add_option("--request-timeout", request_timeout, "ServeLimits::request_timeout, seconds")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--batch-size", batch_size, "training batch size")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  torch::set_num_threads(1);
  torch::manual_seed(0);
  auto batches = synthetic_batches(32, batch_size);
  const double rss_start = rss_mib();

  // The plain loop's CPU time per batch, on the thread that trains.
  auto plain_round = [&](int n) {
    FashionCnn model;
    torch::optim::Adam optimizer(model->parameters(), 1e-3);
    std::vector<double> per_batch;
    for (int i = 0; i < n; ++i) {
      const double t0 = thread_cpu_ms();
      train_step(model, optimizer, batches[static_cast<size_t>(i) % batches.size()]);
      per_batch.push_back(thread_cpu_ms() - t0);
    }
    return per_batch;
  };
  std::vector<double> plain = plain_round(40);

  // The served run: train batches forever, until the load is over.
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), 1e-3);
  auto session = nansense::start(model, nansense::StartOptions().optimizer(&optimizer));
  if (!nansense::serve(session, nansense::ServeOptions().port(0).open_browser(false).print_banner(false).limits(
                                    nansense::ServeLimits().request_timeout(
                                        std::chrono::milliseconds(static_cast<int64_t>(request_timeout * 1000)))))) {
    std::fprintf(stderr, "load: cannot serve\n");
    return 1;
  }
  const std::string url = session.url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::atomic<bool> training_done{false};
  std::atomic<bool> measure{false};
  std::mutex served_mu;
  std::vector<double> served_batches;
  long epochs = 0;
  std::thread trainer([&] {
    try {
      while (!training_done) {
        double last = -1;
        for (auto& batch : session.batches(batches, "train")) {
          // From one batch's start to the next: the iterator's work (pauses
          // aside, which cost no CPU) and the step.
          const double now = thread_cpu_ms();
          if (last >= 0 && measure) {
            std::lock_guard lock(served_mu);
            served_batches.push_back(now - last);
          }
          last = now;
          train_step(model, optimizer, batch);
          if (training_done) break;
        }
        ++epochs;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "load: training loop: %s\n", e.what());
    }
  });
  session.wait_until_stopped(30s);  // paused on its first batch
  const double rss_served = rss_mib();

  std::atomic<bool> stop{false};
  // Viewers on one I/O thread, as a browser's sockets would be elsewhere.
  asio::io_context viewer_ioc;
  auto viewer_work = asio::make_work_guard(viewer_ioc);
  std::thread viewer_thread([&] { viewer_ioc.run(); });
  ViewerTally viewer_tally, stalled_tally;
  std::vector<std::shared_ptr<Viewer>> all_viewers;
  for (int i = 0; i < viewers + stalled; ++i) {
    const bool reads = i < viewers;
    auto v = std::make_shared<Viewer>(viewer_ioc, reads ? viewer_tally : stalled_tally, i, reads);
    v->start(port);
    all_viewers.push_back(v);
  }

  // REST and MCP clients.
  Tally waiters, pollers, agents;
  std::vector<std::thread> client_threads;
  const int n_waiters = clients * 2 / 5;
  const int n_agents = (clients - n_waiters) / 2;
  const int n_pollers = clients - n_waiters - n_agents;
  for (int i = 0; i < n_waiters; ++i) {
    client_threads.emplace_back([&, i] {
      ++waiters.clients;
      bool served = false;
      const bool via_mcp = i % 2 == 1;
      std::string mcp_session;
      if (via_mcp) {
        auto r = request(port, "POST", "/mcp",
                         json{{"jsonrpc", "2.0"},
                              {"id", 0},
                              {"method", "initialize"},
                              {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", json::object()}}}}
                             .dump(),
                         "", true);
        count(waiters, r, served);
        mcp_session = r.session;
      }
      int id = 1;
      while (!stop) {
        // A long wait on the next pause, only while the driver runs the loop
        // (sent while paused it would resume what the driver paused, during
        // a step it would turn the step into a run).
        auto status = request(port, "GET", "/api/status");
        count(waiters, status, served);
        if (status.status != 200 || status.body.find("\"state\":\"running\"") == std::string::npos ||
            status.body.find("\"mode\":\"run\"") == std::string::npos) {
          std::this_thread::sleep_for(200ms);
          continue;
        }
        if (via_mcp) {
          count(waiters,
                request(port, "POST", "/mcp",
                        json{{"jsonrpc", "2.0"},
                             {"id", id++},
                             {"method", "tools/call"},
                             {"params", {{"name", "run"}, {"arguments", {{"timeout_seconds", 60}}}}}}
                            .dump(),
                        mcp_session, true),
                served);
        } else {
          count(waiters, request(port, "POST", "/api/run", R"({"timeout_seconds":60})"), served);
        }
      }
    });
  }
  for (int i = 0; i < n_pollers; ++i) {
    client_threads.emplace_back([&, i] {
      ++pollers.clients;
      bool served = false;
      const std::vector<std::string> targets = {"/api/status",
                                                "/api/snapshot",
                                                "/api/stats/layers?layers=features.0,classifier.1",
                                                "/api/render/strip?layer=features.3&sample=" + std::to_string(i % 64),
                                                "/api/architecture",
                                                "/"};
      for (size_t k = 0; !stop; ++k) {
        count(pollers, request(port, "GET", targets[k % targets.size()]), served);
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  for (int i = 0; i < n_agents; ++i) {
    client_threads.emplace_back([&, i] {
      ++agents.clients;
      bool served = false;
      auto r = request(port, "POST", "/mcp",
                       json{{"jsonrpc", "2.0"},
                            {"id", 0},
                            {"method", "initialize"},
                            {"params", {{"protocolVersion", "2025-06-18"}, {"capabilities", json::object()}}}}
                           .dump(),
                       "", true);
      count(agents, r, served);
      const std::string mcp_session = r.session;
      const std::vector<json> calls = {
          {{"name", "get_status"}},
          {{"name", "get_layer_stats"}, {"arguments", {{"layers", {"features.0"}}, {"include_histogram", true}}}},
          {{"name", "render_layer"}, {"arguments", {{"layers", {"classifier.1"}}, {"sample", i % 64}}}},
          {{"name", "get_weight_stats"}, {"arguments", {{"layer", "features.3"}}}}};
      for (int id = 1; !stop; ++id) {
        count(agents,
              request(port, "POST", "/mcp",
                      json{{"jsonrpc", "2.0"},
                           {"id", id},
                           {"method", "tools/call"},
                           {"params", calls[static_cast<size_t>(id) % calls.size()]}}
                          .dump(),
                      mcp_session, true),
              served);
        std::this_thread::sleep_for(200ms);
      }
    });
  }

  // Slow clients.
  std::vector<double> loris_held(static_cast<size_t>(loris), -1);
  std::vector<std::thread> loris_threads;
  for (int i = 0; i < loris; ++i) {
    loris_threads.emplace_back([&, i] { loris_held[static_cast<size_t>(i)] = slow_loris(port, stop); });
  }

  // /api/status latency, as a page polling it would see it.
  std::vector<double> latencies;
  long status_failures = 0;
  std::thread probe([&] {
    while (!stop) {
      const auto t0 = Clock::now();
      auto r = request(port, "GET", "/api/status");
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (r.status == 200) {
        latencies.push_back(ms);
      } else {
        ++status_failures;
      }
      std::this_thread::sleep_for(20ms);
    }
  });

  // The driver: run, pause, step, run again, for the load's length.
  const auto start = Clock::now();
  const auto end = start + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  double rss_peak = rss_mib();
  // Memory at each tenth of the run: bounded means flat once every client
  // is in, not small.
  std::vector<double> rss_trace;
  auto sample_rss = [&] {
    const double rss = rss_mib();
    rss_peak = std::max(rss_peak, rss);
    const auto tenth = static_cast<size_t>(10 * (Clock::now() - start) / (end - start));
    while (rss_trace.size() <= std::min<size_t>(tenth, 10)) rss_trace.push_back(rss);
  };
  int pauses = 0, steps = 0;
  measure = true;
  while (Clock::now() < end) {
    request(port, "POST", "/api/run", R"({"timeout_seconds":0})");
    for (int i = 0; i < 10 && Clock::now() < end; ++i) {
      std::this_thread::sleep_for(200ms);
      sample_rss();
    }
    if (request(port, "POST", "/api/pause", R"({"timeout_seconds":10})").status == 200) ++pauses;
    for (int i = 0; i < 2 && Clock::now() < end; ++i) {
      if (request(port, "POST", "/api/step", R"({"unit":"batch","timeout_seconds":10})").status == 200) ++steps;
    }
    sample_rss();
  }
  measure = false;
  const double load_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // Everyone leaves; the run is let go and ends (closing the session ends
  // the waits still open; the server stays up until the session goes).
  stop = true;
  training_done = true;
  session.detach();
  trainer.join();
  session.close();
  for (auto& v : all_viewers) v->stop();
  for (auto& t : client_threads) t.join();
  for (auto& t : loris_threads) t.join();
  probe.join();
  viewer_work.reset();
  viewer_thread.join();
  all_viewers.clear();
  const double rss_after = rss_mib();
  const double rss_hwm = proc_status_mib("VmHWM:");

  // The plain loop again, so the ratio spans the run.
  for (double ms : plain_round(40)) plain.push_back(ms);
  const double plain_ms = median(plain);
  const double served_ms = median(served_batches);

  auto line = [](const char* name, Tally& t) {
    std::printf("  %-26s %4d of %4d served   %7ld ok  %5ld busy (503)  %4ld failed\n", name, t.served.load(),
                t.clients.load(), t.ok.load(), t.busy.load(), t.failed.load());
  };
  std::printf("load: %.1f s, %d viewers (+%d that never read), %d REST/MCP clients (+%d a byte a second)\n",
              load_seconds, viewers, stalled, clients, loris);
  std::printf("  %-26s %4d of %4d served   %7ld frames (%ld strips)  %d closed by the server  %d failed\n",
              "WebSocket viewers", viewer_tally.served.load(), viewers, viewer_tally.frames.load(),
              viewer_tally.strips.load(), viewer_tally.closed_by_server.load(), viewer_tally.failed.load());
  line("clients in long waits", waiters);
  line("REST pollers", pollers);
  line("MCP agents", agents);
  std::printf("  %-26s %4d of %d connected (their queues are capped; see memory)\n", "viewers that never read",
              stalled_tally.connected.load(), stalled);
  int loris_closed = 0;
  double loris_max = 0;
  for (double s : loris_held) {
    if (s >= 0 && s < load_seconds + 5) ++loris_closed;
    loris_max = std::max(loris_max, s);
  }
  std::printf("  %-26s %4d of %d closed by the server, held at most %.1f s (request timeout %.1f s)\n",
              "byte-a-second clients", loris_closed, loris, loris_max, request_timeout);
  std::printf("run control: %d pauses, %d steps, %ld epochs of %zu batches\n", pauses, steps, epochs, batches.size());
  std::printf("/api/status under load: %zu requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %ld failed\n",
              latencies.size(), percentile(latencies, 0.5), percentile(latencies, 0.99),
              latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end()), status_failures);
  std::printf(
      "memory (RSS): %.0f MiB at start, %.0f MiB served, %.0f MiB peak under load, %.0f MiB after "
      "(high-water mark %.0f MiB)\n  under load, each tenth of the run:",
      rss_start, rss_served, rss_peak, rss_after, rss_hwm);
  for (double rss : rss_trace) std::printf(" %.0f", rss);
  std::printf(" MiB\n");
  std::printf("training CPU per batch: plain %.2f ms, served under load %.2f ms (%zu batches): ratio %.3f\n", plain_ms,
              served_ms, served_batches.size(), plain_ms > 0 ? served_ms / plain_ms : 0);

  // Served means answered, not fast: every client that should be answered was.
  bool ok = true;
  auto require = [&](bool condition, const char* what) {
    if (!condition) {
      std::printf("NOT SERVED: %s\n", what);
      ok = false;
    }
  };
  require(viewer_tally.connected == viewers && viewer_tally.failed == 0, "a viewer could not connect");
  require(viewer_tally.served == viewers, "a viewer got no status or no strips");
  require(viewer_tally.closed_by_server == 0, "a reading viewer was closed by the server");
  require(waiters.served == waiters.clients && pollers.served == pollers.clients && agents.served == agents.clients,
          "a REST or MCP client got no answer");
  require(waiters.failed + pollers.failed + agents.failed == 0, "a REST or MCP request failed");
  require(status_failures == 0 && !latencies.empty(), "a /api/status request failed");
  require(loris_closed == loris, "a byte-a-second client was never closed");
  require(!served_batches.empty(), "the loop trained no batch under the load");
  return ok ? 0 : 1;
}
