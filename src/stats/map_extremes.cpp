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

// Eight lanes over the whole blocks of eight values (lane k sees the values
// at k, k + 8, ...): each lane's largest and smallest value, the first one
// of them it saw (a later equal value, +0 after -0 say, does not replace
// it), where that was, and whether a NaN went by.
struct Lanes {
  float hi[kLanes], lo[kLanes];
  int64_t hi_at[kLanes], lo_at[kLanes];
  bool nan = false;
};

void lanes_portable(const float* v, int64_t blocks_end, Lanes& l) {
  for (int k = 0; k < kLanes; ++k) {
    l.hi[k] = -kInf;
    l.lo[k] = kInf;
    l.hi_at[k] = l.lo_at[k] = k;
  }
  bool nan = false;
  for (int64_t j = 0; j < blocks_end; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = v[j + k];
      if (x > l.hi[k]) l.hi[k] = x, l.hi_at[k] = j + k;
      if (x < l.lo[k]) l.lo[k] = x, l.lo_at[k] = j + k;
      nan = nan || x != x;
    }
  }
  l.nan = nan;
}

// The whole blocks' extremes across the eight lanes: the first lane's value
// among equal ones (which of +0 and -0 is reported), the earliest position
// holding it (`len` when there are no blocks). True when a NaN went by.
bool blocks_portable(const float* v, int64_t blocks_end, int64_t len, MapExtreme& e) {
  Lanes l;
  lanes_portable(v, blocks_end, l);
  e.max = l.hi[0];
  e.min = l.lo[0];
  for (int k = 1; k < kLanes; ++k) {
    e.max = l.hi[k] > e.max ? l.hi[k] : e.max;
    e.min = l.lo[k] < e.min ? l.lo[k] : e.min;
  }
  e.max_at = e.min_at = len;
  for (int k = 0; k < kLanes; ++k) {
    if (l.hi[k] == e.max) e.max_at = std::min(e.max_at, l.hi_at[k]);
    if (l.lo[k] == e.min) e.min_at = std::min(e.min_at, l.lo_at[k]);
  }
  return l.nan;
}

#if defined(NANSENSE_AVX2_BUILDS)
// One block of eight values into one chain of lanes (blocks_avx2).
struct Chain {
  __m256 hi, lo;
  __m256i at, hi_at, lo_at;
};

__attribute__((target("avx2"), always_inline)) inline void chain_step(Chain& c, const float* p, __m256& nan) {
  const __m256 x = _mm256_loadu_ps(p);
  const __m256 gt = _mm256_cmp_ps(x, c.hi, _CMP_GT_OQ);
  const __m256 lt = _mm256_cmp_ps(x, c.lo, _CMP_LT_OQ);
  c.hi = _mm256_blendv_ps(c.hi, x, gt);
  c.lo = _mm256_blendv_ps(c.lo, x, lt);
  c.hi_at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.hi_at), _mm256_castsi256_ps(c.at), gt));
  c.lo_at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(c.lo_at), _mm256_castsi256_ps(c.at), lt));
  nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  c.at = _mm256_add_epi32(c.at, _mm256_set1_epi32(2 * kLanes));
}

__attribute__((target("avx2"))) inline __m256i select_at(__m256i a, __m256i b, __m256 take_b) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), take_b));
}

// One extreme across the eight lanes, as blocks_portable takes it: `best`
// holds the extreme in every lane (its sign of zero aside); the value is
// the first lane's among those equal to it, the position the earliest of
// theirs (`len` at most).
__attribute__((target("avx2"))) inline void across_lanes(__m256 value, __m256i at, __m256 best, int64_t len, float& out,
                                                         int64_t& out_at) {
  const __m256 equal = _mm256_cmp_ps(value, best, _CMP_EQ_OQ);
  const int first = __builtin_ctz(static_cast<unsigned>(_mm256_movemask_ps(equal)));
  out = _mm256_cvtss_f32(_mm256_permutevar8x32_ps(value, _mm256_set1_epi32(first)));
  __m256i m = select_at(_mm256_set1_epi32(std::numeric_limits<int32_t>::max()), at, equal);
  m = _mm256_min_epi32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_min_epi32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm256_min_epi32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  out_at = std::min<int64_t>(len, _mm256_cvtsi256_si32(m));
}

// blocks_portable's figures with AVX2: each lane's value and position
// carried in two chains (even and odd blocks) so the compare-and-blend
// latencies overlap, the chains joined as one lane would have seen them
// (the larger (the smaller) value, on a tie the earlier position), then the
// lanes joined, all in vector registers. Positions are int32 lanes (callers
// keep len below 2^31).
__attribute__((target("avx2"))) bool blocks_avx2(const float* v, int64_t blocks_end, int64_t len, MapExtreme& e) {
  Chain chains[2];
  for (int c = 0; c < 2; ++c) {
    chains[c].hi = _mm256_set1_ps(-kInf);
    chains[c].lo = _mm256_set1_ps(kInf);
    chains[c].at = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (c == 1) chains[c].at = _mm256_add_epi32(chains[c].at, _mm256_set1_epi32(kLanes));
    chains[c].hi_at = chains[c].lo_at = chains[c].at;
  }
  __m256 nan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 2 * kLanes <= blocks_end; j += 2 * kLanes) {
    chain_step(chains[0], v + j, nan);
    chain_step(chains[1], v + j + kLanes, nan);
  }
  if (j < blocks_end) chain_step(chains[0], v + j, nan);
  const Chain& even = chains[0];
  const Chain& odd = chains[1];
  const __m256 odd_hi = _mm256_or_ps(_mm256_cmp_ps(odd.hi, even.hi, _CMP_GT_OQ),
                                     _mm256_and_ps(_mm256_cmp_ps(odd.hi, even.hi, _CMP_EQ_OQ),
                                                   _mm256_castsi256_ps(_mm256_cmpgt_epi32(even.hi_at, odd.hi_at))));
  const __m256 odd_lo = _mm256_or_ps(_mm256_cmp_ps(odd.lo, even.lo, _CMP_LT_OQ),
                                     _mm256_and_ps(_mm256_cmp_ps(odd.lo, even.lo, _CMP_EQ_OQ),
                                                   _mm256_castsi256_ps(_mm256_cmpgt_epi32(even.lo_at, odd.lo_at))));
  const __m256 hi = _mm256_blendv_ps(even.hi, odd.hi, odd_hi);
  const __m256 lo = _mm256_blendv_ps(even.lo, odd.lo, odd_lo);
  const __m256i hi_at = select_at(even.hi_at, odd.hi_at, odd_hi);
  const __m256i lo_at = select_at(even.lo_at, odd.lo_at, odd_lo);
  // The extremes' magnitudes in every lane (no NaN is ever kept in a lane).
  __m256 top = _mm256_max_ps(hi, _mm256_permute2f128_ps(hi, hi, 1));
  top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(1, 0, 3, 2)));
  top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(2, 3, 0, 1)));
  __m256 bottom = _mm256_min_ps(lo, _mm256_permute2f128_ps(lo, lo, 1));
  bottom = _mm256_min_ps(bottom, _mm256_shuffle_ps(bottom, bottom, _MM_SHUFFLE(1, 0, 3, 2)));
  bottom = _mm256_min_ps(bottom, _mm256_shuffle_ps(bottom, bottom, _MM_SHUFFLE(2, 3, 0, 1)));
  across_lanes(hi, hi_at, top, len, e.max, e.max_at);
  across_lanes(lo, lo_at, bottom, len, e.min, e.min_at);
  return _mm256_movemask_ps(nan) != 0;
}
#endif

std::atomic<bool> g_portable{false};

}  // namespace

void set_extremes_path(ExtremesPath path) { g_portable.store(path == ExtremesPath::kPortable); }

MapExtreme map_extremes(const float* v, int64_t len) {
  const int64_t blocks_end = len / kLanes * kLanes;
  MapExtreme e;
  bool nan;
#if defined(NANSENSE_AVX2_BUILDS)
  if (common::cpu_has_avx2() && !g_portable.load(std::memory_order_relaxed) &&
      len < std::numeric_limits<int32_t>::max()) {
    nan = blocks_avx2(v, blocks_end, len, e);
  } else {
    nan = blocks_portable(v, blocks_end, len, e);
  }
#else
  nan = blocks_portable(v, blocks_end, len, e);
#endif
  // Then the tail, value by value.
  for (int64_t j = blocks_end; j < len; ++j) {
    const float x = v[j];
    if (x > e.max) e.max = x, e.max_at = j;
    if (x < e.min) e.min = x, e.min_at = j;
    nan = nan || x != x;
  }
  if (nan) {
    const float q = std::numeric_limits<float>::quiet_NaN();
    return {q, q, 0, 0};
  }
  return e;
}

}  // namespace nansense::stats
