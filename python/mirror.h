// The engine's view of a Python nn.Module: a tree of C++ modules holding the
// very same parameter and buffer tensors (one TensorImpl each, shared with
// Python), named by the Python module paths. The engine finds layers by
// which module's tensors an op reads, so the mirror is all it needs of the
// model; it never runs a forward itself.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nansense::python {

// One entry of the Python model's named_modules(), in that (pre)order; the
// root has path "".
struct ModuleSpec {
  std::string path;
  std::string kind;                                               // type(module).__name__: "Conv2d"
  std::string description;                                        // "Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1))"
  std::vector<std::pair<std::string, torch::Tensor>> parameters;  // own, not recursive
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
};

// Builds the mirror. Throws std::invalid_argument when the specs are not a
// tree in preorder (a path whose parent is not listed before it).
std::shared_ptr<torch::nn::Module> build_mirror(const std::vector<ModuleSpec>& specs);

}  // namespace nansense::python
