#include "stats/map_extremes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "common/cpu_features.h"

#if defined(NANSENSE_AVX2_BUILDS)
#include <immintrin.h>
#endif

namespace nansense::stats {

namespace {

constexpr int kLanes = 8;
constexpr float kInf = std::numeric_limits<float>::infinity();

std::atomic<bool> g_portable{false};

// Whether map_extremes and quantise_levels take their AVX2 loops.
bool avx2_path() {
#if defined(NANSENSE_AVX2_BUILDS)
  return common::cpu_has_avx2() && !g_portable.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Two passes over a map. The first takes its extremes in eight lanes over
// the whole blocks of eight values (lane k sees the values at k, k + 8,
// ...), each lane keeping the first of equal values it saw (+0 after -0,
// say, does not replace it), then joins the lanes keeping the first lane's
// value among equal ones: which of +0 and -0 is reported. The second finds
// the first position holding each extreme, and stops there.
struct Blocks {
  float hi = -kInf, lo = kInf;
  bool nan = false;
};

// Joins the lanes as the first pass takes them: the first lane's value
// among equal ones.
void join_lanes(const float* his, const float* los, Blocks& b) {
  b.hi = his[0];
  b.lo = los[0];
  for (int k = 1; k < kLanes; ++k) {
    b.hi = his[k] > b.hi ? his[k] : b.hi;
    b.lo = los[k] < b.lo ? los[k] : b.lo;
  }
}

Blocks blocks_portable(const float* v, int64_t blocks_end) {
  float his[kLanes], los[kLanes];
  std::fill(his, his + kLanes, -kInf);
  std::fill(los, los + kLanes, kInf);
  bool nan = false;
  for (int64_t j = 0; j < blocks_end; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = v[j + k];
      his[k] = x > his[k] ? x : his[k];
      los[k] = x < los[k] ? x : los[k];
      nan = nan || x != x;
    }
  }
  Blocks b;
  join_lanes(his, los, b);
  b.nan = nan;
  return b;
}

int64_t first_equal_portable(const float* v, int64_t len, float x) {
  int64_t j = 0;
  while (j < len && v[j] != x) ++j;
  return j;
}

#if defined(NANSENSE_AVX2_BUILDS)
// blocks_portable's lanes in one register each: maxps(x, hi) is exactly
// `x > hi ? x : hi` (the running value on a tie or a NaN), minps the same
// for the smallest; a NaN is noted apart.
__attribute__((target("avx2"))) Blocks blocks_avx2(const float* v, int64_t blocks_end) {
  __m256 hi = _mm256_set1_ps(-kInf), lo = _mm256_set1_ps(kInf), nan = _mm256_setzero_ps();
  for (int64_t j = 0; j < blocks_end; j += kLanes) {
    const __m256 x = _mm256_loadu_ps(v + j);
    hi = _mm256_max_ps(x, hi);
    lo = _mm256_min_ps(x, lo);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  alignas(32) float his[kLanes], los[kLanes];
  _mm256_store_ps(his, hi);
  _mm256_store_ps(los, lo);
  Blocks b;
  join_lanes(his, los, b);
  b.nan = _mm256_movemask_ps(nan) != 0;
  return b;
}

// The first position holding a value equal to `x` (not a NaN), `len` when none does.
__attribute__((target("avx2"))) int64_t first_equal_avx2(const float* v, int64_t len, float x) {
  const __m256 want = _mm256_set1_ps(x);
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + j), want, _CMP_EQ_OQ));
    if (hits != 0) return j + __builtin_ctz(static_cast<unsigned>(hits));
  }
  return j + first_equal_portable(v + j, len - j, x);
}

// Which of eight values are finite (all bits set where so).
__attribute__((target("avx2"), always_inline)) inline __m256 finite_lanes(__m256 v) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  return _mm256_cmp_ps(_mm256_and_ps(v, magnitude), _mm256_set1_ps(kInf), _CMP_LT_OQ);
}

// quantise_levels' finite extremes in eight lanes (a non-finite value
// counts as +inf for the smallest, -inf for the largest); the tail apart.
__attribute__((target("avx2"))) void finite_range_avx2(const float* x, int64_t blocks_end, float& lo, float& hi) {
  const __m256 inf = _mm256_set1_ps(kInf), minus_inf = _mm256_set1_ps(-kInf);
  __m256 l = inf, h = minus_inf;
  for (int64_t i = 0; i < blocks_end; i += kLanes) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 finite = finite_lanes(v);
    l = _mm256_min_ps(_mm256_blendv_ps(inf, v, finite), l);
    h = _mm256_max_ps(_mm256_blendv_ps(minus_inf, v, finite), h);
  }
  alignas(32) float ls[kLanes], hs[kLanes];
  _mm256_store_ps(ls, l);
  _mm256_store_ps(hs, h);
  for (int k = 0; k < kLanes; ++k) {
    lo = std::min(lo, ls[k]);
    hi = std::max(hi, hs[k]);
  }
}

// quantise_levels' levels for the whole blocks: the same float
// subtraction, division and rounding (nearbyint's: the current mode, to
// nearest even by default), clamped; 255 where a value is not finite.
__attribute__((target("avx2"))) void levels_avx2(const float* x, int64_t blocks_end, float lo, float step,
                                                 uint8_t* levels) {
  const __m256 offset = _mm256_set1_ps(lo), width = _mm256_set1_ps(step);
  const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(254.0f);
  const __m256i not_finite = _mm256_set1_epi32(255);
  const __m256i bytes = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < blocks_end; i += kLanes) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 finite = finite_lanes(v);
    __m256 level =
        _mm256_round_ps(_mm256_div_ps(_mm256_sub_ps(v, offset), width), _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
    level = _mm256_min_ps(_mm256_max_ps(level, zero), top);
    const __m256i n = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(not_finite), _mm256_castsi256_ps(_mm256_cvttps_epi32(level)), finite));
    // Eight int32 in 0..255 to eight bytes: packed within each 128-bit half,
    // then the halves' first dwords side by side.
    const __m256i words = _mm256_packus_epi32(n, n);
    const __m256i packed = _mm256_packus_epi16(words, words);
    const __m256i joined = _mm256_permutevar8x32_epi32(packed, bytes);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(levels + i), _mm256_castsi256_si128(joined));
  }
}
#endif

}  // namespace

void set_extremes_path(ExtremesPath path) { g_portable.store(path == ExtremesPath::kPortable); }

MapExtreme map_extremes(const float* v, int64_t len) {
  const int64_t blocks_end = len / kLanes * kLanes;
  [[maybe_unused]] const bool avx2 = avx2_path();
#if defined(NANSENSE_AVX2_BUILDS)
  Blocks b = avx2 ? blocks_avx2(v, blocks_end) : blocks_portable(v, blocks_end);
#else
  Blocks b = blocks_portable(v, blocks_end);
#endif
  // Then the tail, value by value.
  for (int64_t j = blocks_end; j < len; ++j) {
    const float x = v[j];
    b.hi = x > b.hi ? x : b.hi;
    b.lo = x < b.lo ? x : b.lo;
    b.nan = b.nan || x != x;
  }
  if (b.nan) {
    const float q = std::numeric_limits<float>::quiet_NaN();
    return {q, q, 0, 0};
  }
#if defined(NANSENSE_AVX2_BUILDS)
  if (avx2) return {b.hi, b.lo, first_equal_avx2(v, len, b.hi), first_equal_avx2(v, len, b.lo)};
#endif
  return {b.hi, b.lo, first_equal_portable(v, len, b.hi), first_equal_portable(v, len, b.lo)};
}

void quantise_levels(const float* x, int64_t n, uint8_t* levels, float* q) {
  const int64_t blocks_end = n / kLanes * kLanes;
  float lo = kInf, hi = -kInf;
  int64_t i = 0;
  [[maybe_unused]] const bool avx2 = avx2_path();
#if defined(NANSENSE_AVX2_BUILDS)
  if (avx2) {
    finite_range_avx2(x, blocks_end, lo, hi);
    i = blocks_end;
  }
#endif
  for (; i < n; ++i) {
    if (std::isfinite(x[i])) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  // In order, the smallest is the first of the values equal to it: which of
  // -0 and +0 when it is zero (the lanes may have seen another first).
  if (lo == 0) lo = x[first_equal_portable(x, n, 0.0f)];
  if (!std::isfinite(lo)) lo = hi = 0;
  float step = (hi - lo) / 254.0f;
  if (!(step > 0)) step = 1;
  i = 0;
#if defined(NANSENSE_AVX2_BUILDS)
  if (avx2) {
    levels_avx2(x, blocks_end, lo, step, levels);
    i = blocks_end;
  }
#endif
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      levels[i] = 255;
      continue;
    }
    const float level = std::nearbyint((x[i] - lo) / step);
    levels[i] = static_cast<uint8_t>(std::clamp(level, 0.0f, 254.0f));
  }
  q[0] = lo;
  q[1] = step;
}

}  // namespace nansense::stats
