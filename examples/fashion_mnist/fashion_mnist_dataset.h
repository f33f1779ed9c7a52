// Fashion-MNIST read straight from the gzip'd IDX files Debian ships.
#pragma once

#include <torch/torch.h>

#include <string>

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Images are normalised with these (the training set's statistics), so the
// debugger needs them to show an input as the picture it was.
inline constexpr double kFashionMnistMean = 0.286;
inline constexpr double kFashionMnistStd = 0.353;

class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  enum class Split { kTrain, kTest };  // 60000 and 10000 images

  // Loads the whole split into memory. Throws std::runtime_error naming the
  // file when it is missing or not a valid IDX file.
  FashionMnist(const std::string& dir, Split split);

  // data: float [1, 28, 28], normalised; target: int64 class index 0..9.
  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;

 private:
  torch::Tensor images_;  // float [N, 1, 28, 28]
  torch::Tensor labels_;  // int64 [N]
};
