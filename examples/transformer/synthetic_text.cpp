#include "synthetic_text.h"

#include <algorithm>
#include <random>
#include <vector>

#include "model.h"

namespace {
// How often a token comes from the sequence's leaning group rather than from
// the whole vocabulary.
constexpr double kLean = 0.3;
constexpr int64_t kMinLength = 4;
}  // namespace

SyntheticText::SyntheticText(int64_t count, int64_t length, int64_t vocab, int64_t classes, uint64_t seed) {
  TORCH_CHECK(length >= kMinLength && vocab > classes && classes > 1, "bad synthetic text shape");
  // Its own generator: the data never depends on (or moves) torch's RNG.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> any_token(1, vocab - 1), any_length(kMinLength, length),
      any_class(0, classes - 1);
  std::bernoulli_distribution lean(kLean);

  tokens_ = torch::full({count, length}, kPadToken, torch::kInt64);
  labels_ = torch::empty({count}, torch::kInt64);
  auto tokens = tokens_.accessor<int64_t, 2>();
  auto labels = labels_.accessor<int64_t, 1>();
  std::vector<int64_t> counts(static_cast<size_t>(classes));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = any_length(rng), leaning = any_class(rng);
    std::fill(counts.begin(), counts.end(), 0);
    for (int64_t t = 0; t < n; ++t) {
      int64_t token = any_token(rng);
      if (lean(rng)) {
        // A token of the leaning group: one of leaning, leaning + classes, ...
        // skipping the padding token.
        do {
          token = leaning + classes * std::uniform_int_distribution<int64_t>(0, (vocab - 1) / classes)(rng);
        } while (token == kPadToken || token >= vocab);
      }
      tokens[i][t] = token;
      ++counts[static_cast<size_t>(token % classes)];
    }
    labels[i] = std::max_element(counts.begin(), counts.end()) - counts.begin();
  }
}

torch::data::Example<> SyntheticText::get(size_t index) {
  return {tokens_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
}

torch::optional<size_t> SyntheticText::size() const { return static_cast<size_t>(tokens_.size(0)); }
