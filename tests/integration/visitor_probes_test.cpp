// Per-visitor probes on a locked, parked session (a loaded moment, as the
// playground serves it), over loopback: each visitor (a cookie jar, an MCP
// session) pins, perturbs and switches eval/train for its own view only;
// every other visitor's status, probe, snapshot and pictures stay byte for
// byte what they were; the bound on probe runs in flight refuses one more
// with a reason; a forged or absent cookie gets a fresh slot of its own; the
// least recently used visitor makes room past the visitor cap.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <boost/beast/websocket.hpp>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "experiments/visitor_probes.h"
#include "integration/mcp_client.h"
#include "integration/training_fixture.h"

// Named, not anonymous: the integration tests are a unity build, and the
// moment tests' helpers live in an anonymous namespace of the same unit.
namespace visitor_probes_test {

using nansense::testing::http_request;
using nansense::testing::McpClient;
using nansense::testing::port_of;
using nansense::testing::Reply;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// With dropout: eval and train re-runs differ, so a mode shows in the pictures.
struct DropNetImpl : torch::nn::Module {
  DropNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    drop = register_module("drop", torch::nn::Dropout(0.5));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return torch::log_softmax(fc2(drop(torch::relu(fc1(x)))), 1); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(DropNet);

// A browser: the cookie the server issued it, sent back on every request.
class Visitor {
 public:
  explicit Visitor(int port) : port_(port) {}
  Reply request(const std::string& method, const std::string& target, const json& body = nullptr) {
    std::map<std::string, std::string> headers;
    if (!cookie_.empty()) headers["Cookie"] = "nansense_visitor=" + cookie_;
    Reply r = http_request(port_, method, target, body.is_null() ? "" : body.dump(), headers);
    if (auto it = r.headers.find("Set-Cookie"); it != r.headers.end()) {
      const std::string& v = it->second;
      const std::string key = "nansense_visitor=";
      if (v.rfind(key, 0) == 0) {
        EXPECT_NE(v.find("HttpOnly"), std::string::npos) << v;
        EXPECT_NE(v.find("SameSite=Strict"), std::string::npos) << v;
        issued_ = v.substr(key.size(), v.find(';') - key.size());
        cookie_ = issued_;
      }
    }
    return r;
  }
  json get(const std::string& target) {
    Reply r = request("GET", target);
    EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
    return r.status == 200 ? r.json() : json();
  }
  json post(const std::string& target, const json& body) {
    Reply r = request("POST", target, body);
    EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
    return r.status == 200 ? r.json() : json();
  }
  // What this visitor is shown: status, probe, snapshot and pictures.
  std::map<std::string, std::string> views() {
    std::map<std::string, std::string> out;
    for (const std::string target :
         {"/api/status", "/api/probe", "/api/snapshot", "/api/render/strip?layer=fc1&kind=activation",
          "/api/render/strip?layer=fc2&kind=activation&sample=1", "/api/render/input?sample=1",
          "/api/stats/layers?layers=fc2"}) {
      Reply r = request("GET", target);
      EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
      // The status's paused_at and such do not change while parked.
      out[target] = r.body + "|" + r.headers["X-Nansense-Render"];
    }
    return out;
  }
  // What views() shows less the status, the probe and the sequence numbers:
  // the moment's content. A probe ended shows the live snapshot again under
  // a newer sequence (pages move forward to it), and keeps its run count.
  std::map<std::string, std::string> content() {
    std::map<std::string, std::string> out;
    for (const std::string target : {"/api/snapshot", "/api/render/strip?layer=fc1&kind=activation",
                                     "/api/render/strip?layer=fc2&kind=activation&sample=1",
                                     "/api/render/input?sample=1", "/api/stats/layers?layers=fc2"}) {
      Reply r = request("GET", target);
      EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
      if (r.headers["Content-Type"].rfind("application/json", 0) == 0) {
        json body = json::parse(r.body);
        body.erase("sequence");
        out[target] = body.dump();
      } else {
        out[target] = r.body;
      }
    }
    return out;
  }
  void set_cookie(std::string cookie) { cookie_ = std::move(cookie); }
  const std::string& cookie() const { return cookie_; }
  const std::string& issued() const { return issued_; }

 private:
  int port_;
  std::string cookie_;
  std::string issued_;  // the last id the server issued to this jar
};

// The first status frame a page with `cookie` gets on the push channel.
json first_pushed_status(int port, const std::string& cookie) {
  namespace beast = boost::beast;
  namespace websocket = beast::websocket;
  boost::asio::io_context ioc;
  websocket::stream<beast::tcp_stream> ws(ioc);
  boost::asio::ip::tcp::resolver resolver(ioc);
  beast::get_lowest_layer(ws).connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  ws.set_option(websocket::stream_base::decorator([cookie](websocket::request_type& req) {
    if (!cookie.empty()) req.set(beast::http::field::cookie, "nansense_visitor=" + cookie);
  }));
  ws.handshake("127.0.0.1:" + std::to_string(port), "/ws");
  beast::get_lowest_layer(ws).expires_after(10s);
  beast::flat_buffer buffer;
  ws.read(buffer);
  json frame = json::parse(beast::buffers_to_string(buffer.data()));
  beast::error_code ec;
  ws.close(websocket::close_code::normal, ec);
  return frame;
}

// The model's forward, held at a gate the test opens: probe runs queue
// behind the one the training thread is in.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  void close() {
    std::lock_guard lock(mu);
    open = false;
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  void pass() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  }
};

class VisitorProbesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nansense_visitors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    const std::string path = (dir_ / "demo.moment").string();
    {
      // A short run, frozen at epoch 0, train batch 2, detached.
      torch::manual_seed(0);
      DropNet net;
      torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
      std::vector<std::pair<torch::Tensor, torch::Tensor>> train;
      for (int i = 0; i < 4; ++i) train.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
      auto session = nansense::start(net, nansense::StartOptions()
                                              .epochs(1)
                                              .phases(nansense::PhaseCounts{{"train", 4}})
                                              .optimizer(&optimizer)
                                              .stats_scope(nansense::StatsScope::kAll));
      session.freeze_moment(path, "train", 0, 2);
      session.detach();
      for (auto& batch : session.batches(train, "train")) {
        optimizer.zero_grad();
        torch::nll_loss(net->forward(batch.first), batch.second).backward();
        optimizer.step();
      }
      session.close();
      ASSERT_TRUE(fs::exists(path));
    }
    model_ = DropNet();
    session_ = std::make_unique<nansense::Session>(nansense::load_moment(
        model_, path,
        [net = model_](torch::nn::Module&, const std::vector<torch::Tensor>& item) mutable {
          return torch::nll_loss(net->forward(item[0]), item[1]);
        },
        nansense::ServeOptions().port(0).open_browser(false).print_banner(false)));
    session_->set_forward([this, net = model_](const std::vector<torch::Tensor>& in) mutable {
      gate_.pass();
      return net->forward(in.at(0));
    });
    session_->lock();
    parked_ = std::thread([this] { session_->park(); });
    ASSERT_EQ(session_->wait_until_stopped(30s), nansense::RunState::kPaused);
    port_ = port_of(session_->url());
  }
  void TearDown() override {
    gate_.release();
    if (session_) session_->close();
    if (parked_.joinable()) parked_.join();
    session_.reset();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  DropNet model_{nullptr};
  Gate gate_;
  std::unique_ptr<nansense::Session> session_;
  std::thread parked_;
  int port_ = 0;
};

TEST_F(VisitorProbesTest, EachVisitorsProbeChangesOnlyItsOwnView) {
  Visitor a(port_), b(port_);
  a.get("/api/status");
  b.get("/api/status");
  ASSERT_EQ(a.cookie().size(), 32u) << "no visitor cookie issued";
  ASSERT_EQ(b.cookie().size(), 32u);
  EXPECT_NE(a.cookie(), b.cookie());
  const json shared_status = b.get("/api/status");
  ASSERT_EQ(shared_status["locked"], true);
  const auto b_before = b.views();
  const auto b_content = b.content();
  const json shared_snapshot = b.get("/api/snapshot");
  ASSERT_EQ(shared_snapshot["probe"], nullptr);

  // A pins, switches to train mode (dropout on) and perturbs: its own view shows it.
  json pinned = a.post("/api/probe/pin", {{"timeout_seconds", 10}});
  EXPECT_EQ(pinned["active"], true) << pinned;
  ASSERT_NE(pinned["result"], nullptr) << pinned;
  EXPECT_NE(pinned["hint"].get<std::string>().find("yours alone"), std::string::npos) << pinned;
  json mode = a.post("/api/probe/mode", {{"mode", "train"}, {"timeout_seconds", 10}});
  EXPECT_EQ(mode["mode"], "train") << mode;
  json perturbed =
      a.post("/api/probe/perturb", {{"index", {1}}, {"values", {6.0}}, {"sample", 1}, {"timeout_seconds", 10}});
  ASSERT_NE(perturbed["result"], nullptr) << perturbed;
  EXPECT_EQ(perturbed["result"]["diff"], true) << perturbed;
  const json a_status = a.get("/api/status");
  EXPECT_EQ(a_status["probe"]["active"], true);
  EXPECT_EQ(a_status["probe"]["mode"], "train");
  EXPECT_GT(a_status["snapshot_sequence"].get<uint64_t>(), shared_status["snapshot_sequence"].get<uint64_t>());
  const json a_snapshot = a.get("/api/snapshot");
  ASSERT_NE(a_snapshot["probe"], nullptr) << a_snapshot;
  EXPECT_EQ(a_snapshot["probe"]["mode"], "train");
  EXPECT_EQ(a_snapshot["probe"]["diff"], true);
  const auto a_views = a.views();
  EXPECT_NE(a_views.at("/api/render/strip?layer=fc2&kind=activation&sample=1"),
            b_before.at("/api/render/strip?layer=fc2&kind=activation&sample=1"))
      << "A's probe does not show in A's pictures";
  EXPECT_NE(a_views.at("/api/render/input?sample=1"), b_before.at("/api/render/input?sample=1"));

  // B, and a newcomer without a cookie, see the shared moment as it was.
  EXPECT_EQ(b.views(), b_before) << "A's probe changed what B sees";
  Visitor anonymous(port_);
  const json fresh = anonymous.get("/api/probe");
  EXPECT_EQ(fresh["active"], false) << fresh;
  EXPECT_EQ(anonymous.get("/api/snapshot"), shared_snapshot);
  EXPECT_EQ(anonymous.issued().size(), 32u);
  EXPECT_NE(anonymous.issued(), a.cookie());
  EXPECT_NE(anonymous.issued(), b.cookie());
  // The push channel: each page's first status is its own visitor's.
  EXPECT_EQ(first_pushed_status(port_, a.cookie())["status"]["probe"]["mode"], "train");
  const json b_pushed = first_pushed_status(port_, b.cookie())["status"];
  EXPECT_EQ(b_pushed["probe"]["active"], false) << b_pushed;
  EXPECT_EQ(b_pushed["snapshot_sequence"], shared_status["snapshot_sequence"]);

  // B does its own (eval mode); A's view is untouched by it.
  json b_mode = b.post("/api/probe/mode", {{"mode", "eval"}, {"timeout_seconds", 10}});
  EXPECT_EQ(b_mode["mode"], "eval") << b_mode;
  EXPECT_EQ(b_mode["pinned"], false);
  EXPECT_EQ(b_mode["perturbations"], json::array());
  ASSERT_NE(b_mode["result"], nullptr) << b_mode;
  EXPECT_EQ(b.get("/api/snapshot")["probe"]["mode"], "eval");
  EXPECT_EQ(a.views(), a_views) << "B's probe changed what A sees";
  // Ending B's probe gives B the shared view back; A keeps its own.
  const uint64_t b_probe_sequence = b.get("/api/status")["snapshot_sequence"];
  b.post("/api/probe/mode", {{"mode", "unchanged"}, {"timeout_seconds", 10}});
  EXPECT_EQ(b.content(), b_content);
  EXPECT_EQ(b.get("/api/snapshot")["probe"], nullptr);
  EXPECT_GT(b.get("/api/status")["snapshot_sequence"].get<uint64_t>(), b_probe_sequence)
      << "the shared view came back under an older sequence: pages would not move to it";
  EXPECT_EQ(a.views(), a_views);

  // MCP: each session is a visitor of its own.
  McpClient one(port_), two(port_);
  one.initialize();
  two.initialize();
  json mcp_pin = one.tool("pin_batch", {{"timeout_seconds", 10}});
  EXPECT_EQ(mcp_pin["isError"], false) << mcp_pin;
  EXPECT_EQ(mcp_pin["structuredContent"]["active"], true) << mcp_pin;
  json other = two.tool("get_probe_status", json::object());
  EXPECT_EQ(other["structuredContent"]["active"], false) << other;
  EXPECT_EQ(b.content(), b_content);
  EXPECT_EQ(a.views(), a_views);

  // Nothing a visitor did changed the run.
  EXPECT_EQ(session_->state(), nansense::RunState::kPaused);
  // (B ended its probe: it sees the moment under a newer sequence; a new
  // visitor sees the shared view exactly as it was.)
  const json after = Visitor(port_).get("/api/status");
  EXPECT_EQ(after["snapshot_sequence"], shared_status["snapshot_sequence"]);
  EXPECT_EQ(after["state"], "paused");
}

TEST_F(VisitorProbesTest, ForgedAndAbsentCookiesGetAFreshSlot) {
  Visitor a(port_);
  a.get("/api/status");
  a.post("/api/probe/pin", {{"timeout_seconds", 10}});
  ASSERT_EQ(a.get("/api/probe")["active"], true);
  const std::string id = a.cookie();

  // A made-up id of the right form is a visitor of its own: nothing of A's.
  std::string guess = id;
  guess[0] = guess[0] == '0' ? '1' : '0';
  Visitor forger(port_);
  forger.set_cookie(guess);
  EXPECT_EQ(forger.get("/api/probe")["active"], false);
  EXPECT_EQ(forger.get("/api/snapshot")["probe"], nullptr);
  EXPECT_TRUE(forger.issued().empty()) << "a well-formed cookie is kept";
  // Its own change stays its own, and A keeps its pin.
  forger.post("/api/probe/mode", {{"mode", "eval"}, {"timeout_seconds", 10}});
  EXPECT_EQ(forger.get("/api/probe")["pinned"], false);
  EXPECT_EQ(a.get("/api/probe")["mode"], "unchanged");
  EXPECT_EQ(a.get("/api/probe")["pinned"], true);

  // A malformed cookie (another's id padded, a path, empty) is replaced by a fresh one.
  for (const std::string bad : {id + "0", std::string("../") + id, std::string(""), id.substr(0, 31) + "G"}) {
    Visitor odd(port_);
    odd.set_cookie(bad);
    const json probe = odd.get("/api/probe");
    EXPECT_EQ(probe["active"], false) << bad;
    EXPECT_EQ(odd.issued().size(), 32u) << bad;
    EXPECT_NE(odd.issued(), id) << bad;
  }
  // Probe changes without a visitor are refused on a locked session (not
  // applied to anyone): the session's own API has no visitor.
  EXPECT_EQ(a.get("/api/probe")["pinned"], true);
}

TEST_F(VisitorProbesTest, RunsInFlightAreBoundedAcrossVisitors) {
  const size_t bound = nansense::experiments::VisitorProbes::Limits{}.runs_in_flight;
  std::vector<std::unique_ptr<Visitor>> visitors;
  for (size_t i = 0; i <= bound; ++i) {
    visitors.push_back(std::make_unique<Visitor>(port_));
    visitors.back()->get("/api/status");
  }
  // Every run is held at the model's forward: they stay in flight.
  gate_.close();
  for (size_t i = 0; i < bound; ++i) {
    json r = visitors[i]->post("/api/probe/pin", {{"timeout_seconds", 0}});
    EXPECT_EQ(r["pending"], true) << i << ": " << r;
  }
  // A visitor's further change while its own run is in flight passes (it counts once).
  json again = visitors[0]->post("/api/probe/mode", {{"mode", "eval"}, {"timeout_seconds", 0}});
  EXPECT_EQ(again["mode"], "eval") << again;
  // One more visitor's run is refused, saying why.
  Reply refused = visitors[bound]->request("POST", "/api/probe/pin", {{"timeout_seconds", 0}});
  EXPECT_EQ(refused.status, 409u) << refused.body;
  EXPECT_NE(refused.body.find("too many probe runs in flight"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("at most " + std::to_string(bound)), std::string::npos) << refused.body;
  EXPECT_EQ(visitors[bound]->get("/api/probe")["active"], false);
  // Ending a probe always passes.
  Reply ended = visitors[bound]->request("POST", "/api/probe/clear", json::object());
  EXPECT_EQ(ended.status, 200u) << ended.body;

  gate_.release();
  for (size_t i = 0; i < bound; ++i) {
    // Waits for its own run (re-pinning the same batch).
    json r = visitors[i]->post("/api/probe/pin", {{"timeout_seconds", 30}});
    EXPECT_EQ(r["pending"], false) << i << ": " << r;
    ASSERT_NE(r["result"], nullptr) << i << ": " << r;
  }
  EXPECT_EQ(visitors[0]->get("/api/probe")["mode"], "eval");
  json now = visitors[bound]->post("/api/probe/pin", {{"timeout_seconds", 30}});
  EXPECT_EQ(now["active"], true) << now;
  EXPECT_NE(now["result"], nullptr) << now;
}

TEST_F(VisitorProbesTest, TheLeastRecentlyUsedVisitorMakesRoomPastTheCap) {
  const size_t cap = nansense::experiments::VisitorProbes::Limits{}.visitors;
  std::vector<std::unique_ptr<Visitor>> visitors;
  for (size_t i = 0; i < cap; ++i) {
    visitors.push_back(std::make_unique<Visitor>(port_));
    json r = visitors.back()->post("/api/probe/pin", {{"timeout_seconds", 30}});
    ASSERT_EQ(r["active"], true) << i << ": " << r;
  }
  // Visitor 0 is used again: visitor 1 is now the least recent.
  ASSERT_EQ(visitors[0]->get("/api/probe")["pinned"], true);
  Visitor late(port_);
  json r = late.post("/api/probe/pin", {{"timeout_seconds", 30}});
  EXPECT_EQ(r["active"], true) << r;
  EXPECT_EQ(visitors[1]->get("/api/probe")["active"], false) << "the least recent visitor kept its slot";
  EXPECT_EQ(visitors[1]->get("/api/snapshot")["probe"], nullptr);
  EXPECT_EQ(visitors[0]->get("/api/probe")["pinned"], true);
  EXPECT_EQ(visitors[2]->get("/api/probe")["pinned"], true);
  EXPECT_EQ(late.get("/api/probe")["pinned"], true);
}

}  // namespace visitor_probes_test
