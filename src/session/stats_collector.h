// Statistics over time on the session's side: the settings (any thread), the
// engine's store, the metric instruments and the logged scalars (training
// thread), and the published view (any thread). The session decides which
// batches are collected and hands over their traces; this part decides what
// of a trace is folded and when a view is published.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "capture/optimizer_state.h"
#include "capture/tracer.h"
#include "common/atomic_shared_ptr.h"
#include "nansense/architecture.h"
#include "nansense/options.h"
#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "stats/shards.h"
#include "stats/stats_store.h"

namespace nansense::detail {

class StatsCollector {
 public:
  struct Host {
    // A part of the statistics failed and was disabled; training goes on.
    std::function<void(const std::string&)> report_error;
    // The settings or the published view changed (the status shows both).
    std::function<void()> changed;
  };
  StatsCollector(torch::nn::Module& model, const Schedule& schedule, const StartOptions& options, Host host);

  // --- any thread: settings ---
  StatsScope scope() const;
  void set_scope(StatsScope scope);
  std::vector<std::string> watched() const;
  // `architecture`: the last captured one; null before the first capture,
  // when names are kept unchecked. Throws UsageError naming every unknown
  // layer, changing nothing.
  void watch(const std::vector<std::string>& layers, const Architecture* architecture);
  void unwatch(const std::vector<std::string>& layers, const Architecture* architecture);
  WatchPerformance performance() const;
  // Counts changes to the settings above (scope, watched layers, patch
  // layers, performance): a caller that mirrors them (a distributed run's
  // rank 0) reads them again only when it moved.
  uint64_t settings_version() const {
    std::lock_guard lock(mu_);
    return version_;
  }
  // Whether the change flushes what was collected. UsageError for a bad value.
  bool set_performance(const WatchPerformance& performance);
  // The layers Min/Max patches are collected for, when collected (nullopt:
  // the watched layers). Names are checked as watch() checks them.
  std::optional<std::vector<std::string>> patch_layers() const;
  void set_patch_layers(const std::optional<std::vector<std::string>>& layers, const Architecture* architecture);
  // Whether batches are collected: scope all, or watched with a watched
  // layer (and collection not disabled by a failure).
  bool collecting() const;
  void add_metric(const std::string& name, MetricFn fn, MetricOn on, MetricReduce reduce);
  // The general form behind it (the Python package's watch_metric): the
  // function returns named values, one series each ("" is the metric's own
  // series, any other key the series "name/key"); none skips the layer.
  // `custom_reduce`, when set, reduces an epoch's values instead of `reduce`
  // (an on = kEpoch metric only).
  using NamedValues = std::vector<std::pair<std::string, double>>;
  using NamedMetricFn = std::function<NamedValues(const LayerContext&)>;
  using CustomReduce = std::function<double(const std::vector<double>&)>;
  void add_metric(const std::string& name, NamedMetricFn fn, MetricOn on, MetricReduce reduce,
                  CustomReduce custom_reduce);
  // Tensor instruments (Session::watch_layer_tensor / watch_weight_tensor):
  // exactly one function is set. UsageError for an empty or taken name.
  void add_tensor_instrument(const std::string& name, LayerTensorFn layer_fn, WeightTensorFn weight_fn);
  std::vector<FailedInstrument> instrument_errors() const;
  std::shared_ptr<const WatchSnapshot> snapshot() const { return published_.load(); }

  // --- training thread ---
  // At a batch boundary: applies changed settings, closes a finished epoch
  // (its metric reductions, a publish), and when this collected batch is its
  // epoch's first, begins the parameter sample.
  void begin_batch(const BatchPosition& pos, bool collect, const Architecture* architecture);
  // What a collected batch's tracer keeps (call after begin_batch): the
  // device tensors of the layers in scope as of begin_batch (watched ones, or
  // every layer but shape ops). Float32 CPU tensors are folded as the tracer
  // offers them, while still in the cache, and not held to the batch's end,
  // unless something needs them whole then: a Min/Max gallery (its layer's
  // activation), a metric or a layer-tensor instrument (every tensor).
  capture::TraceKeep trace_keep();
  // Folds the batch's traced tensors (final names) of the layers in scope,
  // those held and those folded ahead, and runs the metric instruments.
  void fold(const BatchPosition& pos, capture::TraceResult& trace);
  // At the batch's end, after the loop's optimizer step: finishes a
  // parameter sample begun at its start.
  void end_batch(const Architecture* architecture);
  // UsageError for an empty name.
  void log_scalar(const std::string& name, double value, const BatchPosition& pos);
  // A tripped batch runs again (the traced re-run): what its first run
  // logged at `pos` is dropped, so each batch keeps one value per scalar.
  void forget_scalars_at(const BatchPosition& pos);
  // The phase's length is known now: its held-back points get their x.
  void end_phase(const std::string& phase, int64_t count);
  // The first capture: drops the watched names `architecture` lacks and
  // returns them.
  std::vector<std::string> check_watched(const Architecture& architecture);
  // On a captured batch, at its end: runs the tensor instruments for the
  // layers in scope (as of begin_batch) on the batch's live tensors (the
  // device ones a collected batch kept, else the CPU copies) and puts CPU
  // copies of their outputs into `snap` (activation-shaped ones trimmed to
  // the samples it kept). `live_optimizer` reads the optimizer state without
  // copying it.
  void run_tensor_instruments(const BatchPosition& pos, capture::TraceResult& trace, BatchSnapshot& snap,
                              const std::function<capture::OptimizerView()>& live_optimizer);
  // A time-travel jump to `epoch`: everything of epochs >= epoch goes.
  void rewind(int64_t epoch);
  // A frozen moment's view (load_moment): published as it is, and kept; this
  // collector publishes nothing of its own from now on.
  void adopt_frozen(std::shared_ptr<const WatchSnapshot> view);
  // Publishes a new view when something changed since the last one.
  void publish();

  // --- distributed runs (the Python package's coordinator) ---
  // A follower rank, training thread, at a batch boundary: its newest
  // epoch's layer statistics (stats::encode_shard) when it collected since
  // the last call, else "".
  std::string take_shard();
  // Rank 0, any thread: rank `rank`'s latest shard (take_shard's text) of a
  // run of `ranks` ranks; the published view adds every rank's latest shard
  // to this rank's own from now on (republished at once). ArgumentError for
  // a malformed shard, changing nothing.
  void add_shard(int rank, int64_t ranks, const std::string& shard);
  // The run is over: the last epoch's reductions, then a publish.
  void finish();

 private:
  struct Metric {
    std::string name;
    NamedMetricFn fn;
    MetricOn on = MetricOn::kBatch;
    MetricReduce reduce = MetricReduce::kMean;
    CustomReduce custom_reduce;
    std::atomic<bool> failed{false};
  };
  struct TensorInstrument {
    std::string name;
    LayerTensorFn layer_fn;
    WeightTensorFn weight_fn;
    std::atomic<bool> failed{false};
  };
  // An epoch's values of one (metric, layer, phase), reduced as they come.
  struct Reduction {
    std::shared_ptr<Metric> metric;
    int64_t count = 0;
    double sum = 0, min = 0, max = 0, last = 0;
    std::vector<double> values;  // kept for a custom reduce only
    void add(double v);
    double value() const;
  };
  // A point whose x waits for its phase's length.
  struct HeldPoint {
    std::string name, layer, phase;
    int64_t epoch = 0, batch = 0;
    double value = 0;
  };

  // Training thread; each guarded so a failure disables collection.
  template <class F>
  void guarded(const char* what, F&& f);
  void apply_settings();
  void close_epoch(int64_t epoch);
  void log_point(const std::string& name, const std::string& layer, const BatchPosition& pos, double value);
  void run_metrics(const BatchPosition& pos, const std::vector<const LayerInfo*>& layers,
                   const capture::TraceResult& trace, const std::map<std::string, torch::Tensor>& gradients);
  void fail_metric(Metric& metric, const std::string& layer, const std::string& error);
  // `what`: "metric", "layer-tensor" or "weight-tensor"; `where`: "layer
  // \"fc1\"" or "parameter \"fc1.weight\"".
  void fail_instrument(std::atomic<bool>& failed, const std::string& what, const std::string& name,
                       const std::string& where, const std::string& error);
  // The folds a collected batch's tracer handed over ahead (trace_keep).
  struct Staged {
    struct Entry {
      int layer = -1;
      int64_t op_seq = 0;
      stats::Kind kind = stats::Kind::kActivation;
      stats::CpuFold fold;
      // A patched layer's activation (held for its galleries): its maps'
      // extremes from the same pass, good while the held tensor is the one
      // folded (its data and version unchanged: an in-place op after the
      // layer moves the version, and the galleries then take their own).
      std::shared_ptr<const stats::MapExtremesTable> maps;
      const void* data = nullptr;
      int64_t version = 0;
    };
    stats::Detail detail;
    std::vector<std::string> patched_layers;  // activations held whole
    bool hold_all = false;                    // instruments read every tensor
    std::mutex mu;                            // gradient hooks add too
    uint64_t seed = 0;
    std::vector<Entry> entries;
    bool take(int layer, int64_t op_seq, const std::string& name, bool gradient, const torch::Tensor& t);
  };
  // The layers Min/Max patches are collected for, as of the last batch
  // boundary: set_patch_layers' list, else the watched layers.
  const std::vector<std::string>& patched_layers() const;
  // The layers a trace's architecture has in scope, in its order.
  std::vector<const LayerInfo*> layers_in_scope(const Architecture& architecture) const;

  torch::nn::Module& model_;
  const Schedule& schedule_;
  Host host_;

  // Settings: any thread, under mu_.
  mutable std::mutex mu_;
  StatsScope scope_;
  std::vector<std::string> watched_;
  WatchPerformance performance_;
  std::optional<std::vector<std::string>> patch_layers_;
  uint64_t version_ = 1;
  bool disabled_ = false;  // a failure turned collection off
  std::vector<std::shared_ptr<Metric>> metrics_;
  std::vector<std::shared_ptr<TensorInstrument>> tensor_instruments_;
  std::vector<FailedInstrument> failed_;

  // Training thread only.
  stats::StatsStore store_;
  uint64_t applied_version_ = 0;
  StatsScope applied_scope_ = StatsScope::kNone;  // settings as of the last batch boundary
  std::vector<std::string> applied_watched_;
  std::optional<std::vector<std::string>> applied_patch_layers_;
  std::optional<int64_t> epoch_;  // the epoch of the last batch seen
  bool sampling_parameters_ = false;
  bool dirty_ = false;   // collected or logged since the last publish
  bool frozen_ = false;  // adopt_frozen: the published view stays
  std::map<std::tuple<std::string, std::string, std::string, int64_t>, Reduction> reductions_;
  std::vector<HeldPoint> held_;
  std::shared_ptr<Staged> staged_;  // this batch's, from trace_keep()
  uint64_t staged_batches_ = 0;     // seeds each batch's histogram samples

  common::AtomicSharedPtr<const WatchSnapshot> published_;

  // Distributed runs: the other ranks' latest shards and the last own view
  // they are added to, under shards_mu_ (add_shard runs on any thread).
  void store_published(std::shared_ptr<const WatchSnapshot> own);
  void drop_shards(std::optional<int64_t> from_epoch);
  std::mutex shards_mu_;
  std::map<int, stats::Shard> shards_;
  stats::MergeMemo memo_;
  int64_t ranks_ = 1;
  std::shared_ptr<const WatchSnapshot> own_;
  uint64_t sequence_ = 0;       // of the views published (own and merged alike)
  bool shard_pending_ = false;  // a follower collected since take_shard()
};

}  // namespace nansense::detail
