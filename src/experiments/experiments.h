// Interpretability experiments on the paused model, written on LibTorch's
// autograd (Captum's methods, which LibTorch lacks): Deep Dream, Grad-CAM,
// Neuron Gradient, Neuron Integrated Gradients and Occlusion. Each kind
// declares its parameters once (key, type, default, range, description);
// the engine (engine.h) validates requests against them and MCP and the page
// list them. run() computes one experiment on the training thread.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/json_values.h"
#include "nansense/architecture.h"

namespace nansense::experiments {

using common::json;

struct ParamSpec {
  enum class Type { kInteger, kNumber, kBoolean, kChoice };
  std::string key;
  std::string label;
  Type type = Type::kInteger;
  json fallback;  // the kind's default
  std::optional<double> minimum;
  std::optional<double> maximum;
  std::vector<std::string> options;  // kChoice
  std::string description;
};

struct KindSpec {
  std::string kind;  // "deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"
  std::string title;
  std::string summary;       // one line
  std::string description;   // what it computes and how to read it
  bool attribution = false;  // a map over the input (Captum's kinds), not a dreamed image
  std::vector<ParamSpec> params;
};

// Every kind, in the page's order.
const std::vector<KindSpec>& kinds();
// nullptr for an unknown kind.
const KindSpec* find_kind(const std::string& kind);
// "deep_dream, gradcam, ..." for refusals.
std::string kind_names();

// Why `kind` cannot run on `layer` (nullopt: it can). Judged from the
// traced architecture: input layers are excluded, Grad-CAM needs spatial
// maps ([N,C,H,W] or [N,C,L]), the neuron kinds a channel dimension.
std::optional<std::string> why_unusable(const KindSpec& kind, const LayerInfo& layer);

// Params checked against the kind's specs and layered over its defaults:
// `layers` are applied in order (session defaults, then the caller's).
// Unknown keys are not errors: they are listed in `ignored`. Throws
// std::invalid_argument naming the parameter, what it must be and what came.
struct Resolved {
  json params;
  std::vector<std::string> ignored;
};
Resolved resolve_params(const KindSpec& kind, const std::vector<json>& layers);

// One experiment's published state: progress while it runs, then its outcome.
struct Result {
  enum class Stage { kQueued, kRunning, kDone, kStopped, kFailed };
  uint64_t seq = 0;
  std::string kind;
  std::string layer;
  json params;
  std::string tab;  // the page (tab) whose auto experiment this is; "" when asked for directly
  Stage stage = Stage::kQueued;
  int64_t step = 0;
  int64_t total = 0;
  std::optional<double> objective;  // Deep Dream: mean target activation at `step`
  std::vector<double> objectives;   // Deep Dream: per step so far
  std::string error;                // kFailed
  std::string stop_reason;          // kStopped: "cancelled", "time limit", "training resumed", ...
  std::vector<std::string> notes;   // parameters clamped to the layer or batch, ...
  double seconds = 0;
  // Deep Dream (CPU): the images it started from and the dreamed images, one
  // per channel; `channels[i]` is the channel sample i maximised.
  torch::Tensor start;
  torch::Tensor images;
  std::vector<int64_t> channels;
  // Attribution kinds (CPU): the inputs attributed and their attributions,
  // input-shaped ([B,C,H,W]) or Grad-CAM's map over the layer's positions
  // ([B,H',W'] or [B,L']); `targets` are Grad-CAM's classes per sample.
  torch::Tensor inputs;
  torch::Tensor attributions;
  std::vector<int64_t> targets;
  // Per sample: Neuron IG's F(x) - F(0) and the attributions' sum
  // (completeness); the target's value for the other kinds.
  std::vector<double> target_values;
  std::vector<double> attribution_sums;

  bool finished() const { return stage == Stage::kDone || stage == Stage::kStopped || stage == Stage::kFailed; }
};
std::string_view to_string(Result::Stage stage);

using ForwardFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// What run() works with, on the training thread.
struct Context {
  torch::nn::Module* model = nullptr;
  ForwardFn forward;
  // The batch's model inputs (its first samples), on the model's device.
  std::vector<torch::Tensor> inputs;
  // The inputs' normalisation per channel (empty: none), for Deep Dream's
  // clamp to the displayable range [0, 1].
  std::vector<double> mean;
  std::vector<double> std;
  // Seeds Deep Dream's noise and jitter (the request's seq: reruns repeat).
  uint64_t seed = 0;
  // Asked between steps; a reason stops the run ("cancelled", ...).
  std::function<std::optional<std::string>()> should_stop;
  // Progress: a copy of the result as it stands.
  std::function<void(const Result&)> progress;
};

// Runs `kind` on `layer` with resolved params. Call it inside a
// state::ModelIsolation (the model in eval mode, everything restored after).
// Fills `result` (stage kDone or kStopped); throws std::exception with a
// clear message for what cannot run (the engine makes it a failed result).
void run(const KindSpec& kind, const std::string& layer, const json& params, Context& context, Result& result);

}  // namespace nansense::experiments
