// An immutable, CPU-resident copy of everything one captured batch produced.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nansense/architecture.h"
#include "nansense/position.h"
#include "nansense/tensor_stats.h"

namespace nansense {

// Published atomically by the training thread at the end of a capture batch;
// other threads read it through shared_ptr<const BatchSnapshot> without ever
// blocking training. Every tensor is an independent CPU copy.
//
// Weights, weight gradients and optimizer state are read at the end of the
// batch, i.e. after the user's optimizer step.
struct BatchSnapshot {
  BatchPosition position;
  uint64_t sequence = 0;  // increases with every published snapshot
  std::shared_ptr<const Architecture> architecture;

  // Keyed by layer name (Architecture names). A gradient is absent when the
  // batch had no backward through that layer (eval phases, inputs).
  std::map<std::string, torch::Tensor> activations;
  std::map<std::string, torch::Tensor> activation_gradients;
  // Keyed by parameter name as in model->named_parameters().
  std::map<std::string, torch::Tensor> weights;
  std::map<std::string, torch::Tensor> weight_gradients;
  // Parameter name -> state key -> tensor (scalars such as Adam's step are
  // 0-dim tensors). Empty without an optimizer in StartOptions.
  std::map<std::string, std::map<std::string, torch::Tensor>> optimizer_state;
  // Parameter name -> the numeric hyperparameters of its param group (lr,
  // momentum, betas as beta1/beta2, ...), read at the same instant.
  std::map<std::string, std::map<std::string, double>> optimizer_hyperparams;
  // The tensor instruments' outputs (Session::watch_layer_tensor,
  // watch_weight_tensor): layer -> instrument name -> an activation-shaped
  // tensor (batch dimension first, trimmed like the activations), and
  // parameter name -> instrument name -> a parameter-shaped tensor. Empty
  // without registered instruments.
  std::map<std::string, std::map<std::string, torch::Tensor>> custom_activations;
  std::map<std::string, std::map<std::string, torch::Tensor>> custom_weight_tensors;
  // The model input(s) of the batch, in input-layer order.
  std::vector<torch::Tensor> inputs;

  // What the snapshot budget (StartOptions::snapshot_budget) left out. A
  // batch tensor (leading dimension == batch_size) of activations,
  // activation_gradients and inputs holds its first samples_kept samples;
  // samples_kept == batch_size when nothing was left out.
  int64_t batch_size = 0;  // 0 when the batch had no tensor input
  int64_t samples_kept = 0;
  int64_t budget_bytes = 0;     // the budget it was built under; 0 for none
  int64_t held_bytes = 0;       // bytes of activations, gradients and inputs held
  int64_t full_bytes = 0;       // what they would hold with every sample
  int64_t parameter_bytes = 0;  // weights, their gradients, optimizer state (kept whole)
  // Statistics (counts, min, max, mean) of the whole batch, computed on the
  // tensor's device before it was trimmed; only for trimmed tensors.
  std::map<std::string, TensorStats> activation_stats;
  std::map<std::string, TensorStats> activation_gradient_stats;

  // Set on a probe's result as the UI shows it (a pinned or perturbed batch
  // re-run on the paused model, forward only): activations are the probe's
  // (perturbed - unperturbed when `diff`), inputs what it ran on, no
  // gradients; weights are the live snapshot's.
  struct Probe {
    uint64_t run = 0;        // the probe run it shows
    BatchPosition position;  // the batch whose inputs were re-run
    std::string mode;        // "unchanged", "eval" or "train"
    bool diff = false;
  };
  std::optional<Probe> probe;

  // Set where a trainer adapter drives the session: the optimizer step the
  // batch is, and its micro-batch running when the snapshot was taken
  // (micro_batch -1: the step's end, every micro-batch shown; a captured
  // step names micro-batch k's layers "h.0#k+1" from the second on).
  std::optional<TrainerStep> trainer_step;

  bool trimmed() const { return samples_kept < batch_size; }
};

}  // namespace nansense
