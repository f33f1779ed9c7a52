// Statistics over time: which layers collect, how often the UI is updated
// while training runs, and the immutable views of what was collected
// (Session::stats()). See the README's "Watching training evolve".
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nansense {

// Which layers fold their batches into the running statistics.
// kNone: nothing is collected (what was collected stays, frozen).
// kWatched: the watched layers (Session::watch_layers, the eye on a card).
// kAll: every layer of the architecture.
enum class StatsScope { kNone, kWatched, kAll };

// How much per-channel detail the statistics keep. Changing it flushes what
// was collected.
struct WatchPerformance {
  // Keep per-channel histograms for only the first `channel_limit` channels
  // (dim 1). Default true, 16 channels: about 27 KB of device memory per
  // (layer, phase, kind) for the newest epoch.
  TORCH_ARG(bool, channel_limit_enabled) = true;
  TORCH_ARG(int64_t, channel_limit) = 16;

 public:
  bool operator==(const WatchPerformance& o) const {
    return channel_limit_enabled_ == o.channel_limit_enabled_ && channel_limit_ == o.channel_limit_;
  }
};

// One accumulator (a layer's activations or activation gradients over a
// phase's batches in one epoch), as published: an immutable CPU copy.
struct TensorStatsView {
  // Over the finite values.
  int64_t n = 0;
  double sum = 0;
  double sum_sq = 0;
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  // Non-finite element counts.
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
  // 211 counts over the signed-log bins (src/stats/histogram.h) for the whole
  // layer; empty once collapsed (older epochs keep scalars only).
  std::vector<int64_t> hist;
  // One 211-count row per channel (dim 1), the first min(channels, limit) of
  // them; empty when collapsed, for tensors of fewer than 2 dims, or after
  // dim 1 changed size mid-stream (token counts).
  std::vector<std::vector<int64_t>> channel_hists;
  int64_t channels = 0;  // dim-1 size seen; 0 when per-channel is off
  // From hist (the non-NaN values, infinities in the end bins), or cached
  // when the bins were collapsed.
  double median = std::numeric_limits<double>::quiet_NaN();
  // Channels whose every value fell in the zero band (of those tracked,
  // that saw a value; a NaN or infinity keeps a channel alive); nullopt when
  // unknown (no per-channel histograms).
  std::optional<int64_t> dead_count;
  std::vector<int64_t> dead_channels;  // their indices (while bins exist)

  double mean() const;      // NaN without values
  double variance() const;  // population; NaN without values
  double std() const;
};

// One (layer, phase, epoch) bucket.
struct LayerStatsView {
  std::string layer;
  std::string phase;
  int64_t epoch = 0;
  int64_t batches = 0;  // batches folded in
  std::optional<TensorStatsView> activation;
  std::optional<TensorStatsView> gradient;
};

// One parameter at an epoch's first collected batch.
struct ParameterSample {
  int64_t epoch = 0;
  double value_norm = 0, mean = 0, std = 0, min = 0, max = 0;
  std::optional<double> grad_norm, grad_mean, grad_std, grad_min, grad_max;
  // ||w after the batch's optimizer step - w before|| / ||w before||: 0.0
  // when the batch changed nothing (eval, a frozen parameter); nullopt only
  // when w before was all zeros (no ratio to take).
  std::optional<double> update_ratio;
};

// One point of a logged scalar or a metric instrument.
struct ScalarPoint {
  int64_t epoch = 0;
  std::optional<int64_t> batch;  // nullopt for an epoch-reduced point
  double x = 0;                  // epoch + batch / batches in that epoch's phase
  double value = 0;              // as given (non-finite kept)
};

struct SeriesView {
  std::string name;   // "loss"; a metric instrument's name (or "name/key")
  std::string phase;
  std::string layer;  // "" for Session::log_scalar
  std::vector<ScalarPoint> points;
};

// Everything collected as of one publish: immutable, any thread.
struct StatsSnapshot {
  uint64_t sequence = 0;
  // (layer, phase) -> buckets by ascending epoch; the newest keeps its bins.
  std::map<std::pair<std::string, std::string>, std::vector<LayerStatsView>> layers;
  // Parameter name -> samples by epoch, and the layer that owns it.
  std::map<std::string, std::vector<ParameterSample>> parameters;
  std::map<std::string, std::string> owner;
  std::vector<SeriesView> series;
  size_t device_bytes = 0;  // what the accumulators hold on their device

  // Approximate CPU memory of this snapshot (views, strings, containers).
  size_t host_bytes() const;
};

}  // namespace nansense
