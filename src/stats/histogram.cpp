#include "stats/histogram.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

namespace nansense::stats {

namespace {

// The magnitude edges 1e-9 .. 1e6 (106 of them). Powers of ten are parsed,
// not computed, so they are the doubles the literals 1e-9 .. 1e6 give.
const std::vector<double>& magnitude_edges() {
  static const std::vector<double> edges = [] {
    std::vector<double> e(kSideBins + 1);
    for (int k = 0; k <= kSideBins; ++k) {
      const int decade = -9 + k / kBinsPerDecade;
      e[k] = k % kBinsPerDecade == 0 ? std::stod("1e" + std::to_string(decade))
                                     : std::pow(10.0, -9.0 + static_cast<double>(k) / kBinsPerDecade);
    }
    return e;
  }();
  return edges;
}

// Bins are found by magnitude: searchsorted (right) over the magnitude edges
// plus +inf gives m = how many edges lie at or below |x|, so 0 is the zero
// band, 1..106 the magnitude bins (106 = at or beyond 1e6) and 107 = inf.
// A key m + 108 * (x < 0), or 216 for NaN, then reads the bin from a table.
constexpr int64_t kMagnitudes = kSideBins + 3;   // 108
constexpr int64_t kNanKey = 2 * kMagnitudes;     // 216

std::vector<int64_t> key_table(int64_t nan, int64_t pos_inf, int64_t neg_inf) {
  std::vector<int64_t> table(kNanKey + 1);
  for (int64_t m = 0; m < kMagnitudes; ++m) {
    const int64_t k = std::min<int64_t>(m - 1, kSideBins - 1);  // magnitude bin, saturating
    const bool inf = m == kMagnitudes - 1;
    table[m] = m == 0 ? kZeroBin : inf ? pos_inf : kZeroBin + 1 + k;
    table[kMagnitudes + m] = m == 0 ? kZeroBin : inf ? neg_inf : kZeroBin - 1 - k;
  }
  table[kNanKey] = nan;
  return table;
}

// Device copies of the small tables, made once per device (and dtype for the
// edges): a host->device copy per call would be a sync on most accelerators.
// Never destroyed: device tensors must not outlive their runtime at exit.
using TableKey = std::tuple<int, int, int>;  // device type, device index, dtype
struct Tables {
  std::mutex mu;
  std::map<TableKey, torch::Tensor> edges, bins, slots;
};
Tables& tables() {
  static auto* t = new Tables;
  return *t;
}

template <typename Values>
torch::Tensor cached(std::map<TableKey, torch::Tensor>& cache, const torch::Device& device, c10::ScalarType dtype,
                     Values values) {
  TableKey key{static_cast<int>(device.type()), device.index(), static_cast<int>(dtype)};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto table = values();
  using T = typename decltype(table)::value_type;
  auto host = torch::from_blob(table.data(), {static_cast<int64_t>(table.size())},
                               c10::CppTypeToScalarType<T>::value);
  return cache[key] = host.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

torch::Tensor search_edges(const torch::Device& device, c10::ScalarType dtype) {
  auto& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  return cached(t.edges, device, dtype, [] {
    auto values = magnitude_edges();
    values.push_back(std::numeric_limits<double>::infinity());
    return values;
  });
}

torch::Tensor key_to(bool slots, const torch::Device& device) {
  auto& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  return cached(slots ? t.slots : t.bins, device, torch::kLong, [slots] {
    return slots ? key_table(kNanSlot, kPosInfSlot, kNegInfSlot) : key_table(-1, kBins - 1, 0);
  });
}

torch::Tensor assign(const torch::Tensor& x, bool slots) {
  at::DisableRecordFunctionGuard no_record;
  c10::InferenceMode no_autograd;
  // Compared in float32 (float64 stays float64): half-precision values are
  // exact in float32, and the edges are rounded to the dtype compared in.
  auto v = x.scalar_type() == torch::kDouble || x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat);
  // Contiguous, as searchsorted takes best, and at least 1-D.
  v = v.dim() == 0 ? v.reshape({1}) : v.contiguous();
  auto key = torch::searchsorted(search_edges(v.device(), v.scalar_type()), v.abs(), /*out_int32=*/false,
                                 /*right=*/true);
  key.add_(v.lt(0), kMagnitudes);
  key.masked_fill_(torch::isnan(v), kNanKey);
  auto out = key_to(slots, v.device()).take(key);
  return x.dim() == 0 ? out.reshape({}) : out;
}

// Per float32 exponent field E (|x| in [2^(E-127), 2^(E-126))): how many
// magnitude edges lie below the octave, and the (at most four) edges inside
// it, padded with +inf. A value's edge count m is then one table read and
// four compares, the same m searchsorted(right) finds over float32 edges.
struct OctaveTable {
  int32_t below[256];
  float inside[256][4];
};

const OctaveTable& octave_table() {
  static const OctaveTable table = [] {
    OctaveTable t{};
    std::vector<float> edges;
    for (double e : magnitude_edges()) edges.push_back(static_cast<float>(e));
    for (int E = 0; E < 256; ++E) {
      // Exponent field 0 holds zero and the subnormals: [0, 2^-126).
      const double lo = E == 0 ? 0.0 : std::ldexp(1.0, E - 127);
      const double hi = std::ldexp(1.0, E - 126);
      int below = 0, inside = 0;
      for (auto& slot : t.inside[E]) slot = std::numeric_limits<float>::infinity();
      for (float e : edges) {
        if (e < lo) {
          ++below;
        } else if (e < hi) {
          if (inside == 4) throw std::logic_error("histogram: more than four edges in one octave");
          t.inside[E][inside++] = e;
        }
      }
      t.below[E] = below;
    }
    return t;
  }();
  return table;
}

}  // namespace

void count_cpu(const float* values, int64_t outer, int64_t channels, int64_t inner, const int64_t* row_offset,
               int64_t* slots, int64_t slot_count, FoldedValues& into) {
  const auto& table = octave_table();
  std::mutex merge_mu;
  const int64_t rows = outer * channels;
  // Grain: a chunk of about 32k values per task.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, inner));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> local(static_cast<size_t>(slot_count), 0);
    double sum = 0, sum_sq = 0;
    float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
    for (int64_t r = begin; r < end; ++r) {
      int64_t* counts = local.data() + (row_offset ? row_offset[r % channels] : 0);
      const float* v = values + r * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float x = v[i];
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        const uint32_t exponent = (bits >> 23) & 0xffu;
        const bool negative = bits >> 31;
        if (exponent == 0xffu) {
          ++counts[std::isnan(x) ? kNanSlot : negative ? kNegInfSlot : kPosInfSlot];
          continue;
        }
        sum += x;
        sum_sq += static_cast<double>(x) * x;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        const float a = std::fabs(x);
        const float* inside = table.inside[exponent];
        int m = table.below[exponent] + (a >= inside[0]) + (a >= inside[1]) + (a >= inside[2]) + (a >= inside[3]);
        m = std::min(m, kSideBins);  // at or beyond 1e6: the end bin
        ++counts[negative ? kZeroBin - m : kZeroBin + m];
      }
    }
    std::lock_guard lock(merge_mu);
    for (int64_t k = 0; k < slot_count; ++k) slots[k] += local[static_cast<size_t>(k)];
    into.sum += sum;
    into.sum_sq += sum_sq;
    into.min = std::min(into.min, static_cast<double>(lo));
    into.max = std::max(into.max, static_cast<double>(hi));
  });
}

const std::vector<double>& bin_edges() {
  static const std::vector<double> edges = [] {
    const auto& p = magnitude_edges();
    std::vector<double> e;
    e.reserve(kBins + 1);
    for (int k = kSideBins; k >= 0; --k) e.push_back(-p[k]);
    for (int k = 0; k <= kSideBins; ++k) e.push_back(p[k]);
    return e;
  }();
  return edges;
}

double bin_center(int bin) {
  if (bin < 0 || bin >= kBins) return std::numeric_limits<double>::quiet_NaN();
  if (bin == kZeroBin) return 0.0;
  const auto& p = magnitude_edges();
  const int k = bin > kZeroBin ? bin - kZeroBin - 1 : kZeroBin - 1 - bin;
  const double centre = std::sqrt(p[k] * p[k + 1]);
  return bin > kZeroBin ? centre : -centre;
}

torch::Tensor bin_index(const torch::Tensor& x) { return assign(x, /*slots=*/false); }

torch::Tensor slot_index(const torch::Tensor& x) { return assign(x, /*slots=*/true); }

std::vector<int64_t> hist_from_slots(const int64_t* slots) {
  std::vector<int64_t> hist(slots, slots + kBins);
  hist.front() += slots[kNegInfSlot];
  hist.back() += slots[kPosInfSlot];
  return hist;
}

double median_from_hist(const std::vector<int64_t>& hist) {
  int64_t total = 0;
  for (auto c : hist) total += c;
  if (total == 0) return std::numeric_limits<double>::quiet_NaN();
  // The bin of the lower median: the first whose running count reaches half.
  int64_t running = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    running += hist[i];
    if (2 * running >= total) return bin_center(static_cast<int>(i));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace nansense::stats
