#include "server/api_routes.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace nansense::server {

namespace {

constexpr double kMaxWaitSeconds = 300;

// A JSON request body with its fields checked against what a route accepts.
class Body {
 public:
  Body(const std::string& text, std::set<std::string> accepted) {
    if (text.find_first_not_of(" \t\r\n") != std::string::npos) {
      try {
        value_ = json::parse(text);
      } catch (const json::parse_error& e) {
        throw ControllerError(ControllerError::Kind::kInvalidArgument,
                              std::string("malformed JSON body: ") + e.what());
      }
    } else {
      value_ = json::object();
    }
    if (!value_.is_object()) {
      throw ControllerError(ControllerError::Kind::kInvalidArgument, "the request body must be a JSON object");
    }
    accepted.insert("wait_seconds");
    for (const auto& [key, _] : value_.items()) {
      if (!accepted.count(key)) {
        std::string list;
        for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
        throw ControllerError(ControllerError::Kind::kInvalidArgument,
                              "unknown field \"" + key + "\"; accepted fields: " + list);
      }
    }
  }

  std::optional<std::string> string(const std::string& key) const {
    if (!value_.contains(key)) return std::nullopt;
    if (!value_[key].is_string()) bad(key, "a string");
    return value_[key].get<std::string>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    if (!value_.contains(key)) return std::nullopt;
    if (!value_[key].is_boolean()) bad(key, "true or false");
    return value_[key].get<bool>();
  }
  std::optional<int64_t> integer(const std::string& key) const {
    if (!value_.contains(key)) return std::nullopt;
    if (!value_[key].is_number_integer()) bad(key, "an integer");
    return value_[key].get<int64_t>();
  }
  std::optional<double> number(const std::string& key) const {
    if (!value_.contains(key)) return std::nullopt;
    if (!value_[key].is_number()) bad(key, "a number");
    return value_[key].get<double>();
  }
  std::optional<std::vector<std::string>> string_list(const std::string& key) const {
    if (!value_.contains(key)) return std::nullopt;
    const auto& v = value_[key];
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
      bad(key, "a list of strings");
    }
    return v.get<std::vector<std::string>>();
  }
  int64_t required_integer(const std::string& key) const {
    auto v = integer(key);
    if (!v) missing(key);
    return *v;
  }
  std::string required_string(const std::string& key) const {
    auto v = string(key);
    if (!v) missing(key);
    return *v;
  }
  Controller::Wait wait() const {
    if (!value_.contains("wait_seconds")) return std::nullopt;
    const auto& w = value_["wait_seconds"];
    if (!w.is_number() || w.get<double>() < 0 || w.get<double>() > kMaxWaitSeconds) {
      bad("wait_seconds", "a number of seconds from 0 to 300");
    }
    return std::chrono::milliseconds(static_cast<int64_t>(w.get<double>() * 1000));
  }

 private:
  [[noreturn]] static void bad(const std::string& key, const std::string& expected) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, "field \"" + key + "\" must be " + expected);
  }
  [[noreturn]] static void missing(const std::string& key) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, "missing required field \"" + key + "\"");
  }
  json value_;
};

struct Route {
  std::string method;
  std::function<HttpResponse(Controller&, const HttpRequest&)> handle;
};

HttpResponse render_layer(Controller& controller, const HttpRequest& request);
HttpResponse render_input(Controller& controller, const HttpRequest& request);
json layer_stats(Controller& controller, const HttpRequest& request);
json weight_stats(Controller& controller, const HttpRequest& request);

// A route whose answer is the JSON its handler returns.
template <class F>
std::function<HttpResponse(Controller&, const HttpRequest&)> json_route(F handle) {
  return [handle](Controller& c, const HttpRequest& r) {
    HttpResponse res;
    res.body = handle(c, r).dump(-1, ' ', false, json::error_handler_t::replace);
    return res;
  };
}

// One route per method and path.
const std::multimap<std::string, Route>& routes() {
  static const std::multimap<std::string, Route> table = {
      {"/api/status", {"GET", json_route([](Controller& c, const HttpRequest&) { return c.get_status(); })}},
      {"/api/architecture", {"GET", json_route([](Controller& c, const HttpRequest&) { return c.get_architecture(); })}},
      {"/api/snapshot", {"GET", json_route([](Controller& c, const HttpRequest&) { return c.get_snapshot(); })}},
      {"/api/step",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"unit"});
          return c.step(body.string("unit").value_or("batch"), body.wait());
        })}},
      {"/api/run",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"detach"});
          return c.run(body.boolean("detach").value_or(false), body.wait());
        })}},
      {"/api/pause",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {});
          return c.pause(body.wait());
        })}},
      {"/api/run_until",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"phase", "epoch", "batch"});
          return c.run_until(body.required_string("phase"), body.required_integer("epoch"),
                             body.required_integer("batch"), body.wait());
        })}},
      {"/api/refresh",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {});
          return c.refresh(body.wait());
        })}},
      {"/api/debug", {"GET", json_route([](Controller& c, const HttpRequest&) { return c.get_debug_report(); })}},
      {"/api/debug/settings",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"enabled", "interval_batches", "check_nan_inf", "check_under_over", "threshold_fraction",
                             "trace_interval_batches", "rerun_to_trace", "allow"});
          Controller::DebugChecksUpdate update;
          update.enabled = body.boolean("enabled");
          update.interval_batches = body.integer("interval_batches");
          update.check_nan_inf = body.boolean("check_nan_inf");
          update.check_under_over = body.boolean("check_under_over");
          update.threshold_fraction = body.number("threshold_fraction");
          update.trace_interval_batches = body.integer("trace_interval_batches");
          update.rerun_to_trace = body.boolean("rerun_to_trace");
          update.allow = body.string_list("allow");
          return c.configure_debug_checks(update);
        })}},
      {"/api/debug/silence",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"category"});
          return c.silence_debug_check(body.string("category"));
        })}},
      {"/api/debug/choose_update",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"action"});
          auto action = body.string("action");
          if (!action) throw ControllerError(ControllerError::Kind::kInvalidArgument,
                                             "action is required: \"skip\" or \"apply\"");
          return c.choose_update(*action);
        })}},
      {"/api/debug/clear",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {});
          return c.clear_debug_error();
        })}},
      {"/api/time_travel",
       {"GET", json_route([](Controller& c, const HttpRequest&) { return c.get_time_travel_status(); })}},
      {"/api/time_travel",
       {"POST", json_route([](Controller& c, const HttpRequest& r) {
          Body body(r.body, {"epoch"});
          return c.time_travel(body.required_integer("epoch"), body.wait());
        })}},
      {"/api/render/layer", {"GET", render_layer}},
      {"/api/render/input", {"GET", render_input}},
      {"/api/layer_stats", {"GET", json_route(layer_stats)}},
      {"/api/weight_stats", {"GET", json_route(weight_stats)}},
  };
  return table;
}

unsigned status_for(ControllerError::Kind kind) {
  switch (kind) {
    case ControllerError::Kind::kInvalidArgument: return 400;
    case ControllerError::Kind::kNotFound: return 404;
    case ControllerError::Kind::kConflict: return 409;
  }
  return 400;
}

}  // namespace

HttpResponse error_response(unsigned status, const std::string& message) {
  HttpResponse res;
  res.status = status;
  res.body = json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
  return res;
}

namespace {

int64_t query_integer(const HttpRequest& request, const std::string& key, int64_t fallback) {
  auto it = request.query.find(key);
  if (it == request.query.end()) return fallback;
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw ControllerError(ControllerError::Kind::kInvalidArgument,
                        "query parameter \"" + key + "\" must be an integer, got \"" + it->second + "\"");
}

bool query_bool(const HttpRequest& request, const std::string& key) {
  auto it = request.query.find(key);
  if (it == request.query.end() || it->second == "false" || it->second == "0") return false;
  if (it->second == "true" || it->second == "1" || it->second.empty()) return true;
  throw ControllerError(ControllerError::Kind::kInvalidArgument,
                        "query parameter \"" + key + "\" must be true or false, got \"" + it->second + "\"");
}

// GET /api/render/layer?layer=&kind=activation|gradient&sample=&average=&values=
// Refuses query parameters a route does not know (a typo must not be ignored).
// `seq` is accepted everywhere: pages add it to make URLs unique per snapshot.
void check_query(const HttpRequest& request, const std::set<std::string>& accepted) {
  for (const auto& [key, _] : request.query) {
    if (accepted.count(key) || key == "token" || key == "seq") continue;
    std::string list;
    for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
    throw ControllerError(ControllerError::Kind::kInvalidArgument,
                          "unknown query parameter \"" + key + "\"; accepted: " + list);
  }
}

HttpResponse png_response(const Controller::RenderedImage& image) {
  HttpResponse res;
  res.content_type = "image/png";
  res.body = image.png;
  res.headers.emplace_back("X-Nansense-Render", image.info.dump(-1, ' ', false, json::error_handler_t::replace));
  // The URL does not name the snapshot: the browser must revalidate.
  res.headers.emplace_back("Cache-Control", "no-cache");
  return res;
}

// GET /api/render/input?input=&sample=
HttpResponse render_input(Controller& controller, const HttpRequest& request) {
  check_query(request, {"input", "sample"});
  return png_response(*controller.render_input(query_integer(request, "input", 0), query_integer(request, "sample", 0)));
}

HttpResponse render_layer(Controller& controller, const HttpRequest& request) {
  check_query(request, {"layer", "kind", "sample", "average", "values"});
  auto layer = request.query.find("layer");
  if (layer == request.query.end() || layer->second.empty()) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, "missing query parameter \"layer\"");
  }
  render::StripOptions options;
  options.sample = query_integer(request, "sample", 0);
  options.average = query_bool(request, "average");
  if (auto v = request.query.find("values"); v != request.query.end()) {
    try {
      options.values = render::parse_values(v->second);
    } catch (const std::invalid_argument& e) {
      throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
    }
  }
  auto kind = request.query.find("kind");
  return png_response(*controller.render_layer(
      layer->second, kind == request.query.end() ? "activation" : kind->second, options));
}

// "a,b,,c" -> {"a", "b", "c"}; absent or empty -> {}.
std::vector<std::string> query_list(const HttpRequest& request, const std::string& key) {
  std::vector<std::string> out;
  auto it = request.query.find(key);
  if (it == request.query.end()) return out;
  size_t start = 0;
  while (start <= it->second.size()) {
    size_t end = it->second.find(',', start);
    if (end == std::string::npos) end = it->second.size();
    if (end > start) out.push_back(it->second.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// GET /api/layer_stats?layers=a,b&histogram=true&bins=32&channel=3
json layer_stats(Controller& controller, const HttpRequest& request) {
  check_query(request, {"layers", "histogram", "bins", "channel"});
  Controller::LayerStatsOptions options;
  options.histogram = query_bool(request, "histogram");
  options.bins = query_integer(request, "bins", options.bins);
  if (request.query.count("channel")) options.channel = query_integer(request, "channel", 0);
  return controller.get_layer_stats(query_list(request, "layers"), options);
}

// GET /api/weight_stats?layer=features.0&parameters=weight,bias
json weight_stats(Controller& controller, const HttpRequest& request) {
  check_query(request, {"layer", "parameters"});
  auto layer = request.query.find("layer");
  if (layer == request.query.end() || layer->second.empty()) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, "missing query parameter \"layer\"");
  }
  return controller.get_weight_stats(layer->second, query_list(request, "parameters"));
}

}  // namespace

HttpResponse handle_api(Controller& controller, const HttpRequest& request) {
  auto [first, last] = routes().equal_range(request.path);
  if (first == last) {
    return error_response(404, "no API route " + request.path + "; see GET / for the list");
  }
  const Route* route = nullptr;
  std::string allowed;
  for (auto it = first; it != last; ++it) {
    if (it->second.method == request.method) route = &it->second;
    allowed += (allowed.empty() ? "" : ", ") + it->second.method;
  }
  if (!route) {
    auto res = error_response(405, request.path + " accepts " + allowed + ", not " + request.method);
    res.headers.emplace_back("Allow", allowed);
    return res;
  }
  try {
    return route->handle(controller, request);
  } catch (const ControllerError& e) {
    return error_response(status_for(e.kind()), e.what());
  }
}

}  // namespace nansense::server
