// The whole wire contract: the command table's declarations beside the reply
// types of wire_types.cpp.
#include "server/controller/commands.h"
#include "server/controller/wire_types.h"

namespace nansense::server {

json wire_description() {
  json list = json::array();
  for (const auto& c : commands()) {
    json old_routes = json::array();
    for (const auto& r : c.old_routes) old_routes.push_back({{"method", r.method}, {"path", r.path}});
    list.push_back({{"name", c.name},
                    {"title", c.title},
                    {"description", c.description},
                    {"rest", c.rest ? json{{"method", c.rest->method}, {"path", c.rest->path}} : json(nullptr)},
                    {"old_routes", std::move(old_routes)},
                    {"mcp", c.mcp},
                    {"read_only", c.read_only},
                    {"runs_when_locked", runs_when_locked(c)},
                    {"input_schema", input_schema(c.args)},
                    {"reply", c.reply.empty() ? json(nullptr) : json(c.reply)}});
  }
  return {{"commands", std::move(list)}, {"old_routes_until", kOldRoutesUntil}, {"$defs", wire_types()}};
}

}  // namespace nansense::server
