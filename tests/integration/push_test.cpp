// The page's side of the server: the WebSocket push channel and the UI files.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>

#include "integration/training_fixture.h"

namespace {

using nansense::testing::http_request;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

// A WebSocket client to /ws that reads frames with a deadline.
class PushClient {
 public:
  explicit PushClient(int port, const std::string& origin = "") : ws_(ioc_) {
    boost::asio::ip::tcp::resolver resolver(ioc_);
    beast::get_lowest_layer(ws_).connect(resolver.resolve("127.0.0.1", std::to_string(port)));
    ws_.set_option(websocket::stream_base::decorator([origin](websocket::request_type& req) {
      if (!origin.empty()) req.set(beast::http::field::origin, origin);
    }));
    ws_.handshake("127.0.0.1:" + std::to_string(port), "/ws");
  }

  // The next frame as JSON; fails the test after `timeout`.
  json next(std::chrono::milliseconds timeout = 10s) {
    beast::get_lowest_layer(ws_).expires_after(timeout);
    beast::flat_buffer buffer;
    ws_.read(buffer);
    return json::parse(beast::buffers_to_string(buffer.data()));
  }

  // Frames until one satisfies `match`.
  json until(const std::function<bool(const json&)>& match) {
    for (int i = 0; i < 50; ++i) {
      json frame = next();
      if (match(frame)) return frame;
    }
    ADD_FAILURE() << "no matching frame in 50";
    return json();
  }

 private:
  boost::asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
};

class PushTest : public TrainingServerTest {};

TEST_F(PushTest, StatusOnConnectThenEveryPauseWithItsSnapshot) {
  start();
  wait_paused();
  PushClient client(port_);
  json first = client.next();
  ASSERT_EQ(first["type"], "status");
  EXPECT_EQ(first["status"]["state"], "paused");
  EXPECT_EQ(first["status"]["live_position"]["batch_idx"], 0);
  EXPECT_TRUE(first["status"].contains("paused_at_ms"));
  EXPECT_FALSE(first["status"]["time_travel"]["available"].get<bool>());

  post("/api/step", {{"unit", "batch"}});
  // The snapshot is published just before the loop pauses: either frame may come first.
  json paused, snapshot;
  client.until([&](const json& f) {
    if (f["type"] == "snapshot") snapshot = f;
    if (f["type"] == "status" && f["status"]["state"] == "paused" && f["status"]["live_position"]["batch_idx"] == 1) {
      paused = f;
    }
    return !paused.is_null() && !snapshot.is_null();
  });
  EXPECT_EQ(paused["status"]["snapshot_position"]["batch_idx"], 1);
  EXPECT_EQ(snapshot["sequence"], paused["status"]["snapshot_sequence"]);
  EXPECT_EQ(snapshot["position"]["batch_idx"], 1);
  EXPECT_EQ(snapshot["batch_size"], 5);
}

TEST_F(PushTest, RunningLoopReportsFinishedAtTheEnd) {
  start(1, 3, 1);
  wait_paused();
  PushClient client(port_);
  client.next();
  post("/api/run", {{"detach", true}});
  json done = client.until([](const json& f) { return f["type"] == "status" && f["status"]["state"] == "finished"; });
  EXPECT_EQ(done["status"]["mode"], "detach");
}

TEST_F(PushTest, ForeignOriginCannotOpenTheChannel) {
  start();
  wait_paused();
  EXPECT_THROW(PushClient(port_, "http://evil.example"), beast::system_error);
  auto plain = get("/ws");
  EXPECT_EQ(plain.status, 426u);
  EXPECT_NE(plain.body.find("WebSocket"), std::string::npos);
}

TEST_F(PushTest, PageAndItsFilesAreServedWithTypesAndCaching) {
  start();
  auto page = get("/");
  ASSERT_EQ(page.status, 200u);
  EXPECT_EQ(page.headers["Content-Type"], "text/html; charset=utf-8");
  EXPECT_EQ(page.headers["Cache-Control"].rfind("no-cache", 0) == 0 || page.headers["Cache-Control"] == "no-store",
            true);
  EXPECT_NE(page.body.find("<html"), std::string::npos);
  EXPECT_EQ(get("/assets/no-such-file.js").status, 404u);
  EXPECT_EQ(get("/../CMakeLists.txt").status, 404u);
  // Every script the page references is served, typed and cached for good.
  size_t at = 0;
  while ((at = page.body.find("/assets/", at)) != std::string::npos) {
    auto end = page.body.find('"', at);
    std::string path = page.body.substr(at, end - at);
    auto file = get(path);
    EXPECT_EQ(file.status, 200u) << path;
    EXPECT_EQ(file.headers["Cache-Control"], "public, max-age=31536000, immutable") << path;
    if (path.ends_with(".js")) EXPECT_EQ(file.headers["Content-Type"], "text/javascript; charset=utf-8");
    if (path.ends_with(".css")) EXPECT_EQ(file.headers["Content-Type"], "text/css; charset=utf-8");
    at = end;
  }
}

TEST_F(PushTest, InputRenderShowsTheSampleAndRejectsBadIndices) {
  start();
  wait_paused();
  auto png = get("/api/render/input?input=0&sample=2");
  ASSERT_EQ(png.status, 200u) << png.body;
  EXPECT_EQ(png.headers["Content-Type"], "image/png");
  json info = json::parse(png.headers["X-Nansense-Render"]);
  EXPECT_EQ(info["name"], "input");
  EXPECT_EQ(info["sample"], 2);
  EXPECT_EQ(info["batch_size"], 5);
  EXPECT_EQ(info["layout"], "strip");  // [N,4] features are no image
  EXPECT_EQ(get("/api/render/input?input=1").status, 400u);
  EXPECT_EQ(get("/api/render/input?sample=5").status, 400u);
  EXPECT_EQ(get("/api/render/input?bogus=1").status, 400u);
  json snapshot = get("/api/snapshot").json();
  EXPECT_EQ(snapshot["batch_size"], 5);
  ASSERT_EQ(snapshot["inputs"].size(), 1u);
  EXPECT_EQ(snapshot["inputs"][0]["shape"], json::array({5, 4}));
}

}  // namespace
