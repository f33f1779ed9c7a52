// Distributed runs: the layer statistics of the other ranks (their shards of
// the global batch), sent to rank 0 at batch boundaries and added to its own,
// so the statistics pages show the whole global batch. Min/Max patches,
// parameter samples and logged series stay rank 0's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/stats.h"

namespace nansense::stats {

// (layer, phase, epoch)
using BucketKey = std::tuple<std::string, std::string, int64_t>;
// One rank's latest buckets.
using Shard = std::map<BucketKey, LayerStatsSnapshot>;

// A follower's message (stats_codec.cpp): the newest epoch's bucket of every
// (layer, phase) in `view`, activation and gradient statistics only (no
// patches), as JSON text.
std::string encode_shard(const WatchSnapshot& view);
// The buckets of such a message. Throws ArgumentError saying what is
// malformed.
std::vector<LayerStatsSnapshot> decode_shard(const std::string& text);

// into += shard: the same tensor stream on another rank (stats_views.cpp).
// Counts, sums and bins add, min/max combine; a channel is dead when it is
// dead (or saw nothing) on both. Histograms that cannot be added (one side
// collapsed, another channel count) are dropped, the scalars kept; the
// median follows the added bins.
void add_shard(TensorStatsSnapshot& into, const TensorStatsSnapshot& shard);

// What a merge remembers of a bucket while it still had bins: the global
// median and dead-channel count, which a collapsed bucket can no longer
// recompute. Keyed by bucket and stream (0 activation, 1 gradient).
using MergeMemo = std::map<std::pair<BucketKey, int>, std::pair<std::optional<double>, std::optional<int64_t>>>;

// `own` (rank 0's view) with every shard's matching buckets added, `ranks` in
// its `ranks`, and `sequence`. Buckets `own` lacks are left out (the layer was
// unwatched or the statistics flushed on rank 0).
std::shared_ptr<const WatchSnapshot> with_shards(const WatchSnapshot& own, const std::map<int, Shard>& shards,
                                                 int64_t ranks, uint64_t sequence, MergeMemo& memo);

}  // namespace nansense::stats
