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
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/stats.h"
#include "stats/collapsed_stats.h"
#include "stats/histogram.h"

namespace nansense::stats {

// How much per-channel detail the histograms keep.
using Detail = WatchPerformance;

enum class Kind { kActivation, kGradient };

// One float32 CPU tensor folded on its own, before it is known which
// accumulator takes it: a trace folds a layer's output while it is still in
// the cache, and learns the layer's final name only at the batch's end.
struct CpuFold {
  int64_t numel = 0;
  int64_t channels = 0;  // dim 1 of a tensor of >= 2 dims; 0 without channels
  int64_t tracked = 0;   // channels with a histogram row of their own
  ExactFold exact;
  std::vector<ChannelRange> ranges;  // per tracked channel
  // kSlots counts per row: the tracked channels', then (when some are not
  // tracked) one row for all the others; one row without channels.
  std::vector<int64_t> slots;
  // The folded tensor's dtype before it was widened to float32.
  c10::ScalarType dtype = c10::ScalarType::Float;
};
// Folds x (float32, on the CPU, contiguous) as a TensorAccumulator with
// `detail` folds it: every value exactly, the histogram from at most
// detail.histogram_sample() of them drawn with `seed`. With `maps`, the
// extremes of its channels' maps in the same pass where it can
// (fold_exact_cpu).
CpuFold fold_on_cpu(const torch::Tensor& x, const Detail& detail, uint64_t seed, MapExtremesTable* maps = nullptr);

// Running statistics of one stream of tensors, on their device.
class TensorAccumulator {
 public:
  explicit TensorAccumulator(Detail detail);
  // Folds in every element of t (any real dtype; computed in float32 on its
  // device, float64 stays float64; complex tensors are skipped). No host
  // sync. An empty tensor changes nothing. Per-channel tracking is fixed by
  // the first non-empty tensor (dim 1 of a tensor of >= 2 dims) and ends for
  // good when dim 1 changes size or a tensor of < 2 dims comes.
  void add(const torch::Tensor& t);
  // The same for a tensor folded ahead (fold_on_cpu with this detail). An
  // accumulator on another device moves to the CPU (one sync, only when the
  // model moved between devices within an epoch).
  void add(const CpuFold& fold);
  // Caches median and dead channels, then frees the bins (one sync). The
  // scalars move to the host too: a collapsed accumulator holds no device
  // memory and only its CollapsedStats on the host, and add() on it changes
  // nothing (its epoch is over).
  void collapse();
  // The same from CPU copies of buffers() that the caller took in a batched
  // copy with others (no sync of its own).
  void collapse(const std::vector<torch::Tensor>& cpu_buffers);
  bool collapsed() const;
  // Device bytes held.
  size_t bytes() const;
  // The device buffers publish() copies in one go, and the view built from
  // their CPU copies (same order).
  std::vector<torch::Tensor> buffers() const;
  TensorStatsSnapshot view(const std::vector<torch::Tensor>& cpu_buffers) const;

 private:
  // view(), or (bins false) the collapsed form: no histograms, counts kept.
  TensorStatsSnapshot describe(const std::vector<torch::Tensor>& cpu_buffers, bool bins) const;

  struct State;
  std::shared_ptr<State> state_;  // null once collapsed
  CollapsedStats collapsed_;      // what a collapsed accumulator reports
};

// Training thread only.
class StatsStore {
 public:
  explicit StatsStore(Detail detail = {});

  // Flushes the layer statistics when the detail changes (scalars, metric
  // series and parameter samples stay); returns whether it did.
  bool set_detail(const Detail& detail);
  const Detail& detail() const { return detail_; }

  // Folds one batch's tensor of `layer` into its (layer, phase, epoch)
  // bucket. Starting a newer epoch for (layer, phase) collapses the older one:
  // at the next end_batch() or publish(), all such buckets in one batched
  // copy (one sync per epoch boundary, not one per layer).
  void add(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind, const torch::Tensor& t);
  void add(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind, const CpuFold& fold);
  // Folds one batch's activation of `layer` into its bucket's Min/Max
  // patches (detail().samples_per_channel > 0), with the batch's
  // image-like model input (undefined when the model has none: the bucket
  // then says why it has no patches). `batch`: the batch's index in its
  // phase. Galleries live only in the newest epoch of (layer, phase).
  // `maps`: the activation's maps' extremes taken ahead, if they were
  // (PatchCollector::add).
  void add_gallery(const std::string& layer, const std::string& phase, int64_t epoch, int64_t batch,
                   const torch::Tensor& activation, const torch::Tensor& input, const MapExtremesTable* maps = nullptr);
  // Counts a batch into the buckets touched since the last call.
  void end_batch();

  // Per parameter, at an epoch's first collected batch: call
  // begin_parameter_sample before the batch's optimizer step would run (its
  // start) and finish_parameter_sample after it (the batch's end).
  // begin clones the parameters on their device (the weights before the
  // step); finish takes values, gradients (where defined) and the update
  // ratio of the same tensors in one batched copy, then frees the clones.
  // wants_parameter_sample is false for an epoch sampled or being sampled.
  bool wants_parameter_sample(int64_t epoch) const;
  void begin_parameter_sample(int64_t epoch, const std::vector<std::pair<std::string, torch::Tensor>>& params);
  void finish_parameter_sample(const std::map<std::string, std::string>& owner_of);

  // A logged scalar at a batch (x = epoch + batch / batches_in_phase).
  void log_scalar(const std::string& name, const std::string& layer, const std::string& phase, int64_t epoch,
                  std::optional<int64_t> batch, double x, double value);

  // Drops the points logged at one batch (a tripped batch about to run again
  // for its traced re-run, which logs them anew).
  void forget_points_at(const std::string& phase, int64_t epoch, int64_t batch);

  // A time-travel jump to `epoch`: drops every bucket, sample and point of
  // epochs >= epoch.
  void drop_from_epoch(int64_t epoch);
  // Forget the buckets of layers not in `keep` (narrowing to watched).
  void keep_only(const std::vector<std::string>& keep);
  void clear();

  // One batched device->host copy of every accumulator.
  std::shared_ptr<const WatchSnapshot> publish();
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
  // Buckets added to since the last end_batch(), and older epochs' buckets
  // waiting to collapse; a bucket dropped meanwhile is skipped.
  std::vector<std::shared_ptr<Bucket>> touched_;
  std::vector<std::shared_ptr<Bucket>> collapse_queue_;
  std::set<int64_t> sampled_epochs_;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> series_index_;  // (name, layer, phase)

  bool live(const std::shared_ptr<Bucket>& bucket) const;
  // The (layer, phase, epoch) bucket, made on first use (queueing the older
  // epoch of the stream to collapse).
  std::shared_ptr<Bucket>& bucket_for(const std::string& layer, const std::string& phase, int64_t epoch);
  void touch(const std::shared_ptr<Bucket>& bucket);
  // The (layer, phase, epoch) bucket's accumulator of `kind`, made on first
  // use and counted into this batch; null once its epoch collapsed.
  TensorAccumulator* accumulator(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind);
  void collapse_queued();
  void forget_dropped();
};

}  // namespace nansense::stats
