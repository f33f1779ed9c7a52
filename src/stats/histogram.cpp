#include "stats/histogram.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "common/cpu_features.h"
#include "common/own_ops.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(NANSENSE_AVX2_BUILDS)
#include <immintrin.h>
#endif

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
constexpr int64_t kMagnitudes = kSideBins + 3;  // 108
constexpr int64_t kNanKey = 2 * kMagnitudes;    // 216

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
  auto host = torch::from_blob(table.data(), {static_cast<int64_t>(table.size())}, c10::CppTypeToScalarType<T>::value);
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
  common::OwnOps own_ops;
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

// The slot of one float32 value, as slot_index() gives it.
inline int slot_of(const OctaveTable& table, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  const bool negative = bits >> 31;
  if (exponent == 0xffu) return std::isnan(x) ? kNanSlot : negative ? kNegInfSlot : kPosInfSlot;
  const float a = std::fabs(x);
  const float* inside = table.inside[exponent];
  int m = table.below[exponent] + (a >= inside[0]) + (a >= inside[1]) + (a >= inside[2]) + (a >= inside[3]);
  m = std::min(m, kSideBins);  // at or beyond 1e6: the end bin
  return negative ? kZeroBin - m : kZeroBin + m;
}

// The slot of a float32 value from its top 16 bits (sign, exponent and 7
// mantissa bits: a range of magnitudes 1/128 of an octave wide), with at
// most one edge inside a range to compare against: bins are a factor
// 10^(1/7) = 1.39 wide, so no range holds two edges. One table read for most
// values, instead of four compares.
struct PrefixTable {
  // Low byte: the slot of the range's smallest magnitude. High byte: 0, or
  // the index (1..) of the edge inside the range, or kSpecial for NaN and
  // infinity, which slot_of() sorts out.
  uint16_t entry[1 << 16];
  float edge[256];
  static constexpr uint16_t kSpecial = 255;
};

const PrefixTable& prefix_table() {
  static const auto* table = [] {
    auto* t = new PrefixTable{};
    const auto& octaves = octave_table();
    std::vector<float> edges;
    for (double e : magnitude_edges()) edges.push_back(static_cast<float>(e));
    t->edge[0] = std::numeric_limits<float>::infinity();
    for (size_t k = 0; k < edges.size(); ++k) t->edge[k + 1] = edges[k];
    for (uint32_t p = 0; p < (1u << 16); ++p) {
      float lo, hi;
      const uint32_t lo_bits = p << 16, hi_bits = (p << 16) | 0xffffu;
      std::memcpy(&lo, &lo_bits, sizeof lo);
      std::memcpy(&hi, &hi_bits, sizeof hi);
      if (((p >> 7) & 0xffu) == 0xffu) {
        t->entry[p] = PrefixTable::kSpecial << 8;
        continue;
      }
      const int s_lo = slot_of(octaves, lo), s_hi = slot_of(octaves, hi);
      uint16_t entry = static_cast<uint16_t>(s_lo);
      if (s_hi != s_lo) {
        // The one edge e with |lo| < e <= |hi|: at and above it, the next slot.
        const float a_lo = std::fabs(lo), a_hi = std::fabs(hi);
        size_t k = 0;
        while (k < edges.size() && !(edges[k] > a_lo && edges[k] <= a_hi)) ++k;
        if (k == edges.size() || std::abs(s_hi - s_lo) != 1) throw std::logic_error("histogram: prefix table");
        entry = static_cast<uint16_t>(entry | ((k + 1) << 8));
      }
      t->entry[p] = entry;
    }
    return t;
  }();
  return *table;
}

// slot_of() through the prefix table.
inline int slot_of(const PrefixTable& table, const OctaveTable& octaves, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint16_t entry = table.entry[bits >> 16];
  const int slot = entry & 0xff;
  const unsigned edge = entry >> 8;
  if (edge == 0) return slot;
  if (edge == PrefixTable::kSpecial) return slot_of(octaves, x);
  const int over = std::fabs(x) >= table.edge[edge];
  return bits >> 31 ? slot - over : slot + over;
}

constexpr int64_t kChunk = 512;  // values per finite-path attempt
constexpr float kFloatInf = std::numeric_limits<float>::infinity();

// The values from i on, one by one, then the chunk's figures into `f`, or
// false when a sum is not finite (the vector paths' common ending).
bool finish_chunk(const float* v, int64_t i, int64_t n, double sum, double sum_sq, float mn, float mx, ExactFold& f) {
  for (; i < n; ++i) {
    const float x = v[i];
    const double d = x;
    sum += d;
    sum_sq += d * d;
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
  if (!std::isfinite(sum) || !std::isfinite(sum_sq)) return false;
  f.n += n;
  f.sum += sum;
  f.sum_sq += sum_sq;
  f.min = std::min(f.min, static_cast<double>(mn));
  f.max = std::max(f.max, static_cast<double>(mx));
  return true;
}

// One chunk of values on the assumption that all are finite: their count,
// float64 sums (each value widened before it is summed or squared, so the
// sums are as exact as a float64 loop's) and extremes, into `f`; false,
// folding nothing, when a NaN or infinity makes a sum non-finite. SSE2 where
// the CPU has it (every x86-64), a plain loop elsewhere.
bool fold_chunk_finite_portable(const float* v, int64_t n, ExactFold& f) {
  double sum = 0, sum_sq = 0;
  float mn = kFloatInf, mx = -kFloatInf;
  int64_t i = 0;
#if defined(__SSE2__)
  __m128d s[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()};
  __m128d q[4] = {_mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd(), _mm_setzero_pd()};
  __m128 lo[2] = {_mm_set1_ps(kFloatInf), _mm_set1_ps(kFloatInf)};
  __m128 hi[2] = {_mm_set1_ps(-kFloatInf), _mm_set1_ps(-kFloatInf)};
  for (; i + 8 <= n; i += 8) {
    for (int h = 0; h < 2; ++h) {
      const __m128 x = _mm_loadu_ps(v + i + 4 * h);
      const __m128d a = _mm_cvtps_pd(x);
      const __m128d b = _mm_cvtps_pd(_mm_movehl_ps(x, x));
      s[2 * h] = _mm_add_pd(s[2 * h], a);
      s[2 * h + 1] = _mm_add_pd(s[2 * h + 1], b);
      q[2 * h] = _mm_add_pd(q[2 * h], _mm_mul_pd(a, a));
      q[2 * h + 1] = _mm_add_pd(q[2 * h + 1], _mm_mul_pd(b, b));
      // minps/maxps return the second operand for a NaN: the running value.
      lo[h] = _mm_min_ps(x, lo[h]);
      hi[h] = _mm_max_ps(x, hi[h]);
    }
  }
  alignas(16) double sd[2], qd[2];
  for (int k = 0; k < 4; ++k) {
    _mm_store_pd(sd, s[k]);
    _mm_store_pd(qd, q[k]);
    sum += sd[0] + sd[1];
    sum_sq += qd[0] + qd[1];
  }
  alignas(16) float lf[4], hf[4];
  for (int h = 0; h < 2; ++h) {
    _mm_store_ps(lf, lo[h]);
    _mm_store_ps(hf, hi[h]);
    for (int k = 0; k < 4; ++k) {
      mn = std::min(mn, lf[k]);
      mx = std::max(mx, hf[k]);
    }
  }
#endif
  return finish_chunk(v, i, n, sum, sum_sq, mn, mx, f);
}

#if defined(NANSENSE_AVX2_BUILDS)
// Rows `stride` apart start where the hardware prefetcher has not been: the
// vector paths ask, at position i of row `v`, for the line 256 values on,
// running into the next row (`next`, null after the last).
inline const float* prefetch_line(const float* v, const float* next, int64_t i, int64_t len) {
  constexpr int64_t kAhead = 256;
  const int64_t ahead = i + kAhead;
  return ahead < len ? v + ahead : next && ahead - len < len ? next + (ahead - len) : nullptr;
}

// Rows of `len` values, `stride` apart, through one set of AVX2 sums (16
// values a step, four float64 lanes per register; each row's last values
// under 16 one by one in float64), reduced once for them all, into `f`, on
// CPUs that have AVX2 and FMA. The sums add the same widened values as the
// portable path, only in another order; the squares by fused multiply-adds
// (one rounding fewer per value, as the AVX-512 path), which leaves the
// floating-point ports free for the additions.
// `after_row` sees each row once it is folded, still in the cache. A row of
// a few hundred values costs no reduction of its own (a chunk at a time, a
// row costs one every 512 values and one at its end). False, folding
// nothing, when a NaN or infinity makes a sum non-finite.
__attribute__((target("avx2,fma"))) bool fold_rows_avx2(const float* first, int64_t rows, int64_t stride, int64_t len,
                                                        ExactFold& f,
                                                        const std::function<void(const float*, int64_t)>* after_row) {
  __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  __m256d q[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  __m256 lo[2] = {_mm256_set1_ps(kFloatInf), _mm256_set1_ps(kFloatInf)};
  __m256 hi[2] = {_mm256_set1_ps(-kFloatInf), _mm256_set1_ps(-kFloatInf)};
  double tail_sum = 0, tail_sq = 0;
  float mn = kFloatInf, mx = -kFloatInf;
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = first + r * stride;
    const float* next = r + 1 < rows ? v + stride : nullptr;
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
      if (const float* line = prefetch_line(v, next, i, len)) {
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 x = _mm256_loadu_ps(v + i + 8 * h);
        const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        s[2 * h] = _mm256_add_pd(s[2 * h], a);
        s[2 * h + 1] = _mm256_add_pd(s[2 * h + 1], b);
        q[2 * h] = _mm256_fmadd_pd(a, a, q[2 * h]);
        q[2 * h + 1] = _mm256_fmadd_pd(b, b, q[2 * h + 1]);
        // As minps/maxps: a NaN yields the running value (the sums catch it).
        lo[h] = _mm256_min_ps(x, lo[h]);
        hi[h] = _mm256_max_ps(x, hi[h]);
      }
    }
    for (; i < len; ++i) {
      const float x = v[i];
      const double d = x;
      tail_sum += d;
      tail_sq += d * d;
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
    }
    if (after_row) (*after_row)(v, len);
  }
  alignas(32) double sd[4], qd[4];
  double sum = tail_sum, sum_sq = tail_sq;
  for (int k = 0; k < 4; ++k) {
    _mm256_store_pd(sd, s[k]);
    _mm256_store_pd(qd, q[k]);
    sum += (sd[0] + sd[1]) + (sd[2] + sd[3]);
    sum_sq += (qd[0] + qd[1]) + (qd[2] + qd[3]);
  }
  if (!std::isfinite(sum) || !std::isfinite(sum_sq)) return false;
  alignas(32) float lf[8], hf[8];
  for (int h = 0; h < 2; ++h) {
    _mm256_store_ps(lf, lo[h]);
    _mm256_store_ps(hf, hi[h]);
    for (int k = 0; k < 8; ++k) {
      mn = std::min(mn, lf[k]);
      mx = std::max(mx, hf[k]);
    }
  }
  f.n += rows * len;
  f.sum += sum;
  f.sum_sq += sum_sq;
  if (rows * len > 0) {
    f.min = std::min(f.min, static_cast<double>(mn));
    f.max = std::max(f.max, static_cast<double>(mx));
  }
  return true;
}

// GCC 12's AVX-512 headers start some intrinsics from an "undefined"
// register, which its flow analysis reports as uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Up to 16 values (the lanes in `m`) into two float64 sums, two sums of
// squares and the extremes: lanes outside `m` load as zeros, which add
// nothing, and leave the extremes alone.
__attribute__((target("avx512f,avx512dq,fma"), always_inline)) inline void avx512_step(const float* at, __mmask16 m,
                                                                                       __m512d& s0, __m512d& s1,
                                                                                       __m512d& q0, __m512d& q1,
                                                                                       __m512& lo, __m512& hi) {
  const __m512 x = _mm512_maskz_loadu_ps(m, at);
  const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
  s0 = _mm512_add_pd(s0, a);
  s1 = _mm512_add_pd(s1, b);
  q0 = _mm512_fmadd_pd(a, a, q0);
  q1 = _mm512_fmadd_pd(b, b, q1);
  // As minps/maxps: a NaN yields the running value (the sums catch it).
  lo = _mm512_mask_min_ps(lo, m, x, lo);
  hi = _mm512_mask_max_ps(hi, m, x, hi);
}

// Rows of `len` values, `stride` apart, through one set of vector sums
// (32 values a step, eight float64 lanes per register, squares by fused
// multiply-adds: one rounding fewer per value than the paths above; one
// horizontal reduction for them all, tails by masked loads) into `f`;
// `after_row` sees each row once it is folded, still in the cache. False,
// folding nothing, when a NaN or infinity makes a sum non-finite.
__attribute__((target("avx512f,avx512dq,fma"))) bool fold_rows_avx512(
    const float* first, int64_t rows, int64_t stride, int64_t len, ExactFold& f,
    const std::function<void(const float*, int64_t)>* after_row) {
  constexpr __mmask16 kAll = 0xffff;
  __m512d s[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  __m512d q[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  __m512 lo[2] = {_mm512_set1_ps(kFloatInf), _mm512_set1_ps(kFloatInf)};
  __m512 hi[2] = {_mm512_set1_ps(-kFloatInf), _mm512_set1_ps(-kFloatInf)};
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = first + r * stride;
    const float* next = r + 1 < rows ? v + stride : nullptr;
    int64_t i = 0;
    for (; i + 32 <= len; i += 32) {
      if (const float* line = prefetch_line(v, next, i, len)) {
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(line + 16), _MM_HINT_T0);
      }
      avx512_step(v + i, kAll, s[0], s[1], q[0], q[1], lo[0], hi[0]);
      avx512_step(v + i + 16, kAll, s[2], s[3], q[2], q[3], lo[1], hi[1]);
    }
    for (; i < len; i += 16) {
      const __mmask16 m = len - i >= 16 ? kAll : static_cast<__mmask16>((1u << (len - i)) - 1);
      avx512_step(v + i, m, s[0], s[1], q[0], q[1], lo[0], hi[0]);
    }
    if (after_row) (*after_row)(v, len);
  }
  const __m512d sums = _mm512_add_pd(_mm512_add_pd(s[0], s[1]), _mm512_add_pd(s[2], s[3]));
  const __m512d squares = _mm512_add_pd(_mm512_add_pd(q[0], q[1]), _mm512_add_pd(q[2], q[3]));
  const double sum = _mm512_reduce_add_pd(sums);
  const double sum_sq = _mm512_reduce_add_pd(squares);
  if (!std::isfinite(sum) || !std::isfinite(sum_sq)) return false;
  f.n += rows * len;
  f.sum += sum;
  f.sum_sq += sum_sq;
  if (rows * len > 0) {
    f.min = std::min(f.min, static_cast<double>(_mm512_reduce_min_ps(_mm512_min_ps(lo[0], lo[1]))));
    f.max = std::max(f.max, static_cast<double>(_mm512_reduce_max_ps(_mm512_max_ps(hi[0], hi[1]))));
  }
  return true;
}
#pragma GCC diagnostic pop
#endif

std::atomic<bool> g_portable_fold{false};

// Rows through one set of vector sums (fold_rows_avx512, fold_rows_avx2).
using RowsPath = bool (*)(const float* first, int64_t rows, int64_t stride, int64_t len, ExactFold& f,
                          const std::function<void(const float*, int64_t)>* after_row);

// The widest rows path the CPU runs: AVX-512, else AVX2 (both with fused
// squares); null where it has neither or tests asked for the portable path.
RowsPath widest_rows_path() {
#if defined(NANSENSE_AVX2_BUILDS)
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
  if (g_portable_fold.load(std::memory_order_relaxed)) return nullptr;
  if (avx512) return &fold_rows_avx512;
  static const bool fma = __builtin_cpu_supports("fma");
  if (common::cpu_has_avx2() && fma) return &fold_rows_avx2;
#endif
  return nullptr;
}

// One chunk: a row of its own on the widest path, else the portable loop.
bool fold_chunk_finite(const float* v, int64_t n, ExactFold& f) {
  if (const RowsPath rows = widest_rows_path()) return rows(v, 1, 0, n, f, nullptr);
  return fold_chunk_finite_portable(v, n, f);
}

void fold_chunk_exact(const float* v, int64_t n, ExactFold& f) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (std::isnan(x)) {
      ++f.nan;
    } else if (std::isinf(x)) {
      ++(x > 0 ? f.pos_inf : f.neg_inf);
    } else {
      const double d = x;
      ++f.n;
      f.sum += d;
      f.sum_sq += d * d;
      f.min = std::min(f.min, d);
      f.max = std::max(f.max, d);
    }
  }
}

void merge(ExactFold& into, const ExactFold& f) {
  into.n += f.n;
  into.nan += f.nan;
  into.pos_inf += f.pos_inf;
  into.neg_inf += f.neg_inf;
  into.sum += f.sum;
  into.sum_sq += f.sum_sq;
  into.min = std::min(into.min, f.min);
  into.max = std::max(into.max, f.max);
}

// Folds n values chunk by chunk into `into`; returns the finite extremes and
// whether a non-finite value was among them, for a channel's range.
void fold_values(const float* v, int64_t n, ExactFold& into, ChannelRange* range) {
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    ExactFold chunk;
    if (!fold_chunk_finite(v + begin, count, chunk)) fold_chunk_exact(v + begin, count, chunk);
    if (range) {
      range->seen += count;
      range->min = std::min(range->min, chunk.min);
      range->max = std::max(range->max, chunk.max);
      range->nonfinite = range->nonfinite || chunk.nan + chunk.pos_inf + chunk.neg_inf > 0;
    }
    merge(into, chunk);
  }
}

// A channel's range from values spread over rows too short to fold one by
// one (a Linear's [batch, features]: one value per row).
void range_of(const float* v, int64_t n, ChannelRange& r) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    if (!std::isfinite(x)) {
      r.nonfinite = true;
    } else {
      r.min = std::min(r.min, static_cast<double>(x));
      r.max = std::max(r.max, static_cast<double>(x));
    }
  }
  r.seen += n;
}

// Rows of `len` values, `stride` apart, into `into` (and `range`, the
// channel they belong to); `after_row` sees each row once folded.
void fold_rows(const float* first, int64_t rows, int64_t stride, int64_t len, ExactFold& into, ChannelRange* range,
               const std::function<void(const float*, int64_t)>* after_row) {
  // The widest vector path takes all the rows through one set of sums.
  if (const RowsPath rows_path = widest_rows_path()) {
    ExactFold part;
    if (rows_path(first, rows, stride, len, part, after_row)) {
      if (range) {
        range->seen += part.n;
        range->min = std::min(range->min, part.min);
        range->max = std::max(range->max, part.max);
      }
      merge(into, part);
      return;
    }
    // A NaN or infinity among them: again chunk by chunk (binned already).
    for (int64_t r = 0; r < rows; ++r) fold_values(first + r * stride, len, into, range);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    fold_values(first + r * stride, len, into, range);
    if (after_row) (*after_row)(first + r * stride, len);
  }
}

// Bins values [p, stop) of a [outer, channels, inner] tensor into `counts`,
// each row (a channel of one sample) at its channel's offset.
void bin_span(const float* values, int64_t p, int64_t stop, int64_t channels, int64_t inner, const int64_t* row_offset,
              int64_t* counts, const PrefixTable& table, const OctaveTable& octaves) {
  while (p < stop) {
    const int64_t row = p / inner;
    const int64_t row_end = std::min(stop, (row + 1) * inner);
    int64_t* c = counts + (row_offset ? row_offset[row % channels] : 0);
    for (; p < row_end; ++p) ++c[slot_of(table, octaves, values[p])];
  }
}

// What fold_exact_cpu bins as it goes: for the values [a, a + len) just
// folded, every value (stride <= run) or the sampled runs that start there
// (each run starts in exactly one folded span, so none is binned twice).
void bin_folded(const float* values, int64_t numel, int64_t channels, int64_t inner, const SampledBins& bins, int64_t a,
                int64_t len, int64_t* counts) {
  const auto& table = prefix_table();
  const auto& octaves = octave_table();
  const int64_t run = std::max<int64_t>(1, bins.run);
  if (bins.stride <= run) {
    bin_span(values, a, a + len, channels, inner, bins.row_offset, counts, table, octaves);
    return;
  }
  const int64_t b = a + len;
  const int64_t slack = bins.stride - run;  // how far into its window a run may start
  for (int64_t j = std::max<int64_t>(0, (a - slack) / bins.stride); j * bins.stride < b; ++j) {
    const int64_t p = run_start(j, bins.stride, run, bins.seed);
    if (p < a || p >= b) continue;
    bin_span(values, p, std::min(numel, p + run), channels, inner, bins.row_offset, counts, table, octaves);
  }
}

}  // namespace

void set_fold_path(FoldPath path) { g_portable_fold.store(path == FoldPath::kPortable); }

void ChannelRange::widen(const ChannelRange& r) {
  seen += r.seen;
  min = std::min(min, r.min);
  max = std::max(max, r.max);
  nonfinite = nonfinite || r.nonfinite;
}

bool ChannelRange::zero_band() const {
  if (seen == 0 || nonfinite) return false;
  const auto& table = octave_table();
  return slot_of(table, static_cast<float>(min)) == kZeroBin && slot_of(table, static_cast<float>(max)) == kZeroBin;
}

void fold_exact_cpu(const float* values, int64_t outer, int64_t channels, int64_t inner, int64_t tracked,
                    ChannelRange* ranges, ExactFold& into, const SampledBins* bins, MapExtremesTable* maps) {
  std::mutex merge_mu;
  tracked = ranges ? std::min(tracked, channels) : 0;
  const int64_t numel = outer * channels * inner;
  if (maps) maps->samples = 0;
  if (numel <= 0) return;
  const bool by_channel = tracked > 0 && inner >= 64;
  // The maps' extremes ride on the channel-by-channel pass: each row of a
  // tracked channel comes by once, whole.
  const bool with_maps = maps && by_channel && maps->channels > 0 && maps->channels <= tracked;
  if (with_maps) {
    maps->len = inner;
    maps->maps.assign(static_cast<size_t>(outer * maps->channels), MapExtreme{});
    maps->samples = outer;
  }
  // Each task folds its share with counts of its own, merged at its end.
  const auto task = [&](auto&& body) {
    return [&, body](int64_t begin, int64_t end) {
      ExactFold local;
      std::vector<ChannelRange> local_ranges(static_cast<size_t>(tracked));
      std::vector<int64_t> counts(bins ? static_cast<size_t>(bins->slot_count) : 0, 0);
      std::function<void(const float*, int64_t)> after;
      if (bins || with_maps) {
        after = [&](const float* row, int64_t len) {
          const int64_t at = row - values;
          if (bins) bin_folded(values, numel, channels, inner, *bins, at, len, counts.data());
          if (!with_maps || len != inner) return;
          const int64_t c = at / inner % channels;
          if (c < maps->channels) {
            maps->maps[static_cast<size_t>(at / (channels * inner) * maps->channels + c)] = map_extremes(row, inner);
          }
        };
      }
      body(begin, end, local, local_ranges, after ? &after : nullptr);
      std::lock_guard lock(merge_mu);
      merge(into, local);
      for (int64_t c = 0; c < tracked; ++c) ranges[c].widen(local_ranges[static_cast<size_t>(c)]);
      for (size_t k = 0; k < counts.size(); ++k) bins->slots[k] += counts[k];
    };
  };
  if (by_channel) {
    // Channel by channel: a tracked channel's rows (one per sample) through
    // one set of vector sums for its range, then the untracked channels'
    // values, contiguous within each sample, as one more unit.
    const int64_t units = tracked + (channels > tracked ? 1 : 0);
    at::parallel_for(0, units, /*grain_size=*/1,
                     task([&](int64_t begin, int64_t end, ExactFold& local, std::vector<ChannelRange>& local_ranges,
                              const std::function<void(const float*, int64_t)>* after) {
                       for (int64_t u = begin; u < end; ++u) {
                         const bool rest = u == tracked;
                         fold_rows(values + (rest ? tracked : u) * inner, outer, channels * inner,
                                   rest ? (channels - tracked) * inner : inner, local,
                                   rest ? nullptr : &local_ranges[static_cast<size_t>(u)], after);
                       }
                     }));
    return;
  }
  // The whole tensor as one row, in pieces of 32k values to share among the
  // threads; then, for rows too short to fold one by one (a Linear's
  // [batch, features]: one value per row), each tracked channel's range.
  constexpr int64_t kPiece = 32768;
  const int64_t pieces = (numel + kPiece - 1) / kPiece;
  at::parallel_for(0, pieces, /*grain_size=*/1,
                   task([&](int64_t begin, int64_t end, ExactFold& local, std::vector<ChannelRange>&,
                            const std::function<void(const float*, int64_t)>* after) {
                     for (int64_t k = begin; k < end; ++k) {
                       fold_rows(values + k * kPiece, 1, 0, std::min(kPiece, numel - k * kPiece), local, nullptr,
                                 after);
                     }
                   }));
  for (int64_t c = 0; c < tracked; ++c) {
    for (int64_t o = 0; o < outer; ++o) range_of(values + (o * channels + c) * inner, inner, ranges[c]);
  }
}

int64_t run_start(int64_t j, int64_t stride, int64_t run, uint64_t seed) {
  if (stride <= run) return j * stride;
  // splitmix64 of (seed, j): a position inside the j-th window.
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(j) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  // Scaled into [0, stride - run] by a multiply, not a division.
  const auto span = static_cast<unsigned __int128>(stride - run + 1);
  return j * stride + static_cast<int64_t>((static_cast<unsigned __int128>(z) * span) >> 64);
}

void bin_cpu(const float* values, int64_t outer, int64_t channels, int64_t inner, const int64_t* row_offset,
             int64_t stride, int64_t run, uint64_t seed, int64_t* slots, int64_t slot_count) {
  const auto& octaves = octave_table();
  const auto& table = prefix_table();
  const int64_t numel = outer * channels * inner;
  if (numel <= 0 || inner <= 0) return;
  run = std::max<int64_t>(1, run);
  if (stride <= run) {
    // Every value: runs of 32k to share among the threads.
    stride = run = 32768;
  }
  const int64_t windows = (numel + stride - 1) / stride;
  std::mutex merge_mu;
  at::parallel_for(0, windows, /*grain_size=*/std::max<int64_t>(1, 32768 / run), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> local(static_cast<size_t>(slot_count), 0);
    for (int64_t j = begin; j < end; ++j) {
      const int64_t p = run_start(j, stride, run, seed);
      bin_span(values, p, std::min(numel, p + run), channels, inner, row_offset, local.data(), table, octaves);
    }
    std::lock_guard lock(merge_mu);
    for (int64_t k = 0; k < slot_count; ++k) slots[k] += local[static_cast<size_t>(k)];
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

std::optional<double> median_from_hist(const std::vector<int64_t>& hist) {
  int64_t total = 0;
  for (auto c : hist) total += c;
  if (total == 0) return std::nullopt;
  // The bin of the lower median: the first whose running count reaches half.
  int64_t running = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    running += hist[i];
    if (2 * running >= total) return bin_center(static_cast<int>(i));
  }
  return std::nullopt;
}

}  // namespace nansense::stats
