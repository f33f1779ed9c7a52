// The flight recorder: what every batch keeps so that a NaN can be captured
// before the optimizer applies it and replayed bit for bit — at the cost of a
// few pointer copies and the RNG state (about 5 KB) per batch.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "numerics/capsule.h"
#include "state/rng_state.h"

namespace nansense::numerics {

class FlightRecorder {
 public:
  explicit FlightRecorder(const torch::nn::Module& model);

  // Start of every batch: the RNG states, which parameters hold a gradient,
  // and a copy of every buffer changed in place since the last batch began
  // (BatchNorm statistics; a constant mask is copied once).
  void begin_batch();
  // The batch item's tensors: references, with their version counters so that
  // an in-place change during the step is noticed.
  void set_item(std::vector<torch::Tensor> tensors);
  const std::vector<torch::Tensor>& item() const { return item_; }

  // The capsule's input at a trip, before the optimizer step: `live` is the
  // session's training state (the model this recorder watches, every
  // optimizer, the scheduler).
  CapsuleInput capsule_input(const state::LiveState& live) const;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  std::vector<torch::Tensor> buffer_copies_;
  std::vector<int64_t> buffer_versions_;
  std::vector<bool> grad_defined_;
  state::RngState rng_;
  std::vector<torch::Tensor> item_;
  std::vector<int64_t> item_versions_;
};

}  // namespace nansense::numerics
