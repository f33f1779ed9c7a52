#include "common/host_copy.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "common/cpu_features.h"
#include "common/own_ops.h"

namespace nansense::common {

std::vector<torch::Tensor> copy_to_host(const std::vector<torch::Tensor>& tensors) {
  common::OwnOps own_ops;
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

namespace {

// One loop for both: each group of 16 values is read once, stored to the
// copy as read and added to the lanes, so the sum adds no pass over memory
// to the copy. Built twice: for the baseline and for AVX2 (chosen at run
// time), the same additions in the same order, so the sums are equal.
template <bool kCopy>
__attribute__((always_inline)) inline double sum_abs_body(const float* v, float* dst, int64_t n) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 256;
  double total = 0;
  int64_t k = 0;
  for (; k + kBlock <= n; k += kBlock) {
    float lane[kLanes] = {};
    for (int64_t j = 0; j < kBlock; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float x = v[k + j + l];
        if constexpr (kCopy) dst[k + j + l] = x;
        lane[l] += std::fabs(x);
      }
    }
    double block = 0;
    for (float x : lane) block += x;
    total += block;
  }
  if constexpr (kCopy) {
    if (k < n) std::memcpy(dst + k, v + k, static_cast<size_t>(n - k) * sizeof(float));
  }
  for (; k < n; ++k) total += std::fabs(static_cast<double>(v[k]));
  return total;
}

#if defined(NANSENSE_AVX2_BUILDS)
template <bool kCopy>
__attribute__((target("avx2"))) double sum_abs_avx2(const float* v, float* dst, int64_t n) {
  return sum_abs_body<kCopy>(v, dst, n);
}
#endif

template <bool kCopy>
double sum_abs(const float* v, float* dst, int64_t n) {
#if defined(NANSENSE_AVX2_BUILDS)
  if (cpu_has_avx2()) return sum_abs_avx2<kCopy>(v, dst, n);
#endif
  return sum_abs_body<kCopy>(v, dst, n);
}

}  // namespace

double abs_sum(const float* v, int64_t n) { return sum_abs<false>(v, nullptr, n); }

double copy_and_abs_sum(const float* src, float* dst, int64_t n) { return sum_abs<true>(src, dst, n); }

}  // namespace nansense::common
