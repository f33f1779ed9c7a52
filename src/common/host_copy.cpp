#include "common/host_copy.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <tuple>

namespace nansense::common {

std::vector<torch::Tensor> copy_to_host(const std::vector<torch::Tensor>& tensors) {
  at::DisableRecordFunctionGuard no_record;
  c10::InferenceMode no_autograd;
  std::map<std::tuple<std::string, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.defined()) groups[{t.device().str(), static_cast<int>(t.scalar_type())}].push_back(i);
  }
  std::vector<torch::Tensor> out(tensors.size());
  for (const auto& [_, members] : groups) {
    std::vector<torch::Tensor> flat;
    std::vector<int64_t> sizes;
    flat.reserve(members.size());
    sizes.reserve(members.size());
    for (auto i : members) {
      flat.push_back(tensors[i].dim() == 1 ? tensors[i] : tensors[i].reshape({-1}));
      sizes.push_back(tensors[i].numel());
    }
    // cat always allocates: a CPU group is copied too, as promised.
    auto host = torch::cat(flat).to(torch::kCPU);
    auto parts = host.split_with_sizes(sizes);
    for (size_t k = 0; k < members.size(); ++k) {
      const auto& original = tensors[members[k]];
      out[members[k]] = original.dim() == 1 ? parts[k] : parts[k].view(original.sizes());
    }
  }
  return out;
}

c10::ScalarType accumulator_dtype(const c10::Device& device) {
  return device.is_mps() ? torch::kFloat : torch::kDouble;
}

}  // namespace nansense::common
