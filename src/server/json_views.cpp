#include "server/json_views.h"

namespace nansense::server {

json to_json(const Schedule& schedule) {
  json phases = json::array();
  for (const auto& name : schedule.phase_order()) {
    auto count = schedule.phase_count(name);
    phases.push_back({{"name", name}, {"batches", count ? json(*count) : json(nullptr)}});
  }
  auto epochs = schedule.epochs();
  return {{"epochs", epochs ? json(*epochs) : json(nullptr)},
          {"declared", schedule.declared()},
          {"phases", phases}};
}

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

}  // namespace nansense::server
