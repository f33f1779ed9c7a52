// What nansense reports about one tensor. Every reply that describes a tensor
// (snapshot summaries, layer and weight statistics, the ops of a NaN's root
// cause) carries these facts under the same names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nansense {

struct TensorStats {
  std::vector<int64_t> shape;
  std::string dtype;  // numpy spelling: "float32", "bfloat16", "int64"
  int64_t numel = 0;
  // Element counts; n + nan + pos_inf + neg_inf == numel (n: the finite ones).
  int64_t n = 0;  // finite values
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
  // Over the finite values only; nullopt when there are none.
  std::optional<double> min;
  std::optional<double> max;
  std::optional<double> mean;
  // Computed only where asked for (layer and weight statistics), as they cost
  // a sort and a copy: the population std and median of the finite values
  // (nullopt when there are none), the fraction of all elements that are
  // exactly zero, and the L2 norm of the finite values.
  std::optional<double> std;
  std::optional<double> median;
  std::optional<double> zero_fraction;
  std::optional<double> norm;
};

}  // namespace nansense
