// The REST routes: HTTP in, one controller call, JSON out.
#pragma once

#include "server/controller.h"
#include "server/http_server.h"

namespace nansense::server {

// Handles every /api/... request; returns 404 JSON for unknown API paths.
HttpResponse handle_api(Controller& controller, const HttpRequest& request);

// An HTTP response carrying {"error": message}.
HttpResponse error_response(unsigned status, const std::string& message);

}  // namespace nansense::server
