// The network's layers and data flow, as discovered by tracing a forward.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nansense {

// One node of the discovered graph.
//
// A layer is either a module whose parameters an op used (named by module
// path, e.g. "features.0"; a module's second call in one batch is
// "features.0#2"), a parameterless registered module matched unambiguously by
// its op ("conv2_drop", a Dropout2d), a parameterless op named fx-style and
// scoped under the module whose call it sits in ("relu", "layers.0.relu_1",
// "add"), or a graph input ("input", "input_1").
struct LayerInfo {
  enum class Role { kInput, kModule, kOp };
  std::string name;
  Role role = Role::kOp;
  std::string kind;                     // "Conv2d", "relu", "input"
  std::string module;                   // module path; empty for ops and inputs
  std::vector<std::string> ops;         // the aten ops it ran, in order
  std::vector<int64_t> output_shape;    // shape of its activation
  std::string dtype;                    // dtype of its activation
  std::vector<std::string> parameters;  // qualified parameter names it used
  // Its hyperparameters as a person reads them: the module's own printout
  // ("Conv2d(1, 16, kernel_size=[3, 3], ...)") or the op's literal arguments
  // ("max_pool2d(·, [2, 2], ...)", · standing for a tensor).
  std::string description;
  // A pure shape op (view, reshape, permute, transpose, select, flatten,
  // unsqueeze, ...): its values are its input's, rearranged. The UI folds
  // these into the edges unless asked to show them.
  bool shape_op = false;
};

struct Architecture {
  std::vector<LayerInfo> layers;                           // execution order
  std::vector<std::pair<std::string, std::string>> edges;  // producer -> consumer
  std::vector<std::string> inputs;                         // names of input layers

  // The layer named `name`, or nullptr.
  const LayerInfo* find(const std::string& name) const;
};

std::string_view to_string(LayerInfo::Role role);

}  // namespace nansense
