// The one routine that summarises a tensor (see nansense/tensor_stats.h) and
// the one JSON shape of its result. Safe on any thread, on any device (it
// reads back a handful of scalars), and inside an op observer: it records no
// ops of its own.
#pragma once

#include <torch/types.h>

#include "common/json_values.h"
#include "nansense/tensor_stats.h"

namespace nansense::common {

// What to compute beyond counts, min, max and mean.
struct StatsDetail {
  bool spread = false;  // std, median, zero_fraction (copies the finite values)
  bool norm = false;    // L2 norm of the finite values
};

// An all-finite floating tensor costs two reductions in its own dtype; only a
// tensor holding non-finite values (or a detailed request) is copied to double.
TensorStats tensor_stats(const torch::Tensor& t, StatsDetail detail = {});

// shape, dtype, numel, n (finite values), nan, pos_inf, neg_inf, min, max, mean (null
// without finite values); std, median and zero_fraction when the spread was
// computed; norm when it was.
json to_json(const TensorStats& stats);

}  // namespace nansense::common
