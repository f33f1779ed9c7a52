#include "server/http/static_assets.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace nansense::server {

namespace {

// Shown when the library was built without the UI: what happened and the fix.
const char* kNoUiPage = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>nansense</title>
<style>body{font:15px system-ui,sans-serif;margin:2em;color:#222;max-width:46em}code{background:#f3f3f3;padding:1px 4px}</style>
</head><body>
<h1>nansense</h1>
<p><b>This build has no web UI:</b> npm or <code>web/node_modules</code> was missing when the library was
built. Run <code>scripts/setup</code> (it installs Node.js packages and rebuilds), then restart training.</p>
<p>The JSON API works meanwhile: <code>GET /api/status</code>, <code>/api/architecture</code>,
<code>/api/snapshot</code>, <code>POST /api/step</code> <code>{"unit":"batch"}</code>, <code>/api/run</code>,
<code>/api/pause</code>, <code>/api/run_until</code>, <code>/api/refresh</code>.</p>
</body></html>
)";

// The page's own routes: each gets index.html, whose script shows the page.
bool is_page_route(std::string_view path) {
  return path == "/" || path == "/index.html" || path == "/stats" || path == "/experiment" || path == "/weights";
}

HttpResponse file_response(std::string_view path, std::string body) {
  HttpResponse res;
  res.content_type = content_type_for(path);
  res.body = std::move(body);
  const bool hashed = path.rfind("/assets/", 0) == 0;
  res.headers.emplace_back("Cache-Control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
  res.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return res;
}

// A file of the folder NANSENSE_WEB_DIR names; never outside it.
std::optional<std::string> read_dev_file(const std::string& root, const std::string& path) {
  if (path.find("..") != std::string::npos || path.find('\\') != std::string::npos ||
      path.find('\0') != std::string::npos) {
    return std::nullopt;
  }
  std::ifstream in(root + path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::string content_type_for(std::string_view path) {
  static const std::map<std::string_view, std::string_view> types = {{".html", "text/html; charset=utf-8"},
                                                                     {".js", "text/javascript; charset=utf-8"},
                                                                     {".mjs", "text/javascript; charset=utf-8"},
                                                                     {".css", "text/css; charset=utf-8"},
                                                                     {".json", "application/json"},
                                                                     {".map", "application/json"},
                                                                     {".svg", "image/svg+xml"},
                                                                     {".png", "image/png"},
                                                                     {".ico", "image/x-icon"},
                                                                     {".woff2", "font/woff2"},
                                                                     {".wasm", "application/wasm"},
                                                                     {".txt", "text/plain; charset=utf-8"}};
  auto dot = path.rfind('.');
  if (dot != std::string_view::npos) {
    if (auto it = types.find(path.substr(dot)); it != types.end()) return std::string(it->second);
  }
  return "application/octet-stream";
}

std::optional<HttpResponse> serve_web_file(const HttpRequest& request) {
  if (request.method != "GET" && request.method != "HEAD") return std::nullopt;
  std::string path = is_page_route(request.path) ? "/index.html" : request.path;

  if (const char* dir = std::getenv("NANSENSE_WEB_DIR"); dir && *dir) {
    if (auto body = read_dev_file(dir, path)) return file_response(path, std::move(*body));
    return std::nullopt;
  }
  const auto& files = embedded_web_files();
  if (files.empty()) {
    if (path != "/index.html") return std::nullopt;
    HttpResponse res;
    res.content_type = "text/html; charset=utf-8";
    res.body = kNoUiPage;
    return res;
  }
  for (const auto& [name, body] : files) {
    if (name == path) return file_response(path, std::string(body));
  }
  return std::nullopt;
}

}  // namespace nansense::server
