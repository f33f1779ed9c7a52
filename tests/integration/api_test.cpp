// The HTTP API over loopback, driving a real training loop on its own thread.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nansense/nansense.h>

#include <boost/asio.hpp>
#include <future>
#include <thread>

#include "integration/training_fixture.h"
#include "server/http/http_server.h"

namespace {

using nansense::testing::http_request;
using nansense::testing::port_of;
using nansense::testing::Reply;
using nansense::testing::TinyNet;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;

class ApiTest : public TrainingServerTest {};

TEST_F(ApiTest, StatusShowsTheFirstBatchPaused) {
  start();
  json status = wait_paused();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_EQ(status["mode"], "step_batch");
  EXPECT_EQ(status["live_position"]["phase"], "train");
  EXPECT_EQ(status["live_position"]["batch_idx"], 0);
  EXPECT_EQ(status["snapshot_position"]["batch_idx"], 0);
  EXPECT_EQ(status["schedule"]["epochs"], 2);
  ASSERT_EQ(status["schedule"]["phases"].size(), 2u);
  EXPECT_EQ(status["schedule"]["phases"][1]["name"], "val");
  EXPECT_EQ(status["schedule"]["phases"][1]["batches"], 2);
}

TEST_F(ApiTest, ArchitectureListsLayersEdgesAndInputs) {
  start();
  wait_paused();
  json arch = get("/api/architecture").json();
  EXPECT_TRUE(arch["captured"].get<bool>());
  std::vector<std::string> names;
  for (const auto& l : arch["layers"]) names.push_back(l["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"input", "fc1", "relu", "fc2", "log_softmax"}));
  EXPECT_EQ(arch["inputs"], json::array({"input"}));
  EXPECT_EQ(arch["layers"][1]["kind"], "Linear");
  EXPECT_EQ(arch["layers"][1]["output_shape"], json::array({5, 8}));
  EXPECT_EQ(arch["layers"][1]["parameters"], json::array({"fc1.weight", "fc1.bias"}));
  json expected_edges =
      json::array({json{{"from", "input"}, {"to", "fc1"}}, json{{"from", "fc1"}, {"to", "relu"}},
                   json{{"from", "relu"}, {"to", "fc2"}}, json{{"from", "fc2"}, {"to", "log_softmax"}}});
  EXPECT_EQ(arch["edges"], expected_edges);
}

TEST_F(ApiTest, SnapshotSummaryMatchesTheCapturedTensors) {
  start();
  wait_paused();
  json snap = get("/api/snapshot").json();
  auto captured = session_->snapshot();
  ASSERT_TRUE(captured);
  const auto& fc1 = captured->activations.at("fc1");
  json layer;
  for (const auto& l : snap["layers"]) {
    if (l["name"] == "fc1") layer = l;
  }
  ASSERT_FALSE(layer.is_null());
  EXPECT_EQ(layer["activation"]["shape"], json::array({5, 8}));
  EXPECT_EQ(layer["activation"]["dtype"], "float32");
  EXPECT_EQ(layer["activation"]["nan"], 0);
  EXPECT_EQ(layer["activation"]["n"], layer["activation"]["numel"]);
  EXPECT_NEAR(layer["activation"]["min"].get<double>(), fc1.min().item<double>(), 1e-5);
  EXPECT_NEAR(layer["activation"]["max"].get<double>(), fc1.max().item<double>(), 1e-5);
  EXPECT_NEAR(layer["activation"]["mean"].get<double>(), fc1.mean().item<double>(), 1e-5);
  EXPECT_FALSE(layer["gradient"].is_null());
  bool found_momentum = false;
  for (const auto& p : snap["parameters"]) {
    if (p["name"] == "fc1.weight") {
      found_momentum = p["optimizer_state"].contains("momentum_buffer");
      EXPECT_DOUBLE_EQ(p["hyperparameters"]["lr"].get<double>(), 0.1);
    }
  }
  EXPECT_TRUE(found_momentum);
}

TEST_F(ApiTest, RenderLayerServesPngStrips) {
  start();
  wait_paused();
  Reply image = get("/api/render/strip?layer=fc1&kind=activation&sample=2");
  ASSERT_EQ(image.status, 200u) << image.body;
  EXPECT_EQ(image.headers["Content-Type"], "image/png");
  EXPECT_EQ(image.body.substr(1, 3), "PNG");
  json info = json::parse(image.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["layout"], "features");
  EXPECT_EQ(info["width"], 8);
  EXPECT_EQ(info["sample"], 2);
  EXPECT_EQ(info["batch_size"], 5);
  const double expected_max = session_->snapshot()->activations.at("fc1")[2].abs().max().item<double>();
  EXPECT_NEAR(info["scale_max"].get<double>(), expected_max, 1e-5);
  // The same request again is served from the cache, byte for byte.
  EXPECT_EQ(get("/api/render/strip?layer=fc1&kind=activation&sample=2").body, image.body);

  Reply gradient = get("/api/render/strip?layer=relu&kind=gradient&average=true&values=abs");
  ASSERT_EQ(gradient.status, 200u) << gradient.body;
  EXPECT_EQ(json::parse(gradient.headers["X-Nansense-Render"])["scale"], "sequential");

  EXPECT_EQ(get("/api/render/strip?layer=nope").status, 404u);
  EXPECT_NE(get("/api/render/strip?layer=nope").body.find("fc1"), std::string::npos);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=9").status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=x").status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&values=log").status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&kind=weights").status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&colour=red").status, 400u);
  EXPECT_EQ(get("/api/render/strip").status, 400u);
  EXPECT_EQ(http_request(port_, "POST", "/api/render/strip?layer=fc1").status, 405u);
}

// A page asks for pictures of the snapshot it shows; the server draws its
// latest. When the latest replaced the page's and cannot give the picture
// (an eval batch has no gradient, a batch fewer samples), the reply is 204,
// not a refusal of the page's snapshot (which a browser logs as an error).
TEST_F(ApiTest, PicturesOfAReplacedSnapshotAreNoRefusal) {
  start();
  const uint64_t shown = wait_paused()["snapshot_sequence"].get<uint64_t>();
  const std::string gradient = "/api/render/strip?layer=relu&kind=gradient";
  ASSERT_EQ(get(gradient + "&sequence=" + std::to_string(shown)).status, 200u);

  // The page still shows the train batch; the server moved on to an eval one.
  json status = post("/api/step", {{"unit", "phase"}, {"timeout_seconds", 20}}).json();
  ASSERT_EQ(status["snapshot_position"]["phase"], "val");
  const uint64_t latest = status["snapshot_sequence"].get<uint64_t>();
  ASSERT_GT(latest, shown);
  const std::string old_seq = "&sequence=" + std::to_string(shown);
  const std::string new_seq = "&sequence=" + std::to_string(latest);

  Reply replaced = get(gradient + old_seq);
  EXPECT_EQ(replaced.status, 204u) << replaced.body;
  EXPECT_TRUE(replaced.body.empty());
  EXPECT_NE(replaced.headers["X-Nansense-Replaced"].find("snapshot " + std::to_string(shown) +
                                                         " was replaced by snapshot " + std::to_string(latest)),
            std::string::npos)
      << replaced.headers["X-Nansense-Replaced"];
  // The same sample out of range: also the newer batch's, not the page's.
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=9" + old_seq).status, 204u);
  EXPECT_EQ(get("/api/render/input?sample=9" + old_seq).status, 204u);

  // Refusals of the snapshot named, or of none named, stay refusals.
  EXPECT_EQ(get(gradient + new_seq).status, 404u);
  EXPECT_EQ(get(gradient).status, 404u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sample=9" + new_seq).status, 400u);
  EXPECT_EQ(get("/api/render/input?sample=9" + new_seq).status, 400u);
  // A request's own mistake is refused whatever snapshot it names.
  EXPECT_EQ(get("/api/render/strip?layer=fc1&values=log" + old_seq).status, 400u);
  EXPECT_EQ(get("/api/render/strip?layer=fc1&sequence=-1").status, 400u);

  // A picture the newer snapshot can give is drawn from it.
  Reply activation = get("/api/render/strip?layer=fc1&kind=activation" + old_seq);
  ASSERT_EQ(activation.status, 200u) << activation.body;
  EXPECT_EQ(json::parse(activation.headers["X-Nansense-Render"])["sequence"], latest);
  Reply input = get("/api/render/input?sample=1" + old_seq);
  ASSERT_EQ(input.status, 200u) << input.body;
  EXPECT_EQ(json::parse(input.headers["X-Nansense-Render"])["sequence"], latest);
}

TEST_F(ApiTest, StepCommandsMoveThePausePosition) {
  start();
  wait_paused();
  json status = post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_EQ(status["live_position"]["batch_idx"], 1);
  EXPECT_EQ(status["snapshot_position"]["batch_idx"], 1);

  status = post("/api/step", {{"unit", "phase"}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["live_position"]["phase"], "val");
  EXPECT_EQ(status["live_position"]["batch_idx"], 0);

  status = post("/api/step", {{"unit", "epoch"}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["live_position"]["epoch"], 1);
  EXPECT_EQ(status["live_position"]["phase"], "train");
  EXPECT_EQ(status["live_position"]["batch_idx"], 0);

  status = post("/api/run_until", {{"phase", "train"}, {"epoch", 1}, {"batch", 2}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["live_position"]["batch_idx"], 2);

  status = post("/api/run", {{"detach", false}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_TRUE(status["live_position"]["is_last_in_run"].get<bool>());
  EXPECT_EQ(status["live_position"]["phase"], "val");

  status = post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["state"], "finished");
  Reply refused = post("/api/step", {{"unit", "batch"}});
  EXPECT_EQ(refused.status, 409u);
  EXPECT_NE(refused.json()["error"].get<std::string>().find("finished"), std::string::npos);
}

TEST_F(ApiTest, RunUntilRejectsThePastAndUnknownPhases) {
  start();
  wait_paused();
  post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}});
  Reply past = post("/api/run_until", {{"phase", "train"}, {"epoch", 0}, {"batch", 0}});
  EXPECT_EQ(past.status, 400u);
  EXPECT_NE(past.json()["error"].get<std::string>().find("not after the current position"), std::string::npos);
  Reply unknown = post("/api/run_until", {{"phase", "test"}, {"epoch", 1}, {"batch", 0}});
  EXPECT_EQ(unknown.status, 400u);
  const std::string message = unknown.json()["error"];
  EXPECT_NE(message.find("'test'"), std::string::npos);
  EXPECT_NE(message.find("train, val"), std::string::npos);
  Reply out_of_range = post("/api/run_until", {{"phase", "val"}, {"epoch", 0}, {"batch", 7}});
  EXPECT_EQ(out_of_range.status, 400u);
  Reply missing = post("/api/run_until", {{"phase", "val"}, {"epoch", 0}});
  EXPECT_EQ(missing.status, 400u);
  EXPECT_NE(missing.json()["error"].get<std::string>().find("\"batch\""), std::string::npos);
  // Still paused where it was.
  EXPECT_EQ(get("/api/status").json()["live_position"]["batch_idx"], 1);
}

TEST_F(ApiTest, BadRequestsGetClearErrorsAndTrainingGoesOn) {
  start();
  wait_paused();
  auto expect_error = [](const Reply& r, unsigned status, const std::string& fragment) {
    EXPECT_EQ(r.status, status) << r.body;
    auto body = json::parse(r.body);
    ASSERT_TRUE(body.contains("error")) << r.body;
    EXPECT_NE(body["error"].get<std::string>().find(fragment), std::string::npos) << r.body;
  };
  expect_error(http_request(port_, "POST", "/api/step", "{not json"), 400, "malformed JSON");
  expect_error(http_request(port_, "POST", "/api/step", "[1,2]"), 400, "JSON object");
  expect_error(post("/api/step", {{"unit", "fortnight"}}), 400,
               "argument \"unit\" must be \"batch\", \"phase\" or \"epoch\"");
  expect_error(post("/api/step", {{"unit", 3}}), 400, "must be a string");
  expect_error(post("/api/step", {{"units", "batch"}}), 400, "unknown argument \"units\"");
  expect_error(post("/api/run", {{"detach", "yes"}}), 400, "true or false");
  expect_error(post("/api/step", {{"timeout_seconds", -1}}), 400, "timeout_seconds");
  expect_error(http_request(port_, "GET", "/api/step"), 405, "accepts POST");
  expect_error(http_request(port_, "DELETE", "/api/status"), 405, "accepts GET");
  expect_error(get("/api/nothing"), 404, "no API route");
  expect_error(http_request(port_, "GET", "/api/status", "", {{"Host", "evil.example:80"}}), 403, "DNS-rebinding");
  expect_error(http_request(port_, "GET", "/api/status", "", {{"Origin", "http://evil.example"}}), 403, "Origin");
  expect_error(http_request(port_, "GET", "/api/status", "", {{"Host", "127.attacker.example:80"}}), 403,
               "DNS-rebinding");
  expect_error(http_request(port_, "POST", "/api/step", "{}", {{"Origin", "null"}}), 403, "Origin");
  expect_error(http_request(port_, "POST", "/api/step", "{\"unit\":\"batch\"}", {{"Content-Type", "text/plain"}}), 415,
               "application/json");
  expect_error(http_request(port_, "GET", "/%FF%FE"), 404, "not found");
  Reply head = http_request(port_, "HEAD", "/");
  EXPECT_EQ(head.status, 200u);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(head.headers["Content-Length"], std::to_string(http_request(port_, "GET", "/").body.size()));
  // A loopback origin is fine.
  EXPECT_EQ(http_request(port_, "GET", "/api/status", "", {{"Origin", "http://localhost:5173"}}).status, 200u);

  // The server and the loop are unharmed: a step still works.
  json status = post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["live_position"]["batch_idx"], 1);
}

// A route renamed to its concept's one name (docs/guide/differences.md, "One
// name per concept") answers at its old path through the next release exactly
// as at the new one: the same status and body for the same request, a
// refusal included. No old path is any command's current route.
TEST_F(ApiTest, EveryOldRouteAnswersAsTheRouteThatReplacedIt) {
  start();
  wait_paused();
  size_t old_routes = 0;
  for (const auto& c : nansense::server::commands()) {
    for (const auto& old : c.old_routes) {
      ++old_routes;
      ASSERT_TRUE(c.rest) << c.name << ": an old route without a route";
      EXPECT_EQ(old.method, c.rest->method) << old.path;
      for (const auto& other : nansense::server::commands()) {
        EXPECT_FALSE(other.rest && other.rest->path == old.path) << old.path << " is also " << other.name << "'s route";
      }
      const bool get_args = old.method == "GET";
      for (const std::string args : {"", "nonsense"}) {
        const std::string query = get_args && !args.empty() ? "?" + args + "=1" : "";
        const std::string body = get_args ? "" : args.empty() ? "{}" : json{{args, 1}}.dump();
        const Reply now = http_request(port_, old.method, c.rest->path + query, body);
        const Reply then = http_request(port_, old.method, old.path + query, body);
        EXPECT_EQ(then.status, now.status) << old.path << query << body;
        EXPECT_EQ(then.body, now.body) << old.path << query << body;
        EXPECT_EQ(then.status, args.empty() ? 200u : 400u) << old.path << query << body << ": " << then.body;
      }
    }
  }
  EXPECT_GE(old_routes, 1u);
  // Beside the old route, its other methods are refused as the new route's are.
  EXPECT_EQ(http_request(port_, "GET", "/api/settings/update_frequency").status, 405u);
}

TEST_F(ApiTest, OversizedBodyIsRefusedWith413) {
  start();
  wait_paused();
  std::string huge = "{\"unit\":\"" + std::string(2 << 20, 'a') + "\"}";
  Reply reply;
  try {
    reply = http_request(port_, "POST", "/api/step", huge);
  } catch (const std::exception&) {
    // The server may close before the client finished writing; the status is
    // then checked on a fresh connection below instead.
  }
  if (reply.status != 0) {
    EXPECT_EQ(reply.status, 413u);
    EXPECT_NE(reply.body.find("too large"), std::string::npos);
  }
  EXPECT_EQ(get("/api/status").status, 200u);
  EXPECT_EQ(get("/api/status").json()["live_position"]["batch_idx"], 0);
}

TEST_F(ApiTest, PauseStopsARunningLoopAtTheNextBatch) {
  start(/*epochs=*/1000, /*train_batches=*/4, /*val_batches=*/2);
  wait_paused();
  json status = post("/api/run", {{"detach", false}, {"timeout_seconds", 0}}).json();
  EXPECT_EQ(status["mode"], "run");
  EXPECT_EQ(status["state"], "running");
  status = post("/api/pause", {{"timeout_seconds", 20}}).json();
  EXPECT_EQ(status["state"], "paused");
  EXPECT_LT(status["live_position"]["epoch"].get<int64_t>(), 999);
  EXPECT_EQ(status["snapshot_position"], status["live_position"]);
}

TEST_F(ApiTest, RefreshPublishesASnapshotWithoutPausing) {
  start(/*epochs=*/1000, /*train_batches=*/4, /*val_batches=*/2);
  wait_paused();
  post("/api/run", {{"detach", true}});
  json status = post("/api/refresh", {{"timeout_seconds", 20}}).json();
  EXPECT_TRUE(status["refreshed"].get<bool>());
  EXPECT_GT(status["snapshot_sequence"].get<int64_t>(), 1);
  EXPECT_EQ(status["mode"], "detach");
}

TEST_F(ApiTest, ALoopThatThrowsIsReportedLost) {
  // The body of the first batch throws, before the batch could end and pause.
  start(2, 4, 2, /*throw_midway=*/true);
  EXPECT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kLost);
  trainer_.join();
  json status = get("/api/status").json();
  EXPECT_EQ(status["state"], "lost");
  EXPECT_NE(status["lost_reason"].get<std::string>().find("exception"), std::string::npos);
  EXPECT_NE(status["lost_reason"].get<std::string>().find("train batch 0"), std::string::npos);
  EXPECT_EQ(post("/api/step", {{"unit", "batch"}}).status, 409u);
}

TEST_F(ApiTest, APortAlreadyTakenLeavesTrainingRunning) {
  start();
  wait_paused();
  auto model = TinyNet();
  auto second = nansense::start(model, nansense::StartOptions());
  testing::internal::CaptureStderr();
  bool served = nansense::serve(second, nansense::ServeOptions().port(port_).open_browser(false).print_banner(false));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(served);
  EXPECT_NE(err.find("already in use"), std::string::npos) << err;
  EXPECT_NE(err.find("training continues"), std::string::npos) << err;
  EXPECT_EQ(second.url(), "");
  // The second session trains on without a server: nothing could resume a pause.
  EXPECT_EQ(second.mode(), nansense::Mode::kDetach);
  std::vector<torch::Tensor> data = {torch::randn({2, 4}), torch::randn({2, 4})};
  int ran = 0;
  for (auto& x : second.batches(data, "train")) {
    model->forward(x);
    ++ran;
  }
  EXPECT_EQ(ran, 2);
  second.close();
}

TEST(ApiRemoteTest, NonLoopbackBindRequiresTheToken) {
  auto model = TinyNet();
  auto session = nansense::start(model, nansense::StartOptions());
  ASSERT_TRUE(nansense::serve(
      session, nansense::ServeOptions().host("0.0.0.0").port(0).open_browser(false).print_banner(false)));
  const std::string url = session.url();
  auto token_at = url.find("?token=");
  ASSERT_NE(token_at, std::string::npos) << url;
  const std::string token = url.substr(token_at + 7);
  const int port = port_of(url.substr(0, token_at - 1));
  EXPECT_EQ(http_request(port, "GET", "/api/status").status, 401u);
  EXPECT_EQ(http_request(port, "GET", "/api/status?token=wrong").status, 401u);
  EXPECT_EQ(http_request(port, "GET", "/api/status?token=" + token).status, 200u);
  EXPECT_EQ(http_request(port, "GET", "/api/status", "", {{"Authorization", "Bearer " + token}}).status, 200u);
  Reply page = http_request(port, "GET", "/?token=" + token);
  EXPECT_NE(page.headers["Set-Cookie"].find("nansense_token=" + token), std::string::npos);
  EXPECT_EQ(http_request(port, "GET", "/api/status", "", {{"Cookie", "nansense_token=" + token}}).status, 200u);
  session.close();
}

// StartOptions holds one ServeOptions: serve() gives it whole, the shorthands
// set one field of it, and only a port or serve() serves from start().
TEST(ApiStartOptionsTest, ServeOptionsAreHeldWholeAndServedFromStart) {
  auto model = TinyNet();
  auto options = nansense::StartOptions().host("0.0.0.0").mcp(false).open_browser(false).print_banner(false);
  EXPECT_FALSE(options.serve_at_start());
  EXPECT_EQ(options.serve().host(), "0.0.0.0");
  EXPECT_FALSE(options.serve().mcp());
  EXPECT_EQ(options.serve().port(), 8080);
  {
    auto unserved = nansense::start(model, options);
    EXPECT_EQ(unserved.url(), "");
    unserved.close();
  }

  auto whole = nansense::StartOptions().serve(
      nansense::ServeOptions().port(0).open_browser(false).print_banner(false).mcp(false));
  EXPECT_TRUE(whole.serve_at_start());
  auto session = nansense::start(model, whole);
  const int port = port_of(session.url());
  EXPECT_EQ(http_request(port, "GET", "/api/status").status, 200u);
  EXPECT_EQ(http_request(port, "POST", "/mcp", R"({"jsonrpc":"2.0","id":1,"method":"ping"})").status, 404u);
  session.close();
}

TEST(ApiDisabledTest, DisabledSessionServesNothing) {
  auto model = TinyNet();
  auto session = nansense::start(model, nansense::StartOptions().enabled(false).port(0));
  EXPECT_FALSE(session.enabled());
  EXPECT_FALSE(nansense::serve(session, nansense::ServeOptions().port(0)));
  EXPECT_EQ(session.url(), "");
  std::vector<torch::Tensor> data = {torch::randn({2, 4})};
  int ran = 0;
  for (auto& x : session.batches(data, "train")) {
    model->forward(x);
    ++ran;
  }
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(session.snapshot(), nullptr);
}

// A program that ends right after a command (--exit-when-done) stops its
// server while that command's reply is being made: the reply still arrives.
TEST(HttpServerStop, WritesTheRepliesInProgress) {
  std::promise<void> entered;
  std::promise<void> release;
  auto released = release.get_future();
  nansense::server::HttpServer server([&](const nansense::server::HttpRequest&) {
    entered.set_value();
    released.wait();
    nansense::server::HttpResponse res;
    res.body = R"({"done":true})";
    return res;
  });
  server.start("127.0.0.1", 0);
  const int port = server.port();
  auto reply = std::async(std::launch::async, [port] { return http_request(port, "GET", "/api/run"); });
  entered.get_future().wait();

  std::thread stopper([&] { server.stop(); });
  // stop() has begun once the port refuses connections; only then does the
  // handler finish, so its reply is written during the stop.
  for (;;) {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::socket probe(ioc);
    boost::system::error_code ec;
    probe.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
    if (ec) break;
  }
  release.set_value();
  stopper.join();
  Reply r = reply.get();
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, R"({"done":true})");
}

}  // namespace
