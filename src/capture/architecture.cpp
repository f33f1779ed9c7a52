#include "nansense/architecture.h"

namespace nansense {

const LayerInfo* Architecture::find(const std::string& name) const {
  for (const auto& layer : layers) {
    if (layer.name == name) return &layer;
  }
  return nullptr;
}

std::string_view to_string(LayerInfo::Role role) {
  switch (role) {
    case LayerInfo::Role::kInput:
      return "input";
    case LayerInfo::Role::kModule:
      return "module";
    case LayerInfo::Role::kOp:
      return "op";
  }
  return "op";
}

}  // namespace nansense
