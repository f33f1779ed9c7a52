// The statistics engine: running statistics of layer activations and
// activation gradients per (layer, phase, epoch), per-parameter samples per
// epoch, and logged scalar series. Training thread only; readers on other
// threads get immutable CPU views from publish().
//
// Costs: add() runs on the tensor's own device and never syncs with the
// host; publish() and the collapse of an older epoch each make one batched
// device->host copy.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stats/histogram.h"

namespace nansense::stats {

// How much per-channel detail the histograms keep (the original's
// WatchPerformance, minus the patch galleries).
struct Detail {
  bool channel_limit_enabled = true;
  int64_t channel_limit = 16;  // channels (dim 1) with their own histogram
  bool operator==(const Detail&) const = default;
};

// One accumulator, as published: an immutable CPU copy.
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
  // kBins counts over the whole layer; empty once collapsed (older epochs).
  std::vector<int64_t> hist;
  // One kBins row per channel (dim 1), the first min(channels, limit) of
  // them; empty when collapsed, for tensors of fewer than 2 dims, or after
  // dim 1 changed size mid-stream (token counts).
  std::vector<std::vector<int64_t>> channel_hists;
  int64_t channels = 0;  // dim-1 size seen; 0 when per-channel is off
  // From hist, or cached when the bins were collapsed.
  double median = std::numeric_limits<double>::quiet_NaN();
  // Channels whose every value fell in the zero band (of those tracked);
  // nullopt when unknown (no per-channel histograms).
  std::optional<int64_t> dead_count;
  std::vector<int64_t> dead_channels;  // their indices (while bins exist)

  double mean() const;      // NaN without values
  double variance() const;  // population; NaN with fewer than 2 values
  double std() const;
};

// Running statistics of one stream of tensors, on their device.
class TensorAccumulator {
 public:
  explicit TensorAccumulator(Detail detail);
  // Folds in every element of t (any float dtype, cast to float32 on its
  // device). No host sync.
  void add(const torch::Tensor& t);
  // Caches median and dead channels, then frees the bins (one sync).
  void collapse();
  bool collapsed() const;
  // Device bytes held.
  size_t bytes() const;
  // The device buffers publish() copies in one go, and the view built from
  // their CPU copies (same order).
  std::vector<torch::Tensor> buffers() const;
  TensorStatsView view(const std::vector<torch::Tensor>& cpu_buffers) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

enum class Kind { kActivation, kGradient };

struct LayerStatsView {
  std::string layer;
  std::string phase;
  int64_t epoch = 0;
  std::optional<TensorStatsView> activation;
  std::optional<TensorStatsView> gradient;
  int64_t batches = 0;  // batches folded in
};

// One parameter at an epoch's first collected batch.
struct ParameterSample {
  int64_t epoch = 0;
  double value_norm = 0, mean = 0, std = 0, min = 0, max = 0;
  std::optional<double> grad_norm, grad_mean, grad_std, grad_min, grad_max;
  // ||w_after_step - w_before|| / ||w_before||; nullopt when the batch made
  // no optimizer step (eval) or w_before was zero.
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
  std::string name;     // "loss", or "metric:sparsity" per layer below
  std::string phase;
  std::string layer;    // "" for scalars logged with log_scalar
  std::vector<ScalarPoint> points;
};

// Everything collected, as of one publish(): immutable, any thread.
struct StatsSnapshot {
  uint64_t sequence = 0;
  // Keyed (layer, phase) -> epochs ascending; the newest keeps its bins.
  std::map<std::pair<std::string, std::string>, std::vector<LayerStatsView>> layers;
  // Parameter name -> samples by epoch; the layer that owns it in `owner`.
  std::map<std::string, std::vector<ParameterSample>> parameters;
  std::map<std::string, std::string> owner;
  std::vector<SeriesView> series;
  size_t device_bytes = 0;  // what the accumulators hold on their device
};

// Training thread only.
class StatsStore {
 public:
  explicit StatsStore(Detail detail = {});

  // Flushes everything when the detail changes; returns whether it did.
  bool set_detail(const Detail& detail);
  const Detail& detail() const { return detail_; }

  // Folds one batch's tensor of `layer` into its (layer, phase, epoch)
  // bucket. Starting a newer epoch for (layer, phase) collapses the older one.
  void add(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind, const torch::Tensor& t);
  // Counts a batch into the buckets touched since the last call.
  void end_batch();

  // Per parameter, at an epoch's first collected batch: call
  // begin_parameter_sample before the batch's optimizer step would run (its
  // start) and finish_parameter_sample after it (the batch's end).
  bool wants_parameter_sample(int64_t epoch) const;
  void begin_parameter_sample(int64_t epoch, const std::vector<std::pair<std::string, torch::Tensor>>& params);
  void finish_parameter_sample(const std::map<std::string, std::string>& owner_of);

  // A logged scalar at a batch (x = epoch + batch / batches_in_phase).
  void log_scalar(const std::string& name, const std::string& layer, const std::string& phase, int64_t epoch,
                  std::optional<int64_t> batch, double x, double value);

  // A time-travel jump to `epoch`: drops every bucket, sample and point of
  // epochs >= epoch.
  void drop_from_epoch(int64_t epoch);
  // Forget the buckets of layers not in `keep` (narrowing to watched).
  void keep_only(const std::vector<std::string>& keep);
  void clear();

  // One batched device->host copy of every accumulator.
  std::shared_ptr<const StatsSnapshot> publish();
  size_t device_bytes() const;

 private:
  Detail detail_;
  struct Bucket;
  std::map<std::tuple<std::string, std::string, int64_t>, std::shared_ptr<Bucket>> buckets_;
  struct Pending;
  std::shared_ptr<Pending> pending_;
  std::map<std::string, std::vector<ParameterSample>> parameters_;
  std::map<std::string, std::string> owner_;
  std::vector<SeriesView> series_;
  uint64_t sequence_ = 0;
};

}  // namespace nansense::stats
