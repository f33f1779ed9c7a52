// Token sequences made in the program from a fixed seed: nothing to download.
#pragma once

#include <torch/torch.h>

#include <cstdint>

// Each sequence has 4..length real tokens (1..vocab-1) and is padded with
// kPadToken to `length`. The tokens fall into `classes` groups by token % classes
// and the label is the group that occurs most often (ties go to the lower
// group). Sequences are drawn leaning towards one group, so every class is
// common; a model has to count, over a variable number of tokens, to learn it.
class SyntheticText : public torch::data::datasets::Dataset<SyntheticText> {
 public:
  // The same seed gives the same sequences.
  SyntheticText(int64_t count, int64_t length, int64_t vocab, int64_t classes, uint64_t seed);

  // data: int64 [length]; target: int64 class index.
  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override;

 private:
  torch::Tensor tokens_;  // int64 [count, length]
  torch::Tensor labels_;  // int64 [count]
};
