#include "numerics/flight_recorder.h"

#include <ATen/record_function.h>

#include "common/own_ops.h"

namespace nansense::numerics {

FlightRecorder::FlightRecorder(const torch::nn::Module& model) {
  for (const auto& p : model.named_parameters()) params_.push_back(p.value());
  for (const auto& b : model.named_buffers()) buffers_.push_back(b.value());
  buffer_copies_.resize(buffers_.size());
  buffer_versions_.assign(buffers_.size(), -1);
}

void FlightRecorder::begin_batch() {
  common::OwnOps own_ops;
  rng_ = state::RngState::capture();
  grad_defined_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) grad_defined_[i] = params_[i].grad().defined();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const auto& b = buffers_[i];
    if (!b.defined() || b._version() == buffer_versions_[i]) continue;
    buffer_copies_[i] = b.detach().clone();
    buffer_versions_[i] = b._version();
  }
  item_.clear();
  item_versions_.clear();
}

void FlightRecorder::set_item(std::vector<torch::Tensor> tensors) {
  item_ = std::move(tensors);
  item_versions_.clear();
  for (const auto& t : item_) item_versions_.push_back(t.defined() ? t._version() : 0);
}

CapsuleInput FlightRecorder::capsule_input(const state::LiveState& live) const {
  CapsuleInput in;
  in.live = live;
  in.buffers = buffer_copies_;
  in.grad_defined = grad_defined_;
  in.rng = rng_;
  for (size_t i = 0; i < item_.size(); ++i) {
    if (!item_[i].defined()) continue;
    in.batch.push_back(item_[i]);
    if (item_[i]._version() != item_versions_[i]) {
      in.notes.push_back("the batch's tensor #" + std::to_string(i) +
                         " was changed in place during the step: the capsule holds the changed values");
    }
  }
  if (item_.empty()) {
    static const std::string kNoTensors =
        "the batch item had no tensors the recorder could see (specialise nansense::ItemTensors)";
    in.notes.push_back(kNoTensors);
  }
  return in;
}

}  // namespace nansense::numerics
