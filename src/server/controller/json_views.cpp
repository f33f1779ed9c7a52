#include "server/controller/json_views.h"

#include <cstdio>

namespace nansense::server {

json to_json(const Architecture& arch) {
  json layers = json::array();
  for (const auto& l : arch.layers) {
    layers.push_back({{"name", l.name},
                      {"role", std::string(to_string(l.role))},
                      {"kind", l.kind},
                      {"module", l.module},
                      {"ops", l.ops},
                      {"output_shape", l.output_shape},
                      {"dtype", l.dtype},
                      {"parameters", l.parameters},
                      {"description", l.description},
                      {"shape_op", l.shape_op}});
  }
  json edges = json::array();
  for (const auto& [from, to] : arch.edges) edges.push_back({{"from", from}, {"to", to}});
  return {{"layers", layers}, {"edges", edges}, {"inputs", arch.inputs}};
}

std::string mib(int64_t bytes) {
  const double m = static_cast<double>(bytes) / (1 << 20);
  char text[32];
  std::snprintf(text, sizeof text, m >= 10 || m == static_cast<int64_t>(m) ? "%.0f MiB" : "%.1f MiB", m);
  return text;
}

json budget_json(const BatchSnapshot& snap) {
  json out = {{"budget_bytes", snap.budget_bytes},
              {"held_bytes", snap.held_bytes},
              {"full_bytes", snap.full_bytes},
              {"parameter_bytes", snap.parameter_bytes},
              {"trimmed", snap.trimmed()}};
  if (snap.trimmed()) {
    out["note"] = "showing " + std::to_string(snap.samples_kept) + " of " + std::to_string(snap.batch_size) +
                  " samples (snapshot budget " + mib(snap.budget_bytes) + "; all " + std::to_string(snap.batch_size) +
                  " would take " + mib(snap.full_bytes) + "); statistics cover all " + std::to_string(snap.batch_size);
  }
  return out;
}

json samples_kept(const BatchSnapshot& snap, const std::string& covers) {
  return {
      {"kept", snap.samples_kept},
      {"of", snap.batch_size},
      {"note", "the snapshot budget (" + mib(snap.budget_bytes) + ") kept samples 0.." +
                   std::to_string(snap.samples_kept - 1) + " of " + std::to_string(snap.batch_size) + ": " + covers}};
}

}  // namespace nansense::server
