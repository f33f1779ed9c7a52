#include "server/http/api_routes.h"

#include <cctype>

#include "server/controller/commands.h"

namespace nansense::server {

namespace {

// Query keys a page adds for the transport itself: the token on remote binds,
// and a per-snapshot value that keeps browser caches apart.
const std::vector<std::string> kTransportKeys = {"token", "seq"};

unsigned status_for(Refusal::Kind kind) {
  switch (kind) {
    case Refusal::Kind::kInvalidArgument:
      return 400;
    case Refusal::Kind::kNotFound:
      return 404;
    case Refusal::Kind::kConflict:
      return 409;
  }
  return 400;
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// The request's arguments as JSON: the query string of a GET, the body of a POST.
json arguments_of(const Command& command, const HttpRequest& request) {
  if (command.rest->method == "GET") return from_query(command.args, request.query, kTransportKeys);
  if (request.body.find_first_not_of(" \t\r\n") == std::string::npos) return json::object();
  try {
    return json::parse(request.body);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number past double's range (1E400).
    throw Refusal(Refusal::Kind::kInvalidArgument, std::string("malformed JSON body: ") + e.what());
  }
}

HttpResponse png_response(const std::string& png, const json& info) {
  HttpResponse res;
  res.content_type = "image/png";
  res.body = png;
  res.headers.emplace_back("X-Nansense-Render", dump(info));
  // The URL does not name the snapshot: the browser must revalidate.
  res.headers.emplace_back("Cache-Control", "no-cache");
  return res;
}

// A file name as a quoted-string of Content-Disposition (recordings are
// named by the recorder: letters, digits, "_", "-", "."; anything else goes).
std::string disposition(bool download, const std::string& name) {
  std::string safe;
  for (char ch : name) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.') safe += ch;
  }
  return std::string(download ? "attachment" : "inline") + "; filename=\"" + (safe.empty() ? "recording.mp4" : safe) +
         "\"";
}

HttpResponse respond(const Reply& reply) {
  if (reply.file) {
    HttpResponse res;
    res.content_type = reply.file->content_type;
    res.body = reply.file->bytes;
    res.headers.emplace_back("Content-Disposition", disposition(reply.download, reply.file->name));
    res.headers.emplace_back("Cache-Control", "no-cache");
    return res;
  }
  if (!reply.strips.empty()) return png_response(reply.strips.front()->png, info_json(*reply.strips.front()));
  if (reply.input) return png_response(reply.input->png, info_json(*reply.input));
  if (reply.histogram) return png_response(reply.histogram->png, info_json(*reply.histogram));
  if (reply.experiment) return png_response(reply.experiment->png, info_json(*reply.experiment));
  if (reply.picture) return png_response(reply.picture->png, reply.picture->info);
  if (!reply.weights.empty()) return png_response(reply.weights.front()->png, info_json(*reply.weights.front()));
  HttpResponse res;
  res.body = dump(reply.body);
  return res;
}

}  // namespace

HttpResponse error_response(unsigned status, const std::string& message, const std::string& argument) {
  HttpResponse res;
  res.status = status;
  json body = {{"error", message}};
  if (!argument.empty()) body["argument"] = argument;
  res.body = dump(body);
  return res;
}

HttpResponse handle_api(Controller& controller, const HttpRequest& request, const std::string& visitor) {
  const Command* route = nullptr;
  std::string allowed;
  auto offer = [&](const Command& command, const Route& r) {
    if (r.path != request.path) return;
    if (r.method == request.method) route = &command;
    allowed += (allowed.empty() ? "" : ", ") + r.method;
  };
  for (const auto& command : commands()) {
    if (!command.rest) continue;
    offer(command, *command.rest);
    for (const auto& old : command.old_routes) offer(command, old);
  }
  if (allowed.empty())
    return error_response(404,
                          "no API route " + request.path + "; see docs/reference/http.md (scripts/docs builds it)");
  if (!route) {
    auto res = error_response(405, request.path + " accepts " + allowed + ", not " + request.method);
    res.headers.emplace_back("Allow", allowed);
    return res;
  }
  try {
    return respond(dispatch(*route, controller, Args(route->args, arguments_of(*route, request)), visitor));
  } catch (const SnapshotReplaced& e) {
    // Not an error of the page's snapshot: no error status (which a browser
    // logs as a failed load even when the page handles it), no picture.
    HttpResponse res;
    res.status = 204;
    std::string why = e.what();
    for (auto& ch : why) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    }
    res.headers.emplace_back("X-Nansense-Replaced", why);
    return res;
  } catch (const Refusal& e) {
    return error_response(status_for(e.kind()), e.what(), e.argument());
  }
}

}  // namespace nansense::server
