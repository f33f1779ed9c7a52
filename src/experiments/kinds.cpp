// The kinds' declarations (parameters, defaults, ranges, descriptions), which
// layers each can use, and params checked and layered over the defaults.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "common/dtype.h"
#include "experiments/experiments.h"

namespace nansense::experiments {

namespace {

using Type = ParamSpec::Type;

ParamSpec integer(std::string key, std::string label, int64_t fallback, std::optional<double> min,
                  std::optional<double> max, std::string description) {
  return {std::move(key), std::move(label), Type::kInteger, fallback, min, max, {}, std::move(description)};
}
ParamSpec number(std::string key, std::string label, double fallback, std::optional<double> min,
                 std::optional<double> max, std::string description) {
  return {std::move(key), std::move(label), Type::kNumber, fallback, min, max, {}, std::move(description)};
}
ParamSpec boolean(std::string key, std::string label, bool fallback, std::string description) {
  return {std::move(key),        std::move(label), Type::kBoolean, fallback, std::nullopt, std::nullopt, {},
          std::move(description)};
}

const ParamSpec kChannel = integer("channel", "Channel", 0, -1, std::nullopt,
                                   "The layer's channel (an index along dim 1) whose mean activation is the target; "
                                   "-1 = the whole layer's mean.");
const ParamSpec kBatch =
    integer("batch", "Inputs", 8, 1, 64, "How many samples of the current batch to attribute (its first ones).");

std::vector<KindSpec> make_kinds() {
  std::vector<KindSpec> k;
  k.push_back(
      {"deep_dream",
       "Deep Dream",
       "Synthesise the input each channel responds to most.",
       "Gradient ascent on the input: sample i starts from noise (or a sample of the current batch) and is changed, "
       "step by step, to raise channel i's mean activation in the layer. Each step's gradient is normalised per "
       "sample (divided by its mean magnitude), so lr is the step size in input units. Jitter (a random shift, "
       "undone after the step), diffusion (a blend with a 3x3 blur) and zoom keep the picture from turning into "
       "high-frequency noise; clamp keeps it displayable ([0,1] after undoing input_mean/input_std). What comes "
       "out is what the channel looks for. The objective is the mean target activation; it should rise.",
       false,
       {integer("channels", "Channels", 8, 1, 64, "How many channels, from channel 0: one dreamed image each."),
        {"start",
         "Start from",
         Type::kChoice,
         "noise",
         std::nullopt,
         std::nullopt,
         {"noise", "sample"},
         "noise: random input with the batch's mean and std; sample: a sample of the current batch."},
        integer("sample", "Sample", 0, 0, std::nullopt,
                "Which sample of the current batch to start from (start=sample)."),
        integer("steps", "Steps", 300, 1, 10000, "Gradient steps."),
        boolean("all_steps", "Publish every step", false,
                "Publish the images after every step instead of about 20 evenly spaced ones."),
        number("lr", "Learning rate", 0.05, 0, 100, "Step size of each normalised gradient step."),
        number("diffusion", "Diffusion", 0.05, 0, 1, "Blend with a 3x3 box blur after each step (0 = none)."),
        integer("jitter", "Jitter (px)", 2, 0, 64, "Random shift of up to this many pixels, undone after each step."),
        number("zoom", "Zoom multiplier per step", 1.0, 1, 2, "Centre zoom after each step (1 = none)."),
        boolean("minimize", "Minimize activations", false, "Descend instead: what the channel responds to least."),
        boolean("clamp", "Clamp to displayable range", true,
                "Keep the input within [0,1] after undoing input_mean/input_std.")}});
  k.push_back(
      {"gradcam",
       "Grad-CAM (Captum)",
       "Where in the input the layer's features drove the class score.",
       "Grad-CAM (Captum's LayerGradCam): for each sample, the gradient of the target class's output with respect "
       "to the layer's activation is averaged over each channel's positions; these averages weight the channels' "
       "activation maps, which are summed and passed through ReLU. Bright regions are where the layer saw evidence "
       "for the class. Needs a layer with spatial maps ([N,C,H,W] or [N,C,L]) and a model output of [batch, "
       "classes]; the map has the layer's resolution and is drawn stretched to the input's.",
       true,
       {integer("target", "Target class", -1, -1, std::nullopt,
                "The output class explained; -1 = each sample's predicted class (argmax)."),
        kBatch}});
  k.push_back({"neuron_gradient",
               "Neuron Gradient (Captum)",
               "How each input pixel changes the layer-channel's mean activation.",
               "Neuron Gradient (Captum's NeuronGradient): the gradient of the chosen channel's mean activation in "
               "the layer (or the whole layer's mean) with respect to each input value, per sample. Large "
               "magnitudes mark the pixels the channel is most sensitive to right now.",
               true,
               {kChannel, kBatch}});
  k.push_back(
      {"neuron_ig",
       "Neuron Integrated Gradients (Captum)",
       "How much each input pixel contributes to the layer-channel's mean activation.",
       "Neuron Integrated Gradients (Captum's NeuronIntegratedGradients) from an all-zero baseline: the "
       "gradients of the channel's mean activation along the straight path from zero to the input, "
       "integrated (Gauss-Legendre, ig_steps points) and multiplied by the input. The attributions of a "
       "sample add up to F(input) - F(zero) (completeness); the result reports both sums.",
       true,
       {kChannel, kBatch,
        integer("ig_steps", "Integration steps", 32, 2, 512, "Points on the path from the baseline to the input.")}});
  k.push_back({"occlusion",
               "Occlusion (Captum)",
               "How much hiding each patch changes the layer-channel's mean activation.",
               "Occlusion (Captum's Occlusion) against an intermediate layer: a window of zeros (over every input "
               "channel) slides over the input with the given stride; each input value's attribution is the mean, "
               "over the windows that covered it, of the drop in the chosen channel's mean activation. Positive = "
               "hiding it lowers the activation. Needs image inputs ([N,C,H,W]).",
               true,
               {kChannel, kBatch, integer("window", "Window (px)", 4, 1, 256, "Side of the square window."),
                integer("stride", "Stride", 2, 1, 256, "Step between windows.")}});
  return k;
}

std::string type_name(Type t) {
  switch (t) {
    case Type::kInteger:
      return "an integer";
    case Type::kNumber:
      return "a number";
    case Type::kBoolean:
      return "true or false";
    case Type::kChoice:
      return "one of";
  }
  return "";
}

}  // namespace

const std::vector<KindSpec>& kinds() {
  static const std::vector<KindSpec> k = make_kinds();
  return k;
}

const KindSpec* find_kind(const std::string& kind) {
  for (const auto& k : kinds()) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

std::string kind_names() {
  std::string out;
  for (const auto& k : kinds()) out += (out.empty() ? "" : ", ") + k.kind;
  return out;
}

std::string_view to_string(Result::Stage stage) {
  switch (stage) {
    case Result::Stage::kQueued:
      return "queued";
    case Result::Stage::kRunning:
      return "running";
    case Result::Stage::kDone:
      return "done";
    case Result::Stage::kStopped:
      return "stopped";
    case Result::Stage::kFailed:
      return "failed";
  }
  return "failed";
}

std::optional<std::string> why_unusable(const KindSpec& kind, const LayerInfo& layer) {
  if (layer.role == LayerInfo::Role::kInput) {
    return "\"" + layer.name + "\" is a model input; experiments look at what a layer computes from it";
  }
  if (layer.dtype.find("float") == std::string::npos && layer.dtype.find("half") == std::string::npos &&
      layer.dtype.find("double") == std::string::npos && !layer.dtype.empty()) {
    return "layer \"" + layer.name + "\" is " + layer.dtype + ", not floating point: it has no gradient";
  }
  const auto rank = layer.output_shape.size();
  if (kind.kind == "gradcam" && rank < 3) {
    return "Grad-CAM needs a layer with spatial maps ([N,C,H,W] or [N,C,L]); \"" + layer.name + "\" gives " +
           common::shape_text(layer.output_shape);
  }
  if (rank < 2) {
    return kind.title + " needs a layer with a channel dimension; \"" + layer.name + "\" gives " +
           common::shape_text(layer.output_shape);
  }
  return std::nullopt;
}

Resolved resolve_params(const KindSpec& kind, const std::vector<json>& layers) {
  Resolved r;
  r.params = json::object();
  for (const auto& p : kind.params) r.params[p.key] = p.fallback;
  for (const auto& given : layers) {
    if (given.is_null()) continue;
    if (!given.is_object()) throw std::invalid_argument("params must be a JSON object, got " + given.dump());
    for (const auto& [key, value] : given.items()) {
      auto spec =
          std::find_if(kind.params.begin(), kind.params.end(), [&key = key](const auto& p) { return p.key == key; });
      if (spec == kind.params.end()) {
        if (std::find(r.ignored.begin(), r.ignored.end(), key) == r.ignored.end()) r.ignored.push_back(key);
        continue;
      }
      const std::string where = kind.kind + " parameter \"" + key + "\"";
      json v = value;
      switch (spec->type) {
        case Type::kBoolean:
          if (!v.is_boolean()) throw std::invalid_argument(where + " must be true or false, got " + value.dump());
          break;
        case Type::kChoice: {
          std::string options;
          for (const auto& o : spec->options) options += (options.empty() ? "" : ", ") + o;
          if (!v.is_string() ||
              std::find(spec->options.begin(), spec->options.end(), v.get<std::string>()) == spec->options.end()) {
            throw std::invalid_argument(where + " must be one of " + options + ", got " + value.dump());
          }
          break;
        }
        case Type::kInteger:
        case Type::kNumber: {
          if (!v.is_number())
            throw std::invalid_argument(where + " must be " + type_name(spec->type) + ", got " + value.dump());
          const double d = v.get<double>();
          if (!std::isfinite(d)) throw std::invalid_argument(where + " must be finite, got " + value.dump());
          if (spec->type == Type::kInteger) {
            if (d != std::floor(d)) throw std::invalid_argument(where + " must be an integer, got " + value.dump());
            v = static_cast<int64_t>(d);
          } else {
            v = d;
          }
          auto text = [](double x) {
            std::ostringstream o;
            o << x;
            return o.str();
          };
          if (spec->minimum && d < *spec->minimum) {
            throw std::invalid_argument(where + " must be at least " + text(*spec->minimum) + ", got " + value.dump());
          }
          if (spec->maximum && d > *spec->maximum) {
            throw std::invalid_argument(where + " must be at most " + text(*spec->maximum) + ", got " + value.dump());
          }
          break;
        }
      }
      r.params[key] = v;
    }
  }
  return r;
}

}  // namespace nansense::experiments
