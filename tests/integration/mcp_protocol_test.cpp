// The MCP endpoint at /mcp, spoken raw over loopback: JSON-RPC framing,
// sessions, protocol negotiation, batches, Accept/Origin/size checks and the
// tool list. The tools themselves are in mcp_tools_test.cpp.
#include <gtest/gtest.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <set>

#include "integration/mcp_client.h"
#include "integration/training_fixture.h"

namespace {

using nansense::testing::http_request;
using nansense::testing::kAccept;
using nansense::testing::McpClient;
using nansense::testing::port_of;
using nansense::testing::Reply;
using nansense::testing::TinyNet;
using nansense::testing::TrainingServerTest;
using json = nlohmann::json;
using namespace std::chrono_literals;

class McpProtocolTest : public TrainingServerTest {};

TEST_F(McpProtocolTest, InitializeNegotiatesTheRevisionAndIssuesASession) {
  start();
  wait_paused();
  std::set<std::string> sessions;
  for (std::string version : {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}) {
    McpClient client(port_);
    json reply = client.initialize(version);
    EXPECT_EQ(reply["jsonrpc"], "2.0");
    EXPECT_EQ(reply["id"], 0);
    EXPECT_EQ(reply["result"]["protocolVersion"], version);
    EXPECT_EQ(reply["result"]["serverInfo"]["name"], "nansense");
    EXPECT_EQ(reply["result"]["capabilities"]["tools"]["listChanged"], false);
    EXPECT_NE(reply["result"]["instructions"].get<std::string>().find("get_status"), std::string::npos);
    sessions.insert(client.session());
  }
  EXPECT_EQ(sessions.size(), 4u);
  McpClient future(port_);
  EXPECT_EQ(future.initialize("2099-01-01")["result"]["protocolVersion"], "2025-11-25");

  // initialize without a protocol version is invalid params.
  Reply bad =
      http_request(port_, "POST", "/mcp", R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})", kAccept);
  EXPECT_EQ(bad.json()["error"]["code"], -32602);
  EXPECT_EQ(bad.headers.count("Mcp-Session-Id"), 0u);
}

TEST_F(McpProtocolTest, RequestsNeedALiveSession) {
  start();
  wait_paused();
  const std::string list = R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})";
  Reply missing = http_request(port_, "POST", "/mcp", list, kAccept);
  EXPECT_EQ(missing.status, 400u);
  EXPECT_NE(missing.body.find("Mcp-Session-Id"), std::string::npos);

  McpClient client(port_);
  client.initialize();
  const std::string live = client.session();
  client.set_session("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(client.post(list).status, 404u);

  client.set_session(live);
  EXPECT_EQ(client.post(list).status, 200u);
  EXPECT_EQ(http_request(port_, "DELETE", "/mcp", "", {{"Mcp-Session-Id", live}}).status, 200u);
  Reply ended = client.post(list);
  EXPECT_EQ(ended.status, 404u);
  EXPECT_NE(ended.body.find("initialize"), std::string::npos);
  EXPECT_EQ(http_request(port_, "DELETE", "/mcp", "", {{"Mcp-Session-Id", live}}).status, 404u);
  EXPECT_EQ(http_request(port_, "DELETE", "/mcp").status, 400u);

  Reply get = http_request(port_, "GET", "/mcp", "", {{"Accept", "text/event-stream"}});
  EXPECT_EQ(get.status, 405u);
  EXPECT_EQ(get.headers["Allow"], "POST, DELETE");
}

TEST_F(McpProtocolTest, NotificationsAndResponsesAreAcceptedWithoutABody) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  for (const std::string& message : {R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}})",
                                     R"({"jsonrpc":"2.0","method":"notifications/some_future_thing"})",
                                     R"({"jsonrpc":"2.0","id":"s1","result":{}})"}) {
    Reply r = client.post(message);
    EXPECT_EQ(r.status, 202u) << message;
    EXPECT_EQ(r.body, "") << message;
  }
}

TEST_F(McpProtocolTest, MalformedMessagesGetJsonRpcErrors) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();

  Reply parse = client.post("{\"jsonrpc\":\"2.0\",\"id\":1,");
  EXPECT_EQ(parse.status, 400u);
  EXPECT_EQ(parse.json()["error"]["code"], -32700);
  EXPECT_TRUE(parse.json()["id"].is_null());
  // Before any session too: a parse error is reported as such.
  EXPECT_EQ(http_request(port_, "POST", "/mcp", "[1,", kAccept).json()["error"]["code"], -32700);

  Reply not_rpc = client.post(R"({"id":1,"method":"ping"})");
  EXPECT_EQ(not_rpc.status, 400u);
  EXPECT_EQ(not_rpc.json()["error"]["code"], -32600);
  EXPECT_EQ(not_rpc.json()["id"], 1);
  EXPECT_EQ(client.post(R"({"jsonrpc":"2.0","id":null,"method":"ping"})").json()["error"]["code"], -32600);
  EXPECT_EQ(client.post(R"("ping")").json()["error"]["code"], -32600);

  json unknown = client.request("resources/list");
  EXPECT_EQ(unknown["error"]["code"], -32601);
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("tools/call"), std::string::npos);
  EXPECT_EQ(client.request("ping")["result"], json::object());

  // String ids come back as strings.
  Reply string_id = client.post(R"({"jsonrpc":"2.0","id":"abc","method":"ping"})");
  EXPECT_EQ(string_id.json()["id"], "abc");

  EXPECT_EQ(client.request("tools/call", {{"arguments", json::object()}})["error"]["code"], -32602);
  json no_tool = client.request("tools/call", {{"name", "launch_rockets"}});
  EXPECT_EQ(no_tool["error"]["code"], -32602);
  EXPECT_NE(no_tool["error"]["message"].get<std::string>().find("get_status"), std::string::npos);
  EXPECT_EQ(client.request("tools/call", {{"name", "step"}, {"arguments", json::array({1})}})["error"]["code"], -32602);
  EXPECT_EQ(client.post(R"({"jsonrpc":"2.0","id":5,"method":"tools/list","params":[1]})").json()["error"]["code"],
            -32602);
  EXPECT_EQ(client.request("tools/list", {{"cursor", "page2"}})["error"]["code"], -32602);

  // JSON-only POSTs and the Accept header are checked before any message.
  Reply text_plain = client.post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})",
                                 {{"Content-Type", "text/plain"}, {"Accept", "application/json"}});
  EXPECT_EQ(text_plain.status, 415u);
  EXPECT_EQ(client.post(R"({"jsonrpc":"2.0","id":1,"method":"ping"})", {{"Accept", "text/html"}}).status, 406u);
}

TEST_F(McpProtocolTest, StreamOnlyClientsGetOneServerSentEvent) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  Reply r = client.post(R"({"jsonrpc":"2.0","id":9,"method":"ping"})", {{"Accept", "text/event-stream"}});
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.headers["Content-Type"], "text/event-stream");
  ASSERT_EQ(r.body.rfind("event: message\ndata: ", 0), 0u) << r.body;
  json reply = json::parse(r.body.substr(r.body.find("data: ") + 6));
  EXPECT_EQ(reply["id"], 9);
}

TEST_F(McpProtocolTest, BatchesFollowTheNegotiatedRevision) {
  start();
  wait_paused();
  const std::string batch = R"([{"jsonrpc":"2.0","id":1,"method":"ping"},
                                {"jsonrpc":"2.0","method":"notifications/initialized"},
                                {"jsonrpc":"2.0","id":2,"method":"no/such"},
                                {"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_status"}}])";
  McpClient old_client(port_);
  old_client.initialize("2025-03-26");
  Reply r = old_client.post(batch);
  ASSERT_EQ(r.status, 200u) << r.body;
  json replies = r.json();
  ASSERT_TRUE(replies.is_array());
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0]["id"], 1);
  EXPECT_EQ(replies[1]["error"]["code"], -32601);
  EXPECT_EQ(replies[2]["result"]["isError"], false);
  EXPECT_EQ(old_client.post(R"([{"jsonrpc":"2.0","method":"notifications/initialized"}])").status, 202u);
  EXPECT_EQ(old_client.post("[]").status, 400u);
  Reply with_init =
      old_client.post(R"([{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}])");
  EXPECT_EQ(with_init.status, 400u);
  EXPECT_EQ(with_init.json()["error"]["code"], -32600);

  for (std::string version : {"2025-06-18", "2025-11-25"}) {
    McpClient client(port_);
    client.initialize(version);
    Reply refused = client.post(batch);
    EXPECT_EQ(refused.status, 400u) << version;
    EXPECT_EQ(refused.json()["error"]["code"], -32600);
    EXPECT_NE(refused.body.find("one message per POST"), std::string::npos) << refused.body;
  }
}

TEST_F(McpProtocolTest, TheProtocolVersionHeaderMustMatchTheSession) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize("2025-06-18");
  const std::string ping = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  auto with_version = [&](const std::string& v) {
    auto headers = kAccept;
    headers["MCP-Protocol-Version"] = v;
    return client.post(ping, headers);
  };
  EXPECT_EQ(with_version("2025-06-18").status, 200u);
  Reply other = with_version("2025-03-26");
  EXPECT_EQ(other.status, 400u);
  EXPECT_NE(other.body.find("negotiated"), std::string::npos);
  Reply unknown = with_version("1999-01-01");
  EXPECT_EQ(unknown.status, 400u);
  EXPECT_NE(unknown.body.find("2025-11-25"), std::string::npos);
}

TEST_F(McpProtocolTest, ForeignOriginsAndHostsAreRefused) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  const std::string ping = R"({"jsonrpc":"2.0","id":1,"method":"ping"})";
  auto headers = kAccept;
  headers["Origin"] = "http://evil.example";
  EXPECT_EQ(client.post(ping, headers).status, 403u);
  headers["Origin"] = "http://localhost:5173";
  EXPECT_EQ(client.post(ping, headers).status, 200u);
  headers.erase("Origin");
  headers["Host"] = "rebind.example:" + std::to_string(port_);
  EXPECT_EQ(client.post(ping, headers).status, 403u);
}

TEST_F(McpProtocolTest, OversizedBodiesAreRefusedAndTheServerGoesOn) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize();
  std::string huge =
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":")" + std::string(2 << 20, 'a') + "\"}}";
  Reply reply;
  try {
    reply = client.post(huge);
  } catch (const std::exception&) {
    // The server may close before the client finished writing.
  }
  if (reply.status != 0) EXPECT_EQ(reply.status, 413u);
  EXPECT_EQ(client.request("ping")["result"], json::object());
}

TEST_F(McpProtocolTest, ToolsListDescribesEveryToolWithASchema) {
  start();
  wait_paused();
  McpClient client(port_);
  client.initialize("2025-06-18");
  json tools = client.request("tools/list")["result"]["tools"];
  std::set<std::string> names;
  for (const auto& t : tools) {
    names.insert(t["name"]);
    EXPECT_GT(t["description"].get<std::string>().size(), 80u) << t["name"];
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t["name"];
    EXPECT_EQ(t["inputSchema"]["additionalProperties"], false) << t["name"];
    EXPECT_TRUE(t.contains("title")) << t["name"];
    for (const auto& [arg, spec] : t["inputSchema"]["properties"].items()) {
      // A type, or alternatives (render_weights' index: one integer or a list).
      EXPECT_TRUE(spec.contains("type") || spec.contains("anyOf")) << t["name"] << "." << arg;
      EXPECT_FALSE(spec.value("description", "").empty()) << t["name"] << "." << arg;
    }
  }
  for (const char* expected : {"get_status", "get_architecture", "get_layer_stats", "get_weight_stats", "step", "run",
                               "run_until", "pause", "refresh", "render_layer", "render_input", "get_debug_report",
                               "configure_debug_checks", "silence_debug_check"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
  json step;
  for (const auto& t : tools) {
    if (t["name"] == "step") step = t;
  }
  EXPECT_EQ(step["inputSchema"]["properties"]["unit"]["enum"], json::array({"batch", "phase", "epoch"}));
  EXPECT_EQ(step["inputSchema"]["properties"]["timeout_seconds"]["maximum"], 300);
  EXPECT_EQ(step["annotations"]["readOnlyHint"], false);

  McpClient old_client(port_);
  old_client.initialize("2024-11-05");
  json old_tools = old_client.request("tools/list")["result"]["tools"];
  EXPECT_EQ(old_tools.size(), tools.size());
  EXPECT_FALSE(old_tools[0].contains("annotations"));
  EXPECT_FALSE(old_tools[0].contains("title"));
}

TEST(McpSwitchTest, McpFalseAnswers404) {
  auto model = TinyNet();
  auto session = nansense::start(model, nansense::StartOptions());
  ASSERT_TRUE(
      nansense::serve(session, nansense::ServeOptions().port(0).open_browser(false).print_banner(false).mcp(false)));
  Reply r = http_request(port_of(session.url()), "POST", "/mcp",
                         R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}})",
                         kAccept);
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(r.body.find("mcp(false)"), std::string::npos) << r.body;
  EXPECT_EQ(http_request(port_of(session.url()), "GET", "/api/status").status, 200u);
}

}  // namespace
