#include "server/controller/json_views.h"

#include <cstdio>

namespace nansense::server {

ArchitectureView architecture_view(const Architecture& arch) {
  ArchitectureView out;
  out.captured = true;
  for (const auto& l : arch.layers) {
    out.layers.push_back({l.name, std::string(to_string(l.role)), l.kind, l.module, l.ops, l.output_shape, l.dtype,
                          l.parameters, l.description, l.shape_op});
  }
  out.edges.emplace();
  for (const auto& [from, to] : arch.edges) out.edges->push_back({from, to});
  out.inputs = arch.inputs;
  return out;
}

std::string mib(int64_t bytes) {
  const double m = static_cast<double>(bytes) / (1 << 20);
  char text[32];
  std::snprintf(text, sizeof text, m >= 10 || m == static_cast<int64_t>(m) ? "%.0f MiB" : "%.1f MiB", m);
  return text;
}

SnapshotBudget budget_of(const BatchSnapshot& snap) {
  SnapshotBudget out{snap.budget_bytes, snap.held_bytes, snap.full_bytes, snap.parameter_bytes, snap.trimmed(), {}};
  if (snap.trimmed()) {
    out.note = "showing " + std::to_string(snap.samples_kept) + " of " + std::to_string(snap.batch_size) +
               " samples (snapshot budget " + mib(snap.budget_bytes) + "; all " + std::to_string(snap.batch_size) +
               " would take " + mib(snap.full_bytes) + "); statistics cover all " + std::to_string(snap.batch_size);
  }
  return out;
}

SamplesKept samples_kept(const BatchSnapshot& snap, const std::string& covers) {
  return {snap.samples_kept, snap.batch_size,
          "the snapshot budget (" + mib(snap.budget_bytes) + ") kept samples 0.." +
              std::to_string(snap.samples_kept - 1) + " of " + std::to_string(snap.batch_size) + ": " + covers};
}

}  // namespace nansense::server
