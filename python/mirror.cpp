#include "mirror.h"

#include <map>
#include <stdexcept>

namespace nansense::python {

namespace {

// A Python module as the engine sees it: its kind (what Module::name() says
// of a torch::nn module, "Conv2d"), its printout, its tensors.
class MirrorModule : public torch::nn::Module {
 public:
  MirrorModule(std::string kind, std::string description)
      : torch::nn::Module(std::move(kind)), description_(std::move(description)) {}
  void pretty_print(std::ostream& stream) const override { stream << description_; }

 private:
  std::string description_;
};

}  // namespace

std::shared_ptr<torch::nn::Module> build_mirror(const std::vector<ModuleSpec>& specs) {
  if (specs.empty() || !specs.front().path.empty()) {
    throw std::invalid_argument("the module list must start with the root module (path \"\")");
  }
  std::map<std::string, std::shared_ptr<torch::nn::Module>> by_path;
  std::shared_ptr<torch::nn::Module> root;
  for (const auto& spec : specs) {
    auto module = std::make_shared<MirrorModule>(spec.kind, spec.description);
    // The tensors themselves, not copies: the optimizer's in-place updates
    // and BatchNorm's running statistics are what the engine reads.
    for (const auto& [name, t] : spec.parameters) {
      if (t.defined()) module->register_parameter(name, t, t.requires_grad());
    }
    for (const auto& [name, t] : spec.buffers) {
      if (t.defined()) module->register_buffer(name, t);
    }
    if (spec.path.empty()) {
      if (root) throw std::invalid_argument("the module list has two roots");
      root = module;
    } else {
      const auto dot = spec.path.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : spec.path.substr(0, dot);
      const std::string local = dot == std::string::npos ? spec.path : spec.path.substr(dot + 1);
      auto it = by_path.find(parent);
      if (it == by_path.end()) {
        throw std::invalid_argument("module \"" + spec.path + "\" comes before its parent \"" + parent + "\"");
      }
      it->second->register_module(local, module);
    }
    by_path[spec.path] = module;
  }
  return root;
}

}  // namespace nansense::python
