// Which lane of the HTTP server a request runs on. Requests that may wait
// for the training loop (a moving command: step, run, run_until, pause,
// refresh, time_travel with a timeout_seconds above zero, over REST or as an
// MCP tools/call) go to the bounded wait lane, so that they never hold the
// workers every other request needs (a handful of waiting agents must not
// starve the page); the status (REST get_status) goes to its own lane, so
// that it never queues behind heavy queries; the rest to the workers.
#pragma once

#include "server/http/http_server.h"

namespace nansense::server {

// Decided from the command table's declarations (the timeout_seconds
// argument and its default), not from a list of names. Malformed requests
// are not waits: they are refused at once.
bool may_wait(const HttpRequest& request);
Lane lane_of(const HttpRequest& request);

}  // namespace nansense::server
