// The page's side of the server: the WebSocket push channel and the UI files.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <set>

#include "integration/training_fixture.h"

namespace {

using nansense::testing::expect_wire;
using nansense::testing::http_request;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace websocket = beast::websocket;

// The JSON header of a binary strip frame (below).
json strip_header(const std::string& bytes);

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

  struct Frame {
    bool binary = false;
    std::string bytes;
  };

  // The next frame, text or binary; throws (failing the test) after `timeout`.
  // Each is checked against its declared shape.
  Frame next_frame(std::chrono::milliseconds timeout = 10s) {
    beast::get_lowest_layer(ws_).expires_after(timeout);
    beast::flat_buffer buffer;
    ws_.read(buffer);
    Frame frame{ws_.got_binary(), beast::buffers_to_string(buffer.data())};
    if (frame.binary) {
      expect_wire(strip_header(frame.bytes), "StripFrameHeader");
    } else {
      expect_wire(json::parse(frame.bytes), "PushMessage");
    }
    return frame;
  }

  // The next text frame as JSON (binary frames are skipped).
  json next(std::chrono::milliseconds timeout = 10s) {
    for (int i = 0; i < 2000; ++i) {
      Frame frame = next_frame(timeout);
      if (!frame.binary) return json::parse(frame.bytes);
    }
    ADD_FAILURE() << "no text frame in 2000";
    return json();
  }

  // Text frames until one satisfies `match`.
  json until(const std::function<bool(const json&)>& match) {
    for (int i = 0; i < 50; ++i) {
      json frame = next();
      if (match(frame)) return frame;
    }
    ADD_FAILURE() << "no matching frame in 50";
    return json();
  }

  void send(const std::string& text) {
    ws_.text(true);
    ws_.write(boost::asio::buffer(text));
  }
  void send_binary(const std::string& bytes) {
    ws_.binary(true);
    ws_.write(boost::asio::buffer(bytes));
  }

  // Replaces the watch list and waits until the server has applied it: the
  // server handles a socket's messages in order, so the error reply to a
  // message sent after the watch means the watch was taken.
  void watch(const json& strips) {
    send(json{{"type", "watch"}, {"strips", strips}}.dump());
    sync();
  }
  void sync() {
    send(R"({"type":"sync-barrier"})");
    json reply = until([](const json& f) { return f["type"] == "error"; });
    ASSERT_NE(reply["message"].get<std::string>().find("sync-barrier"), std::string::npos) << reply;
  }

 private:
  boost::asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
};

// A binary strip frame: 4-byte big-endian header length, JSON header, PNG.
struct StripFrame {
  json header;
  std::string png;
};

StripFrame decode_strip(const std::string& bytes) {
  if (bytes.size() < 4) throw std::runtime_error("strip frame shorter than its length prefix");
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = (size_t{b[0]} << 24) | (size_t{b[1]} << 16) | (size_t{b[2]} << 8) | size_t{b[3]};
  if (4 + n > bytes.size())
    throw std::runtime_error("strip header length " + std::to_string(n) + " runs past the frame");
  return StripFrame{json::parse(bytes.substr(4, n)), bytes.substr(4 + n)};
}

json strip_header(const std::string& bytes) { return decode_strip(bytes).header; }

// What one snapshot pushed to a client: its snapshot event, the strip frames
// of that sequence in arrival order, and its strips_done.
struct Push {
  json snapshot;
  std::vector<StripFrame> strips;
  json done;
};

// Reads until the next snapshot event (whose position's batch_idx is
// `batch_idx`) and that sequence's strips_done. Strip frames of that sequence
// arriving before its snapshot event fail the test; frames of older sequences
// (a push still finishing) are skipped.
Push read_push(PushClient& client, int64_t batch_idx) {
  Push push;
  for (int i = 0; i < 200; ++i) {
    auto frame = client.next_frame();
    if (frame.binary) {
      StripFrame strip = decode_strip(frame.bytes);
      if (push.snapshot.is_null()) continue;  // an earlier snapshot's
      const auto seq = strip.header["sequence"];
      if (seq == push.snapshot["sequence"]) {
        push.strips.push_back(std::move(strip));
      } else {
        EXPECT_LT(seq.get<uint64_t>(), push.snapshot["sequence"].get<uint64_t>()) << strip.header;
      }
      continue;
    }
    json text = json::parse(frame.bytes);
    if (text["type"] == "snapshot" && text["position"]["batch_idx"] == batch_idx) push.snapshot = text;
    if (text["type"] == "strips_done" && !push.snapshot.is_null() && text["sequence"] == push.snapshot["sequence"]) {
      push.done = text;
      return push;
    }
  }
  ADD_FAILURE() << "no strips_done for batch " << batch_idx << " in 200 frames";
  return push;
}

// GET /api/render/strip for a watch entry.
std::string render_target(const json& entry) {
  std::string target = "/api/render/strip?layer=" + entry["layer"].get<std::string>() +
                       "&kind=" + entry["kind"].get<std::string>() +
                       "&sample=" + std::to_string(entry["sample"].get<int64_t>());
  if (entry.contains("average")) target += std::string("&average=") + (entry["average"].get<bool>() ? "true" : "false");
  if (entry.contains("values")) target += "&values=" + entry["values"].get<std::string>();
  return target;
}

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
  // The event of batch 0's snapshot may still come first: the channel's thread can
  // announce it after this page connected (to every page that has not seen it).
  json paused, snapshot;
  client.until([&](const json& f) {
    if (f["type"] == "snapshot" && f["position"]["batch_idx"] == 1) snapshot = f;
    if (f["type"] == "status" && f["status"]["state"] == "paused" && f["status"]["live_position"]["batch_idx"] == 1) {
      paused = f;
    }
    return !paused.is_null() && !snapshot.is_null();
  });
  EXPECT_EQ(paused["status"]["snapshot_position"]["batch_idx"], 1);
  EXPECT_EQ(snapshot["sequence"], paused["status"]["snapshot_sequence"]);
  EXPECT_EQ(snapshot["batch_size"], 5);
}

TEST_F(PushTest, ExperimentProgressAndItsOutcomeArePushed) {
  start();
  wait_paused();
  PushClient client(port_);
  ASSERT_EQ(client.next()["type"], "status");
  json ran = post("/api/experiments/run", {{"kind", "deep_dream"},
                                           {"layer", "fc1"},
                                           {"params", {{"steps", 5000}, {"channels", 2}}},
                                           {"timeout_seconds", 0}})
                 .json();
  const int64_t seq = ran["seq"];
  std::vector<int64_t> steps;
  json outcome;
  for (int i = 0; i < 500 && outcome.is_null(); ++i) {
    json f = client.next();
    if (f["type"] != "experiment" || f["result"]["seq"] != seq) continue;
    EXPECT_FALSE(f["result"].contains("objectives")) << "pushed events leave the history out";
    steps.push_back(f["result"]["step"].get<int64_t>());
    if (f["result"]["done"] == true) outcome = f["result"];
  }
  ASSERT_FALSE(outcome.is_null()) << "no outcome pushed";
  EXPECT_EQ(outcome["stage"], "done");
  EXPECT_EQ(outcome["step"], 5000);
  // Progress came while it ran: steps between the start and the end, in order.
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s > 0 && s < 5000; })) << json(steps);
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

TEST_F(PushTest, WatchedStripsFollowEachSnapshotWithTheRestApisBytes) {
  start();
  wait_paused();
  PushClient client(port_);
  client.next();
  const json strips = json::array({
      {{"layer", "fc1"}, {"kind", "activation"}, {"sample", 0}},
      {{"layer", "fc2"}, {"kind", "activation"}, {"sample", 2}, {"average", true}, {"values", "abs"}},
      {{"layer", "fc1"}, {"kind", "gradient"}, {"sample", 1}, {"average", false}, {"values", "square"}},
  });
  client.watch(strips);
  post("/api/step", {{"unit", "batch"}});
  Push push = read_push(client, 1);
  ASSERT_FALSE(push.snapshot.is_null());
  const auto sequence = push.snapshot["sequence"];
  ASSERT_EQ(push.strips.size(), strips.size());
  EXPECT_EQ(push.done["failed"], json::array());
  wait_paused();
  for (size_t i = 0; i < strips.size(); ++i) {
    const auto& header = push.strips[i].header;
    SCOPED_TRACE(header.dump());
    EXPECT_EQ(header["type"], "strip");
    EXPECT_EQ(header["sequence"], sequence);
    EXPECT_EQ(header["layer"], strips[i]["layer"]);
    EXPECT_EQ(header["kind"], strips[i]["kind"]);
    EXPECT_EQ(header["sample"], strips[i]["sample"]);
    EXPECT_EQ(header["average"], strips[i].value("average", false));
    EXPECT_EQ(header["values"], strips[i].value("values", "unchanged"));
    EXPECT_EQ(header["position"]["batch_idx"], 1);
    auto rest = get(render_target(strips[i]));
    ASSERT_EQ(rest.status, 200u) << rest.body;
    EXPECT_TRUE(push.strips[i].png == rest.body) << "pushed PNG differs from GET " << render_target(strips[i]);
    json info = json::parse(rest.headers["X-Nansense-Render"]);
    info["type"] = "strip";
    EXPECT_EQ(header, info);
  }
  EXPECT_EQ(push.strips[0].png.substr(1, 3), "PNG");

  // The list stays in force for the next snapshot.
  post("/api/step", {{"unit", "batch"}});
  Push again = read_push(client, 2);
  EXPECT_EQ(again.strips.size(), strips.size());
  EXPECT_GT(again.done["sequence"].get<uint64_t>(), sequence.get<uint64_t>());
}

TEST_F(PushTest, StripsThatCannotRenderAreListedWithTheControllersReason) {
  start();
  wait_paused();
  PushClient client(port_);
  client.next();
  const json strips = json::array({
      {{"layer", "fc1"}, {"kind", "activation"}, {"sample", 0}},
      {{"layer", "nope"}, {"kind", "activation"}, {"sample", 0}},
      {{"layer", "fc1"}, {"kind", "activation"}, {"sample", 999}},
      {{"layer", "fc2"}, {"kind", "gradient"}, {"sample", 4}, {"values", "abs"}},
  });
  client.watch(strips);
  post("/api/step", {{"unit", "batch"}});
  Push push = read_push(client, 1);
  wait_paused();
  ASSERT_EQ(push.strips.size(), 2u);
  EXPECT_EQ(push.strips[0].header["layer"], "fc1");
  EXPECT_EQ(push.strips[1].header["layer"], "fc2");
  EXPECT_EQ(push.strips[1].header["kind"], "gradient");
  const json& failed = push.done["failed"];
  ASSERT_EQ(failed.size(), 2u) << push.done;
  for (size_t i = 0; i < 2; ++i) {
    const json& entry = strips[i + 1];
    EXPECT_EQ(failed[i]["layer"], entry["layer"]);
    EXPECT_EQ(failed[i]["kind"], entry["kind"]);
    EXPECT_EQ(failed[i]["sample"], entry["sample"]);
    EXPECT_EQ(failed[i]["average"], false);
    EXPECT_EQ(failed[i]["values"], "unchanged");
    auto rest = get(render_target(entry));
    EXPECT_NE(rest.status, 200u);
    EXPECT_EQ(failed[i]["error"], rest.json()["error"]);
  }
  EXPECT_NE(failed[0]["error"].get<std::string>().find("unknown layer \"nope\""), std::string::npos);
  EXPECT_NE(failed[1]["error"].get<std::string>().find("999"), std::string::npos);
}

TEST_F(PushTest, BadWatchMessagesAreRefusedAndTheSocketKeepsItsList) {
  start();
  wait_paused();
  PushClient client(port_);
  client.next();
  client.watch(json::array({{{"layer", "fc1"}, {"kind", "activation"}, {"sample", 3}}}));

  json too_many = json::array();
  for (int i = 0; i < 513; ++i) too_many.push_back({{"layer", "fc1"}, {"kind", "activation"}, {"sample", 0}});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"this is not json", "not JSON"},
      {R"([1,2])", "must be a JSON object"},
      {R"({"strips":[]})", "\"type\""},
      {R"({"type":"subscribe"})", "unknown message type \"subscribe\""},
      {R"({"type":"watch"})", "lacks \"strips\""},
      {R"({"type":"watch","strips":{"layer":"fc1"}})", "\"strips\" must be an array, got object"},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"foo","sample":0}]})",
       "strips[0]: argument \"kind\" must be \"activation\" or \"gradient\", got \"foo\""},
      {R"({"type":"watch","strips":[{"kind":"activation","sample":0}]})",
       "strips[0]: missing required argument \"layer\""},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":-1}]})",
       "strips[0]: argument \"sample\" must be 0 or more, got -1"},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":1.5}]})",
       "strips[0]: argument \"sample\" must be an integer, got 1.5"},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":0,"average":"yes"}]})",
       "strips[0]: argument \"average\" must be true or false"},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":0,"values":"log"}]})",
       "strips[0]: argument \"values\" must be \"unchanged\", \"abs\" or \"square\", got \"log\""},
      {R"({"type":"watch","strips":[{"layer":7,"kind":"activation","sample":0}]})",
       "strips[0]: argument \"layer\" must be a string, got 7"},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":0,"colour":"red"}]})",
       "strips[0]: unknown argument \"colour\""},
      {R"({"type":"watch","strips":[{"layer":"fc1","kind":"activation","sample":0,"sequence":3}]})",
       "strips[0]: a watched strip takes no \"sequence\""},
      {json{{"type", "watch"}, {"strips", too_many}}.dump(), "too many strips: 513 listed, at most 512"},
  };
  for (const auto& [message, expected] : bad) {
    SCOPED_TRACE(message.substr(0, 80));
    // A client's binary frame is ignored: the next reply is the bad message's.
    client.send_binary(std::string("\x00\x01", 2));
    client.send(message);
    json reply = client.until([](const json& f) { return f["type"] == "error"; });
    const std::string text = reply["message"].get<std::string>();
    EXPECT_NE(text.find(expected), std::string::npos) << text;
    EXPECT_NE(text.find("expected {\"type\":\"watch\""), std::string::npos) << text;
  }

  // Still open, still watching fc1 sample 3.
  post("/api/step", {{"unit", "batch"}});
  Push push = read_push(client, 1);
  ASSERT_EQ(push.strips.size(), 1u);
  EXPECT_EQ(push.strips[0].header["layer"], "fc1");
  EXPECT_EQ(push.strips[0].header["sample"], 3);

  // An empty list is a valid watch (watch() fails on any other error first).
  client.watch(json::array());
}

TEST_F(PushTest, EachClientGetsOnlyTheStripsItWatches) {
  start();
  wait_paused();
  PushClient a(port_), b(port_);
  a.next();
  b.next();
  a.watch(json::array({{{"layer", "fc1"}, {"kind", "activation"}, {"sample", 0}}}));
  b.watch(json::array({{{"layer", "fc2"}, {"kind", "activation"}, {"sample", 1}},
                       {{"layer", "fc2"}, {"kind", "gradient"}, {"sample", 2}}}));
  post("/api/step", {{"unit", "batch"}});
  Push pa = read_push(a, 1);
  Push pb = read_push(b, 1);
  ASSERT_EQ(pa.strips.size(), 1u);
  EXPECT_EQ(pa.strips[0].header["layer"], "fc1");
  EXPECT_EQ(pa.strips[0].header["sample"], 0);
  ASSERT_EQ(pb.strips.size(), 2u);
  EXPECT_EQ(pb.strips[0].header["layer"], "fc2");
  EXPECT_EQ(pb.strips[0].header["kind"], "activation");
  EXPECT_EQ(pb.strips[0].header["sample"], 1);
  EXPECT_EQ(pb.strips[1].header["kind"], "gradient");
  EXPECT_EQ(pb.strips[1].header["sample"], 2);
  EXPECT_EQ(pa.done["sequence"], pb.done["sequence"]);
}

TEST_F(PushTest, SnapshotsInQuickSuccessionNeverMixTheirStrips) {
  start(1, 6, 3);
  wait_paused();
  PushClient client(port_);
  // The status on connect names the snapshot shown then: the page knows it,
  // so its strips (for the watch below) may come without a snapshot event.
  const json first = client.next();
  ASSERT_EQ(first["type"], "status");
  std::set<uint64_t> announced;
  if (first["status"]["snapshot_sequence"].is_number()) {
    announced.insert(first["status"]["snapshot_sequence"].get<uint64_t>());
  }
  client.watch(json::array({{{"layer", "fc1"}, {"kind", "activation"}, {"sample", 0}},
                            {{"layer", "fc1"}, {"kind", "gradient"}, {"sample", 0}},
                            {{"layer", "fc2"}, {"kind", "activation"}, {"sample", 4}, {"average", true}}}));
  // Eight snapshots back to back, across the train/val boundary (val batches
  // have no gradients), while pushes for the earlier ones may still run.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(post("/api/step", {{"unit", "batch"}, {"timeout_seconds", 20}}).status, 200u);
  }
  const auto last = get("/api/status").json()["snapshot_sequence"].get<uint64_t>();
  uint64_t last_done = 0;
  size_t strips = 0;
  for (int i = 0; i < 1000 && last_done != last; ++i) {
    auto frame = client.next_frame();
    if (frame.binary) {
      StripFrame strip = decode_strip(frame.bytes);
      const auto seq = strip.header["sequence"].get<uint64_t>();
      EXPECT_TRUE(announced.count(seq)) << "strip of sequence " << seq << " before its snapshot event";
      EXPECT_GT(seq, last_done) << "strip of sequence " << seq << " after its strips_done";
      ++strips;
      continue;
    }
    json text = json::parse(frame.bytes);
    EXPECT_NE(text["type"], "error") << text;
    if (text["type"] == "snapshot") announced.insert(text["sequence"].get<uint64_t>());
    if (text["type"] == "strips_done") {
      const auto seq = text["sequence"].get<uint64_t>();
      EXPECT_TRUE(announced.count(seq)) << text;
      EXPECT_GT(seq, last_done) << text;
      for (const auto& failed : text["failed"]) {
        // Only val batches (no backward) may refuse, and only the gradient.
        EXPECT_EQ(failed["kind"], "gradient") << text;
        EXPECT_NE(failed["error"].get<std::string>().find("no gradient"), std::string::npos) << text;
      }
      last_done = seq;
    }
  }
  EXPECT_EQ(last_done, last);
  // The last snapshot was not overtaken: all its strips came (3, or 2 plus a
  // refused gradient in a val batch).
  EXPECT_GT(strips, 0u);
}

}  // namespace
