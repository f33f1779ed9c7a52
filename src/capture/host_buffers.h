// CPU copies for snapshots, written into memory recycled from earlier
// snapshots rather than into fresh pages.
//
// A capture copies every layer's activation and gradient, the weights, their
// gradients and the optimizer's state to the CPU: about 22 MB a batch for the
// demo CNN. Copied into fresh memory, the kernel's work on the new pages
// (faulting them in, zeroing them, unmapping them when glibc trims its heap or
// frees a large block) cost more than the copying itself (docs/benchmarks.md,
// "Where a watched and a captured batch spend their time"). The pool keeps
// the buffers of earlier copies and writes a new copy into one only once
// nothing else holds its storage: every snapshot, view and viewer that held
// it is gone. A buffer anyone still holds (the published snapshot, a frozen
// moment, a viewer rendering it) is never written, so a published snapshot
// stays immutable. With one snapshot published at a time the pool settles
// on two sets of buffers: the published one and the one the next capture
// writes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace nansense::capture {

class HostBuffers {
 public:
  // A CPU copy of `t` (detached; the same sizes, and the same strides where
  // `t` is dense, as t.to(kCPU, copy=true) gives) in a buffer no one else
  // holds, when the pool has one of its dtype and size, else in fresh memory
  // that joins the pool. Any thread (gradient hooks run on autograd's).
  // With `abs_sum` given, a dense float32 CPU tensor's sum of |x| is taken
  // as it is copied (common::copy_and_abs_sum: no second pass for the
  // numerical checks) and written there; any other copy leaves it nullopt.
  torch::Tensor copy(const torch::Tensor& t, std::optional<double>* abs_sum = nullptr);

  // Called after each capture: buffers that neither of the last two captures
  // took are let go (a model whose shapes changed, a buffer held by a frozen
  // moment), so the pool holds no more than two captures' copies.
  void end_capture();

  // Bytes the pool holds, free and held.
  int64_t bytes() const;

  // For bench/: false makes every pool copy into fresh memory (as before the
  // pool), to time both in one run. Process-wide; default true.
  static void set_recycling(bool on);

 private:
  struct Entry {
    torch::Tensor buffer;  // one-dimensional, contiguous, the pool's own
    uint64_t used = 0;     // the capture that last took it
  };
  using Key = std::pair<int, int64_t>;  // dtype, element count

  mutable std::mutex mu_;
  std::map<Key, std::vector<Entry>> entries_;
  uint64_t generation_ = 1;
};

}  // namespace nansense::capture
