// Device->host copies in bulk: many small device tensors (statistics, a
// parameter's norms) come back in one copy per device and dtype rather than
// one sync each.
#pragma once

#include <torch/types.h>

#include <vector>

namespace nansense::common {

// CPU copies of `tensors`, same order and shapes (undefined stays undefined).
// Each (device, dtype) group is flattened, concatenated on its device and
// copied once. Always fresh memory, even for CPU inputs: the copies never
// change when the originals do.
std::vector<torch::Tensor> copy_to_host(const std::vector<torch::Tensor>& tensors);

// The dtype that running sums keep on `device`: float64 where the device has
// it (MPS has none), so sums over billions of values stay exact enough.
c10::ScalarType accumulator_dtype(const c10::Device& device);

}  // namespace nansense::common
