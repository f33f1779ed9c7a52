// The REST routes, made from the command table (commands.h): the arguments
// of a GET come from its query string, of a POST from its JSON body; both are
// checked against the command's declarations before the controller runs it.
#pragma once

#include "server/controller/controller.h"
#include "server/http/http_server.h"

namespace nansense::server {

// Handles every /api/... request; returns 404 JSON for unknown API paths.
// `visitor`: who sends it (VisitorScope; "" off a locked session).
HttpResponse handle_api(Controller& controller, const HttpRequest& request, const std::string& visitor = "");

// An HTTP response carrying {"error": message}, with "argument" naming the
// argument a refusal is about, when it is about one.
HttpResponse error_response(unsigned status, const std::string& message, const std::string& argument = "");

}  // namespace nansense::server
