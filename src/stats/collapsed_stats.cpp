#include "stats/collapsed_stats.h"

namespace nansense::stats {

static_assert(sizeof(CollapsedStats) == 96, "the size docs/benchmarks.md's memory breakdown counts");

CollapsedStats::CollapsedStats(const TensorStatsSnapshot& v)
    : n_(v.n),
      nan_(v.nan),
      pos_inf_(v.pos_inf),
      neg_inf_(v.neg_inf),
      channels_(v.channels),
      dead_count_(v.dead_count.value_or(0)),
      sum_(v.sum),
      sum_sq_(v.sum_sq),
      min_(v.min.value_or(0)),
      max_(v.max.value_or(0)),
      median_(v.median.value_or(0)),
      dtype_(v.dtype) {
  if (v.min) present_ |= kMin;
  if (v.max) present_ |= kMax;
  if (v.median) present_ |= kMedian;
  if (v.dead_count) present_ |= kDeadCount;
}

TensorStatsSnapshot CollapsedStats::expand() const {
  TensorStatsSnapshot v;
  v.n = n_;
  v.sum = sum_;
  v.sum_sq = sum_sq_;
  if (present_ & kMin) v.min = min_;
  if (present_ & kMax) v.max = max_;
  v.nan = nan_;
  v.pos_inf = pos_inf_;
  v.neg_inf = neg_inf_;
  v.channels = channels_;
  if (present_ & kMedian) v.median = median_;
  if (present_ & kDeadCount) v.dead_count = dead_count_;
  v.dtype = dtype_;
  return v;
}

}  // namespace nansense::stats
