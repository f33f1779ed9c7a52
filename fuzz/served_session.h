// What the fuzz harnesses run against: a real session of a tiny model that
// trained two epochs (checkpointing each epoch start, statistics on, a
// snapshot of its last batch) and finished, served by a real Server bound to
// a free loopback port; requests are handed to it in-process. A finished
// session answers every command at once (the moving ones are refused), so an
// input's outcome depends on the input alone and nothing waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/http_server.h"
#include "server/server.h"

namespace nansense::fuzz {

// Built at first use (a few seconds), never destroyed: the harness's process
// ends with it.
server::Server& served_server();
// The served session's MCP sessions, initialized with the newest protocol
// revision and with 2025-03-26 (the last that takes JSON-RPC batches).
const std::string& mcp_session_newest();
const std::string& mcp_session_with_batches();
// Initializes both again (after the fuzzer's own initialize requests
// pushed them out of the 1000 sessions kept).
void renew_mcp_sessions();

// A request as a loopback page sends it (Host, Origin, Content-Type set).
server::HttpRequest page_request(std::string method, std::string path, std::string body = "");

// The oracle for every reply: aborts (a crash libFuzzer records) when a
// reply shows a fault of ours rather than a refusal of the input: a 500, a
// JSON-RPC internal error (-32603), a message that is our catch-all's
// "internal error..." or an nlohmann exception's own text other than a
// parse error (an exception that escaped a check), a JSON reply (or SSE
// event, or X-Nansense-Render header) that is not JSON, or a header value
// that could split the response (CR, LF, NUL). check_text: one JSON reply.
void check_response(const server::HttpResponse& response, std::string_view what);
void check_text(std::string_view text, std::string_view what);

// A scratch folder for this process, removed at exit.
const std::string& scratch_dir();

}  // namespace nansense::fuzz
