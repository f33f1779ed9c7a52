// The browser UI's files: built by Vite, embedded into the library at build
// time, so a user's binary serves the page with nothing fetched elsewhere.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http/http_server.h"

namespace nansense::server {

// A built file by URL path ("/index.html", "/assets/index-3f2a1c.js").
using EmbeddedFile = std::pair<std::string_view, std::string_view>;

// Defined in the file cmake/embed_web.cmake generates. Empty when the library
// was built without npm.
const std::vector<EmbeddedFile>& embedded_web_files();

// Answers a GET or HEAD for the page and its files, or nullopt when `request`
// is not one of them. Hashed files under /assets/ are cached for good;
// everything else is revalidated. The environment variable NANSENSE_WEB_DIR
// serves a build folder from disk instead, for UI development.
std::optional<HttpResponse> serve_web_file(const HttpRequest& request);

// "text/javascript; charset=utf-8" for "x.js", ...
std::string content_type_for(std::string_view path);

}  // namespace nansense::server
