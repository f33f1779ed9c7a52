// The derived numbers and sizes of the public statistics views
// (nansense/stats.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "nansense/stats.h"
#include "stats/histogram.h"
#include "stats/shards.h"

namespace nansense {

namespace {

// Bytes a string holds beyond its object (short strings live inside it).
size_t heap(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

template <typename T>
size_t heap(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// A std::map node: three pointers and a colour beside the value.
template <typename Value>
constexpr size_t kNode = sizeof(Value) + 4 * sizeof(void*);

size_t heap(const TensorStatsSnapshot& v) {
  size_t bytes = heap(v.hist) + heap(v.channel_hists) + heap(v.dead_channels);
  for (const auto& row : v.channel_hists) bytes += heap(row);
  return bytes;
}

}  // namespace

std::optional<double> TensorStatsSnapshot::mean() const {
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

std::optional<double> TensorStatsSnapshot::variance() const {
  if (n == 0) return std::nullopt;
  const double m = *mean();
  // E[x^2] - E[x]^2 can dip below zero by rounding when the spread is tiny.
  return std::max(0.0, sum_sq / static_cast<double>(n) - m * m);
}

std::optional<double> TensorStatsSnapshot::std() const {
  if (n == 0) return std::nullopt;
  return std::sqrt(*variance());
}

size_t WatchSnapshot::host_bytes() const {
  size_t bytes = sizeof(WatchSnapshot);
  for (const auto& [key, buckets] : layers) {
    bytes += kNode<std::pair<const std::pair<std::string, std::string>, std::vector<LayerStatsSnapshot>>>;
    bytes += heap(key.first) + heap(key.second) + heap(buckets);
    for (const auto& b : buckets) {
      bytes += heap(b.layer) + heap(b.phase);
      if (b.activation) bytes += heap(*b.activation);
      if (b.gradient) bytes += heap(*b.gradient);
    }
  }
  for (const auto& [name, samples] : parameters) {
    bytes += kNode<std::pair<const std::string, std::vector<ParameterSample>>> + heap(name) + heap(samples);
  }
  for (const auto& [name, layer] : owner) {
    bytes += kNode<std::pair<const std::string, std::string>> + heap(name) + heap(layer);
  }
  bytes += heap(series);
  for (const auto& s : series) bytes += heap(s.name) + heap(s.phase) + heap(s.layer) + heap(s.points);
  return bytes;
}

}  // namespace nansense

namespace nansense::stats {

namespace {

// A channel row's count of values (the NaN count is not in the row).
int64_t seen(const std::vector<int64_t>& row) {
  int64_t total = 0;
  for (auto c : row) total += c;
  return total;
}

}  // namespace

void add_shard(TensorStatsSnapshot& into, const TensorStatsSnapshot& shard) {
  into.n += shard.n;
  into.sum += shard.sum;
  into.sum_sq += shard.sum_sq;
  into.nan += shard.nan;
  into.pos_inf += shard.pos_inf;
  into.neg_inf += shard.neg_inf;
  if (into.dtype == c10::ScalarType::Undefined) into.dtype = shard.dtype;
  auto combine = [](std::optional<double>& mine, const std::optional<double>& theirs, const auto& pick) {
    if (theirs) mine = mine ? pick(*mine, *theirs) : *theirs;
  };
  combine(into.min, shard.min, [](double a, double b) { return std::min(a, b); });
  combine(into.max, shard.max, [](double a, double b) { return std::max(a, b); });
  if (!into.hist.empty() && into.hist.size() == shard.hist.size()) {
    for (size_t b = 0; b < into.hist.size(); ++b) into.hist[b] += shard.hist[b];
    into.binned += shard.binned;
    into.median = median_from_hist(into.hist);
  } else {
    into.hist.clear();
    into.binned = 0;
  }
  const bool rows_match = !into.channel_hists.empty() && into.channels == shard.channels &&
                          into.channel_hists.size() == shard.channel_hists.size();
  if (!rows_match) {
    into.channel_hists.clear();
    into.dead_channels.clear();
    if (!into.dead_count || !shard.dead_count || into.channels != shard.channels) into.dead_count.reset();
    return;
  }
  auto dead_in = [](const TensorStatsSnapshot& t, size_t c) {
    return std::binary_search(t.dead_channels.begin(), t.dead_channels.end(), static_cast<int64_t>(c));
  };
  std::vector<int64_t> dead;
  for (size_t c = 0; c < into.channel_hists.size(); ++c) {
    auto& row = into.channel_hists[c];
    const auto& other = shard.channel_hists[c];
    const int64_t seen_here = seen(row), seen_there = seen(other);
    const bool here = dead_in(into, c) || seen_here == 0;
    const bool there = dead_in(shard, c) || seen_there == 0;
    if (here && there && seen_here + seen_there > 0) dead.push_back(static_cast<int64_t>(c));
    for (size_t b = 0; b < row.size() && b < other.size(); ++b) row[b] += other[b];
  }
  into.dead_count = static_cast<int64_t>(dead.size());
  into.dead_channels = std::move(dead);
}

std::shared_ptr<const WatchSnapshot> with_shards(const WatchSnapshot& own, const std::map<int, Shard>& shards,
                                                 int64_t ranks, uint64_t sequence, MergeMemo& memo) {
  auto out = std::make_shared<WatchSnapshot>(own);
  out->sequence = sequence;
  out->ranks = ranks;
  for (auto& [key, buckets] : out->layers) {
    for (auto& bucket : buckets) {
      const BucketKey at{bucket.layer, bucket.phase, bucket.epoch};
      auto merge = [&](std::optional<TensorStatsSnapshot>& mine, int stream) {
        if (!mine) return;
        const bool had_bins = !mine->hist.empty();
        for (const auto& [rank, shard] : shards) {
          const auto it = shard.find(at);
          if (it == shard.end()) continue;
          const auto& theirs = stream == 0 ? it->second.activation : it->second.gradient;
          if (theirs) add_shard(*mine, *theirs);
        }
        auto& remembered = memo[{at, stream}];
        if (had_bins) {
          remembered = {mine->median, mine->dead_count};
        } else {
          // Collapsed here: the global median and dead count as of the
          // last merge that still had the bins.
          if (remembered.first) mine->median = remembered.first;
          if (remembered.second) mine->dead_count = remembered.second;
        }
      };
      merge(bucket.activation, 0);
      merge(bucket.gradient, 1);
    }
  }
  return out;
}

}  // namespace nansense::stats
