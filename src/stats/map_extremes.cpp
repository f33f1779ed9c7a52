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

#if defined(NANSENSE_AVX2_BUILDS)
// One block of eight values into one chain of lanes (lanes_avx2).
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

// The same eight lanes with AVX2, each lane's value and position carried in
// two chains (even and odd blocks) so the compare-and-blend latencies
// overlap, then joined as one lane would have seen them: the larger (the
// smaller) value, on a tie the earlier position. Positions are int32 lanes
// (callers keep len below 2^31).
__attribute__((target("avx2"))) void lanes_avx2(const float* v, int64_t blocks_end, Lanes& l) {
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
  alignas(32) float h[2][kLanes], o[2][kLanes];
  alignas(32) int32_t ha[2][kLanes], oa[2][kLanes];
  for (int c = 0; c < 2; ++c) {
    _mm256_store_ps(h[c], chains[c].hi);
    _mm256_store_ps(o[c], chains[c].lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ha[c]), chains[c].hi_at);
    _mm256_store_si256(reinterpret_cast<__m256i*>(oa[c]), chains[c].lo_at);
  }
  for (int k = 0; k < kLanes; ++k) {
    const int odd_hi = h[1][k] > h[0][k] || (h[1][k] == h[0][k] && ha[1][k] < ha[0][k]);
    const int odd_lo = o[1][k] < o[0][k] || (o[1][k] == o[0][k] && oa[1][k] < oa[0][k]);
    l.hi[k] = h[odd_hi][k];
    l.hi_at[k] = ha[odd_hi][k];
    l.lo[k] = o[odd_lo][k];
    l.lo_at[k] = oa[odd_lo][k];
  }
  l.nan = _mm256_movemask_ps(nan) != 0;
}
#endif

std::atomic<bool> g_portable{false};

}  // namespace

void set_extremes_path(ExtremesPath path) { g_portable.store(path == ExtremesPath::kPortable); }

MapExtreme map_extremes(const float* v, int64_t len) {
  const int64_t blocks_end = len / kLanes * kLanes;
  Lanes l;
#if defined(NANSENSE_AVX2_BUILDS)
  if (common::cpu_has_avx2() && !g_portable.load(std::memory_order_relaxed) &&
      len < std::numeric_limits<int32_t>::max()) {
    lanes_avx2(v, blocks_end, l);
  } else {
    lanes_portable(v, blocks_end, l);
  }
#else
  lanes_portable(v, blocks_end, l);
#endif
  // Across the lanes: the first lane's value among equal ones (which of +0
  // and -0 is reported), the earliest position holding it; then the tail.
  MapExtreme e;
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
  bool nan = l.nan;
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
