// Statistics over time: which layers collect, how often the UI is updated
// while training runs, and the immutable views of what was collected
// (Session::watch_snapshot()). See docs/guide/stats.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nansense/position.h"

namespace nansense {

// Which layers fold their batches into the running statistics.
// kNone: nothing is collected (what was collected stays, frozen).
// kWatched: the watched layers (Session::watch, the eye on a card).
// kAll: every layer of the architecture.
// Default kWatched: with no layer watched nothing is collected and a batch
// costs nothing extra; watching a layer turns collection on.
// Cost while collecting (bench/stats, demo CNN): every batch is traced (the
// ops observed, tensors referenced on their device, no copy: about 1.07x) and
// each collected layer's activation and gradient folded on its device, which
// costs by the number of values: 3 watched layers every batch measured 1.11 to
// 1.13x a plain batch without Min/Max patches (1.18 to 1.21x with them, the
// default), every layer 1.22 to 1.24x (docs/benchmarks.md, issue 58).
enum class StatsScope { kNone, kWatched, kAll };
std::string_view to_string(StatsScope scope);  // "none", "watched", "all"

// How often a running loop is captured and published without pausing, so
// the UI, the Stats page and MCP follow it live. A pause, a step and
// refresh() publish as well.
//
// Default: every 2 seconds of training (pauses excluded). On the demo CNN that
// captures about one batch in 120: about 1% of the run (bench/stats, timed
// over whole periods; every second costs 2.3%, each capture copying every
// layer's activations and gradients for the snapshot).
// Every batch costs what capture costs (bench/overhead: about 1.5x a plain
// batch); every n epochs captures the epoch's first batch.
struct UpdateFrequency {
  enum class Unit { kBatch, kEpoch, kSeconds };
  // Every n batches (of `phase` when given), every n epochs, or every n
  // seconds of training.
  TORCH_ARG(Unit, unit) = Unit::kSeconds;
  // kBatch and kEpoch: a whole number >= 1; kSeconds: > 0.
  TORCH_ARG(double, n) = 2;
  // kBatch only: count only this phase's batches ("train").
  TORCH_ARG(std::optional<std::string>, phase) = std::nullopt;

 public:
  static UpdateFrequency batches(int64_t n, std::optional<std::string> phase = std::nullopt) {
    return UpdateFrequency().unit(Unit::kBatch).n(static_cast<double>(n)).phase(std::move(phase));
  }
  static UpdateFrequency epochs(int64_t n) { return UpdateFrequency().unit(Unit::kEpoch).n(static_cast<double>(n)); }
  static UpdateFrequency seconds(double n) { return UpdateFrequency().unit(Unit::kSeconds).n(n); }
  bool operator==(const UpdateFrequency& o) const { return unit_ == o.unit_ && n_ == o.n_ && phase_ == o.phase_; }
};
std::string_view to_string(UpdateFrequency::Unit unit);  // "batch", "epoch", "seconds"

// When a metric instrument's values become points: one per collected batch
// (kBatch), or the epoch's values reduced into one point at its end (kEpoch).
enum class MetricOn { kBatch, kEpoch };
// How an epoch's values are reduced (MetricOn::kEpoch). Default kMean.
enum class MetricReduce { kMean, kSum, kMin, kMax, kLast };

// One collected layer's live tensors on a collected batch, handed to a
// metric instrument (Session::watch_metric). The tensors are the training
// device's own: read them, never modify them (the instrument runs under
// torch::NoGradGuard on the training thread).
struct LayerContext {
  std::string layer;
  std::string phase;
  BatchPosition position;
  at::Tensor activation;
  // Undefined in forward-only phases (no backward ran through the layer).
  at::Tensor gradient;
  // The layer's own parameters and their gradients, by qualified name
  // ("features.0.weight"); a parameter without a gradient is left out of
  // weight_gradients. Instruments run at the batch's end, after your
  // optimizer.step(): the weights are the updated ones.
  std::map<std::string, at::Tensor> weights;
  std::map<std::string, at::Tensor> weight_gradients;
};

// Returns the layer's value for this batch, or nullopt to skip the layer.
// An instrument that throws is disabled and reported; training goes on.
using MetricFn = std::function<std::optional<double>(const LayerContext&)>;

// A layer-tensor instrument (Session::watch_layer_tensor): returns a tensor
// of the layer's activation shape (batch dimension first), drawn as an extra
// strip under the layer's card, or an undefined tensor to skip the layer.
using LayerTensorFn = std::function<at::Tensor(const LayerContext&)>;

// One parameter's live tensors on a captured batch, handed to a weight-tensor
// instrument (Session::watch_weight_tensor). Read them, never modify them.
struct WeightContext {
  std::string layer;      // the layer that owns the parameter
  std::string parameter;  // qualified: "features.0.weight"
  std::string phase;
  BatchPosition position;
  at::Tensor weight;
  // Undefined before the first backward (and in forward-only phases after
  // zero_grad(set_to_none)).
  at::Tensor gradient;
  // The optimizer's state entries for the parameter (momentum_buffer,
  // exp_avg, exp_avg_sq, ...; scalars such as Adam's step as 0-dim tensors),
  // live on the parameter's device; empty without an optimizer in
  // StartOptions or before its first step.
  std::map<std::string, at::Tensor> optimizer_state;
  // The numeric hyperparameters of its param group (lr, momentum, ...).
  std::map<std::string, double> hyperparams;
};

// A weight-tensor instrument: returns a tensor of the parameter's shape, drawn
// on the Weights page beside the weight, gradient and optimizer state, or an
// undefined tensor to skip the parameter.
using WeightTensorFn = std::function<at::Tensor(const WeightContext&)>;

// How much per-channel detail the statistics keep. Changing it flushes the
// layer statistics collected so far (logged scalars, metrics and parameter
// samples stay).
struct WatchPerformance {
  // Keep per-channel histograms for only the first `channel_limit` channels
  // (dim 1). Default true, 16 channels: about 27 KB of device memory per
  // (layer, phase, kind) for the newest epoch.
  TORCH_ARG(bool, channel_limit_enabled) = true;
  TORCH_ARG(int64_t, channel_limit) = 16;
  // On the CPU, histograms (the layer's and each channel's) count at most
  // this many values of each tensor, a stratified random sample over it
  // (runs of 16 values, one in each equal window); 0 counts every
  // value. Count, sum, mean, std, min, max, the non-finite counts and dead
  // channels stay exact either way (TensorStatsSnapshot::binned says how many
  // values the bins hold). Default 16384: a histogram's shape to about 1%,
  // and every layer on every batch within bench/stats' target. On a GPU
  // every value is counted.
  TORCH_ARG(int64_t, histogram_sample) = 16384;
  // Min/Max patches (activations of the collected layers with an
  // image-like model input): the inputs kept per channel and ranking, for the
  // same channels the per-channel histograms track. 0 turns patches off.
  TORCH_ARG(int64_t, samples_per_channel) = 5;
  // Also rank by a channel's spatial mean (max_average / min_average), each
  // keeping whole inputs: more memory, off by default.
  TORCH_ARG(bool, average_patches) = false;

 public:
  bool operator==(const WatchPerformance& o) const {
    return channel_limit_enabled_ == o.channel_limit_enabled_ && channel_limit_ == o.channel_limit_ &&
           histogram_sample_ == o.histogram_sample_ && samples_per_channel_ == o.samples_per_channel_ &&
           average_patches_ == o.average_patches_;
  }
};

// One accumulator (a layer's activations or activation gradients over a
// phase's batches in one epoch), as published: an immutable CPU copy.
struct TensorStatsSnapshot {
  // Over the finite values (n of them); min and max are nullopt when there
  // are none, as in TensorStats.
  int64_t n = 0;
  double sum = 0;
  double sum_sq = 0;
  std::optional<double> min;
  std::optional<double> max;
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
  // Values the bins count (the layer's histogram plus its NaN count): n +
  // nan + pos_inf + neg_inf, or fewer when the histograms were sampled
  // (WatchPerformance::histogram_sample); 0 once collapsed.
  int64_t binned = 0;
  // From hist (the non-NaN values, infinities in the end bins), or cached
  // when the bins were collapsed; nullopt when the bins held no value.
  std::optional<double> median;
  // Channels whose every value fell in the zero band (of those tracked,
  // that saw a value; a NaN or infinity keeps a channel alive); nullopt when
  // unknown (no per-channel histograms).
  std::optional<int64_t> dead_count;
  std::vector<int64_t> dead_channels;  // their indices (while bins exist)
  // The dtype of the tensors folded in (the latest one's: autocast keeps a
  // layer's dtype from batch to batch); Undefined before any.
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  // Of the finite values; nullopt without any.
  std::optional<double> mean() const;
  std::optional<double> variance() const;  // population
  std::optional<double> std() const;
};

// Min/Max patches (see docs/guide/stats.md): per channel, the
// inputs that drove it highest or lowest in one (phase, epoch).
// kMaxPixel / kMinPixel rank a sample by the channel's largest (smallest)
// value and keep the input crop around where it was; kMaxAverage /
// kMinAverage rank by the channel's spatial mean and keep the whole input.
enum class PatchRanking { kMaxPixel, kMinPixel, kMaxAverage, kMinAverage };
std::string_view to_string(PatchRanking ranking);  // "max_pixel", ...
std::optional<PatchRanking> patch_ranking_from(std::string_view name);

struct PatchSlot {
  bool filled = false;
  double score = std::numeric_limits<double>::quiet_NaN();  // the ranked value (NaN: the channel held only NaN)
  int64_t batch = -1;                                       // the batch's index in its phase
  int64_t sample = -1;                                      // the sample's index in that batch
  int64_t y = 0, x = 0;                                     // where the extreme was, in the activation
  int64_t top = 0, left = 0;                                // the crop's origin in the input
};

struct PatchGallery {
  PatchRanking ranking = PatchRanking::kMaxPixel;
  int64_t samples = 0;                        // slots per channel, best first
  int64_t channels = 0;                       // the first `channels` channels
  int64_t input_height = 0, input_width = 0;  // the model input's, where crops come from
  std::vector<PatchSlot> slots;               // [sample][channel], row-major
  // float32 CPU: crops [samples, channels, input channels, crop h, crop w]
  // and the channel's activation map [samples, channels, h, w] (undefined for
  // a flat activation); dequantised (about 1/254 of each crop's range), NaN
  // where non-finite or the slot is empty.
  at::Tensor crops;
  at::Tensor heat;
  const PatchSlot& slot(int64_t sample, int64_t channel) const {
    return slots[static_cast<size_t>(sample * channels + channel)];
  }
};

// One (layer, phase, epoch) bucket.
struct LayerStatsSnapshot {
  std::string layer;
  std::string phase;
  int64_t epoch = 0;
  int64_t batches = 0;  // batches folded in
  std::optional<TensorStatsSnapshot> activation;
  std::optional<TensorStatsSnapshot> gradient;
  // The activation's Min/Max patches (newest epoch of the phase only;
  // older epochs release them), and why there are none when none could be
  // collected ("needs an image-like input", a 3-D activation...).
  std::vector<PatchGallery> patches;
  std::optional<std::string> patches_note;
  // Batches the patches left out: their activation or input had another
  // shape than the epoch's first batch (a ragged batch size is fine).
  int64_t patches_skipped = 0;
};

// One parameter at an epoch's first collected batch.
struct ParameterSample {
  int64_t epoch = 0;
  double value_norm = 0, mean = 0, std = 0, min = 0, max = 0;
  // The values' exact median (the lower of the two middle values for an
  // even count, as torch.median); nullopt for an empty parameter.
  std::optional<double> median;
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
  std::string name;  // "loss"; a metric instrument's name (or "name/key")
  std::string phase;
  std::string layer;  // "" for Session::log_scalar
  std::vector<ScalarPoint> points;
};

// Everything collected as of one publish: immutable, any thread.
struct WatchSnapshot {
  uint64_t sequence = 0;
  // (layer, phase) -> buckets by ascending epoch; the newest keeps its bins.
  std::map<std::pair<std::string, std::string>, std::vector<LayerStatsSnapshot>> layers;
  // Parameter name -> samples by epoch, and the layer that owns it.
  std::map<std::string, std::vector<ParameterSample>> parameters;
  std::map<std::string, std::string> owner;
  std::vector<SeriesView> series;
  size_t device_bytes = 0;  // what the accumulators hold on their device
  // The ranks whose shards the layer statistics add up (a distributed run:
  // the global batch); Min/Max patches, parameter samples and series are
  // rank 0's.
  int64_t ranks = 1;

  // Approximate CPU memory of this snapshot (views, strings, containers).
  size_t host_bytes() const;
};

// An instrument (metric or tensor) that failed and was disabled, with its
// error: Session::instrument_errors().
struct FailedInstrument {
  std::string name;
  std::string error;
};

// Our earlier names, renamed to the reference API's (docs/guide/
// differences.md, "One name per concept"); they go in the next release.
using StatsSnapshot [[deprecated("renamed WatchSnapshot")]] = WatchSnapshot;
using FailedMetric [[deprecated("renamed FailedInstrument")]] = FailedInstrument;

}  // namespace nansense
