#include "capture/host_buffers.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/host_copy.h"
#include "common/own_ops.h"

namespace nansense::capture {

namespace {
std::atomic<bool> recycling{true};
}  // namespace

void HostBuffers::set_recycling(bool on) { recycling = on; }

torch::Tensor HostBuffers::copy(const torch::Tensor& t, std::optional<double>* abs_sum) {
  if (abs_sum) abs_sum->reset();
  // A recycled buffer's copy runs no op but the copy itself (none for a
  // dense float32 tensor), so the observer's callback needs no guard.
  common::OwnOps own_ops(common::OwnOps::kFew);
  // Normal tensors, also when a caller runs in inference mode: an inference
  // tensor could not be written outside it.
  std::optional<c10::InferenceMode> normal;
  if (c10::InferenceMode::is_enabled()) normal.emplace(false);
  torch::NoGradGuard no_grad;
  if (t.layout() != at::kStrided || t.is_quantized() || t.is_nested() || t.numel() == 0 || !recycling) {
    return t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  const Key key{static_cast<int>(t.scalar_type()), t.numel()};
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
      buffer = at::empty({t.numel()}, at::TensorOptions().dtype(t.scalar_type()).device(torch::kCPU));
      list.push_back({buffer, generation_});
    }
  }
  // The layout t.to(kCPU, copy=true) gives: t's strides where it is dense,
  // else contiguous.
  const bool dense = t.is_non_overlapping_and_dense();
  c10::SmallVector<int64_t, 6> strides;
  if (dense) {
    strides.assign(t.strides().begin(), t.strides().end());
  } else {
    strides.resize(static_cast<size_t>(t.dim()));
    int64_t stride = 1;
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      strides[static_cast<size_t>(d)] = stride;
      stride *= std::max<int64_t>(t.size(d), 1);
    }
  }
  // A tensor of its own over the buffer's storage (not a view of the pool's
  // tensor: nothing a holder does to it reaches the pool), made as at::empty
  // makes one, without a trip through the dispatcher for it and for set_.
  auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(buffer.storage()),
                                                      c10::DispatchKeySet(c10::DispatchKey::CPU), buffer.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), strides);
  // Dense, `out` has t's strides: both hold the values in the same order in
  // one block of memory from their data pointers.
  // (A conjugate or negative view holds its values unresolved: copy_ resolves them.)
  if (dense && t.is_cpu() && t.has_storage() && !t.is_conj() && !t.is_neg()) {
    if (abs_sum && t.scalar_type() == torch::kFloat) {
      *abs_sum = common::copy_and_abs_sum(static_cast<const float*>(t.data_ptr()), static_cast<float*>(out.data_ptr()),
                                          t.numel());
      return out;
    }
    // The same bytes: one memcpy, not copy_'s element loop (twice as slow
    // on a capture's weights and optimizer state, on one torch thread).
    std::memcpy(out.data_ptr(), t.data_ptr(), t.nbytes());
    return out;
  }
  out.copy_(t);
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
