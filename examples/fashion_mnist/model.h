// The demo's network: a small CNN for 28x28 grey images and 10 classes.
#pragma once

#include <torch/torch.h>

// The submodule names are what the debugger shows as layer names
// ("features.0" is the first convolution, "classifier.1" the first linear).
struct FashionCnnImpl : torch::nn::Module {
  FashionCnnImpl() {
    using namespace torch::nn;
    features =
        register_module("features", Sequential(Conv2d(Conv2dOptions(1, 16, 3).padding(1)), ReLU(), MaxPool2d(2),
                                               Conv2d(Conv2dOptions(16, 32, 3).padding(1)), ReLU(), MaxPool2d(2)));
    classifier = register_module("classifier",
                                 Sequential(Flatten(), Linear(32 * 7 * 7, 64), ReLU(), Dropout(0.25), Linear(64, 10)));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    return torch::log_softmax(classifier->forward(features->forward(x)), /*dim=*/1);
  }

  torch::nn::Sequential features{nullptr};
  torch::nn::Sequential classifier{nullptr};
};
TORCH_MODULE(FashionCnn);
