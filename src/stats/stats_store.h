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

#include "nansense/stats.h"
#include "stats/histogram.h"

namespace nansense::stats {

// How much per-channel detail the histograms keep.
using Detail = WatchPerformance;

enum class Kind { kActivation, kGradient };

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
