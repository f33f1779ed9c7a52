// Shows one sample of a model input the way a person recognises it: an image
// denormalised with the user's mean/std, or a colour strip for other inputs.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "render/image.h"

namespace nansense::render {

struct InputImageOptions {
  int64_t sample = 0;
  // Per-channel (or one shared) values: the picture shows x * std + mean.
  std::vector<double> mean;
  std::vector<double> std;
  // Maps one sample [C,H,W] to [1,H,W] or [3,H,W] in 0..1 for inputs that are
  // not gray or RGB images. Runs on a server thread, on a CPU copy.
  std::function<torch::Tensor(const torch::Tensor&)> transform;
};

struct InputImage {
  Image image;
  // "image", "strip", or "values" (a bool or integer input as a grid of
  // cells with the values written in them, render/value_grid.h).
  std::string layout;
  int64_t batch_size = 0;
  std::string dtype;
  // bool and integer inputs: the sample's smallest and largest value, and
  // how many are true (bool).
  std::optional<int64_t> value_min, value_max;
  std::optional<int64_t> true_count;
  // Set when the picture is not the plain image: what to pass to see it.
  std::string hint;
};

// [N,1|3,H,W] and [N,H,W] become images; other [N,C,H,W] go through the
// transform when there is one; bool and integer inputs (token ids, masks,
// labels) become a value grid, or a categorical strip when they hold too many
// values to write out; everything else is drawn as a strip on the shared
// colour scale. Throws std::invalid_argument for a sample out of range,
// mean/std of the wrong length, or a transform with an unusable result.
InputImage render_input(const torch::Tensor& batch, const InputImageOptions& options);

}  // namespace nansense::render
