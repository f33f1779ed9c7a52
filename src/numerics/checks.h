// The checks themselves: given a batch's gradients (and, on a traced batch,
// its activations), which reasons trip and the per-layer table.
#pragma once

#include <torch/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nansense/debug.h"
#include "nansense/tensor_stats.h"
#include "numerics/debug_state.h"

namespace nansense::numerics {

// The key CheckInput::unchecked holds: "<source>:<tensor>".
std::string unchecked_key(const std::string& source, const std::string& tensor);

// |x| sums by tensor (its TensorImpl).
using KnownAbsSums = std::unordered_map<const c10::TensorImpl*, double>;

struct CheckInput {
  // (layer, gradient) per parameter with a gradient; several per layer.
  std::vector<std::pair<std::string, torch::Tensor>> weight_gradients;
  // The parameters' names, parallel to weight_gradients (empty: the layer
  // names), naming the tensor an UncheckedTensor reports.
  std::vector<std::string> weight_gradient_names;
  // A traced batch's per-layer activations and activation gradients (CPU
  // copies); null when the batch was not captured.
  const std::map<std::string, torch::Tensor>* activations = nullptr;
  const std::map<std::string, torch::Tensor>* activation_gradients = nullptr;
  // The whole batch's statistics of copies the snapshot budget trimmed to
  // their first samples: their NaN and Inf counts cover the samples left out.
  const std::map<std::string, TensorStats>* activation_stats = nullptr;
  const std::map<std::string, TensorStats>* activation_gradient_stats = nullptr;
  // Layers whose activations' ±Inf values are intended (an explicit ±inf
  // fill and what carried it along): their NaNs are checked, not their Infs.
  std::set<std::string> intended_activations;
  // Layers in graph order, for the table's row order (others follow).
  std::vector<std::string> layer_order;
  // Tensors whose checks failed before (unchecked_key): skipped.
  std::set<std::string> unchecked;
  // The |x| sums already known of some of the tensors above (a capture's
  // copies, summed as they were written): not summed again.
  const KnownAbsSums* known_abs_sums = nullptr;
};

struct CheckResult {
  std::vector<std::string> reasons;      // canonical order: nan, inf, underflow, overflow
  std::vector<std::string> checks_used;  // nan_inf, under_over
  std::vector<LayerReport> layers;       // affected layers only
  // Tensors whose check threw in this call: left out, the rest checked.
  std::vector<UncheckedTensor> failed;
};

// abs_sums (numerics/bands.h) tensor by tensor when the batched call throws:
// a tensor whose own sum throws gets nullopt and its error.
// The sums `known` holds are taken from it, not computed.
std::vector<std::optional<double>> abs_sums_each(const std::vector<torch::Tensor>& tensors,
                                                 std::vector<std::string>* errors, const KnownAbsSums* known = nullptr);

// Weight gradients cost one device->host copy (a |g| sum per parameter) and a
// second only when a sum is suspicious; activations are CPU copies already.
CheckResult run_checks(const DebugSettings& settings, const CheckInput& input);

// Whether `layer` is on the allow-list (exactly, or as a child of a listed module path).
bool layer_allowed(const DebugSettings& settings, const std::string& layer);

// The layer a parameter belongs to: the architecture layer that uses it when
// known, else its module path ("features.0.weight" -> "features.0"), else its name.
std::string layer_of_parameter(const std::string& parameter,
                               const std::map<std::string, std::string>& architecture_owner);

}  // namespace nansense::numerics
