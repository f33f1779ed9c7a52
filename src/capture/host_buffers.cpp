#include "capture/host_buffers.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>

#include "common/host_copy.h"

namespace nansense::capture {

namespace {
std::atomic<bool> recycling{true};
}  // namespace

void HostBuffers::set_recycling(bool on) { recycling = on; }

torch::Tensor HostBuffers::copy(const torch::Tensor& t, std::optional<double>* abs_sum) {
  if (abs_sum) abs_sum->reset();
  at::DisableRecordFunctionGuard no_record;
  // Normal tensors, also when a caller runs in inference mode: an inference
  // tensor could not be written outside it.
  c10::InferenceMode normal(false);
  torch::NoGradGuard no_grad;
  auto live = t.detach();
  if (live.layout() != at::kStrided || live.is_quantized() || live.is_nested() || live.numel() == 0 || !recycling) {
    return live.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  const Key key{static_cast<int>(live.scalar_type()), live.numel()};
  torch::Tensor buffer;
  {
    std::lock_guard lock(mu_);
    auto& list = entries_[key];
    for (auto& e : list) {
      // Only the pool's own tensor refers to the buffer and its storage: no
      // snapshot, view or viewer holds it, and none can take it but through
      // this pool, under this lock.
      if (e.buffer.use_count() == 1 && e.buffer.storage().use_count() == 1) {
        // The counts are read relaxed: pairs with the release of the last
        // holder's reference, so its reads of the old values come first.
        std::atomic_thread_fence(std::memory_order_acquire);
        e.used = generation_;
        buffer = e.buffer;
        break;
      }
    }
    if (!buffer.defined()) {
      buffer = at::empty({live.numel()}, at::TensorOptions().dtype(live.scalar_type()).device(torch::kCPU));
      list.push_back({buffer, generation_});
    }
  }
  // The layout t.to(kCPU, copy=true) gives: t's strides where it is dense,
  // else contiguous.
  std::vector<int64_t> strides;
  if (live.is_non_overlapping_and_dense()) {
    strides = live.strides().vec();
  } else {
    strides.resize(static_cast<size_t>(live.dim()));
    int64_t stride = 1;
    for (int64_t d = live.dim() - 1; d >= 0; --d) {
      strides[static_cast<size_t>(d)] = stride;
      stride *= std::max<int64_t>(live.size(d), 1);
    }
  }
  // A tensor of its own over the buffer's storage (not a view of the pool's
  // tensor: nothing a holder does to it reaches the pool).
  auto out = at::empty({0}, buffer.options());
  out.set_(buffer.storage(), /*storage_offset=*/0, live.sizes(), strides);
  // Dense, `out` has live's strides: both hold the values in the same order
  // in one block of memory from their data pointers.
  if (abs_sum && live.is_cpu() && live.scalar_type() == torch::kFloat && live.is_non_overlapping_and_dense()) {
    *abs_sum = common::copy_and_abs_sum(static_cast<const float*>(live.data_ptr()), static_cast<float*>(out.data_ptr()),
                                        live.numel());
    return out;
  }
  out.copy_(live);
  return out;
}

void HostBuffers::end_capture() {
  std::lock_guard lock(mu_);
  ++generation_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Entry& e) { return generation_ - e.used > 2; }),
               list.end());
    it = list.empty() ? entries_.erase(it) : std::next(it);
  }
}

int64_t HostBuffers::bytes() const {
  std::lock_guard lock(mu_);
  int64_t total = 0;
  for (const auto& [_, list] : entries_) {
    for (const auto& e : list) total += static_cast<int64_t>(e.buffer.storage().nbytes());
  }
  return total;
}

}  // namespace nansense::capture
