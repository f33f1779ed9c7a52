// Device->host copies in bulk: many small device tensors (statistics, a
// parameter's norms) come back in one copy per device and dtype rather than
// one sync each.
#pragma once

#include <torch/types.h>

#include <cstdint>
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

// The sum of |x| over `n` float32 values: 16 float lanes over blocks of 256
// values (vectorized; AVX2 where the CPU has it), each block's total added in
// float64. Adding |x| never lowers a lane, so the sum is at least the
// largest |x|; a lane that overflows reads as infinite.
double abs_sum(const float* v, int64_t n);
// The same sum, computed while the values are copied to `dst` bit for bit:
// one pass over memory instead of two (a capture's copies, which the
// numerical checks sum right after). Equal to abs_sum(src, n).
double copy_and_abs_sum(const float* src, float* dst, int64_t n);

}  // namespace nansense::common
