#include "session/stats_collector.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <set>

#include "common/dtype.h"
#include "common/own_ops.h"
#include "nansense/errors.h"
#include "stats/patches.h"

namespace nansense {

std::string_view to_string(StatsScope scope) {
  switch (scope) {
    case StatsScope::kNone:
      return "none";
    case StatsScope::kWatched:
      return "watched";
    case StatsScope::kAll:
      return "all";
  }
  return "none";
}

std::string_view to_string(UpdateFrequency::Unit unit) {
  switch (unit) {
    case UpdateFrequency::Unit::kBatch:
      return "batch";
    case UpdateFrequency::Unit::kEpoch:
      return "epoch";
    case UpdateFrequency::Unit::kSeconds:
      return "seconds";
  }
  return "seconds";
}

namespace detail {

namespace {

void check_performance(const WatchPerformance& p) {
  if (p.channel_limit() < 1) {
    throw UsageError("watch performance: channel_limit must be >= 1 (channels kept per layer), got " +
                     std::to_string(p.channel_limit()));
  }
  if (p.histogram_sample() < 0) {
    throw UsageError(
        "watch performance: histogram_sample must be >= 0 (values a CPU histogram counts per tensor; "
        "0 counts every value), got " +
        std::to_string(p.histogram_sample()));
  }
  if (p.samples_per_channel() < 0 || p.samples_per_channel() > 64) {
    throw UsageError(
        "watch performance: samples_per_channel must be 0..64 (inputs a Min/Max gallery keeps per "
        "channel; 0 turns patches off), got " +
        std::to_string(p.samples_per_channel()));
  }
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "\"" : ", \"") + n + "\"";
  return out;
}

// Names of `layers` the architecture lacks; UsageError for an empty name.
std::vector<std::string> unknown_layers(const std::vector<std::string>& layers, const Architecture* architecture) {
  std::vector<std::string> unknown;
  for (const auto& name : layers) {
    if (name.empty()) throw UsageError("layer names must not be empty");
    if (architecture && !architecture->find(name)) unknown.push_back(name);
  }
  return unknown;
}

// What a metric or an instrument sees of one layer: its tensors of this
// batch (when captured) and its parameters with their gradients.
LayerContext layer_context(const LayerInfo& layer, const BatchPosition& pos,
                           const std::map<std::string, torch::Tensor>& activations,
                           const std::map<std::string, torch::Tensor>& gradients,
                           const std::map<std::string, torch::Tensor>& params) {
  LayerContext ctx;
  ctx.layer = layer.name;
  ctx.phase = pos.phase;
  ctx.position = pos;
  if (auto a = activations.find(layer.name); a != activations.end()) ctx.activation = a->second;
  if (auto g = gradients.find(layer.name); g != gradients.end()) ctx.gradient = g->second;
  for (const auto& name : layer.parameters) {
    auto p = params.find(name);
    if (p == params.end()) continue;
    ctx.weights.emplace(name, p->second);
    if (p->second.grad().defined()) ctx.weight_gradients.emplace(name, p->second.grad());
  }
  return ctx;
}

[[noreturn]] void refuse_unknown(const std::vector<std::string>& unknown, const Architecture& architecture) {
  std::string known;
  for (const auto& l : architecture.layers) known += (known.empty() ? "" : ", ") + l.name;
  throw UsageError(std::string("unknown layer") + (unknown.size() > 1 ? "s " : " ") + quoted_list(unknown) +
                   " (not in the architecture); layers: " + known);
}

}  // namespace

void StatsCollector::Reduction::add(double v) {
  if (count == 0) {
    min = max = v;
  } else {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  sum += v;
  last = v;
  ++count;
  if (metric->custom_reduce) values.push_back(v);
}

double StatsCollector::Reduction::value() const {
  if (metric->custom_reduce) return metric->custom_reduce(values);
  switch (metric->reduce) {
    case MetricReduce::kMean:
      return sum / static_cast<double>(count);
    case MetricReduce::kSum:
      return sum;
    case MetricReduce::kMin:
      return min;
    case MetricReduce::kMax:
      return max;
    case MetricReduce::kLast:
      return last;
  }
  return last;
}

StatsCollector::StatsCollector(torch::nn::Module& model, const Schedule& schedule, const StartOptions& options,
                               Host host)
    : model_(model),
      schedule_(schedule),
      host_(std::move(host)),
      scope_(options.stats_scope()),
      performance_(options.watch_performance()),
      store_((check_performance(options.watch_performance()), options.watch_performance())) {
  unknown_layers(options.watch(), nullptr);
  for (const auto& name : options.watch()) {
    if (std::find(watched_.begin(), watched_.end(), name) == watched_.end()) watched_.push_back(name);
  }
  applied_scope_ = scope_;
  applied_watched_ = watched_;
}

StatsScope StatsCollector::scope() const {
  std::lock_guard lock(mu_);
  return scope_;
}

void StatsCollector::set_scope(StatsScope scope) {
  {
    std::lock_guard lock(mu_);
    if (scope_ == scope) return;
    scope_ = scope;
    ++version_;
  }
  host_.changed();
}

std::vector<std::string> StatsCollector::watched() const {
  std::lock_guard lock(mu_);
  return watched_;
}

void StatsCollector::watch(const std::vector<std::string>& layers, const Architecture* architecture) {
  if (auto unknown = unknown_layers(layers, architecture); !unknown.empty()) refuse_unknown(unknown, *architecture);
  {
    std::lock_guard lock(mu_);
    for (const auto& name : layers) {
      if (std::find(watched_.begin(), watched_.end(), name) == watched_.end()) watched_.push_back(name);
    }
    ++version_;
  }
  host_.changed();
}

void StatsCollector::unwatch(const std::vector<std::string>& layers, const Architecture* architecture) {
  if (auto unknown = unknown_layers(layers, architecture); !unknown.empty()) refuse_unknown(unknown, *architecture);
  {
    std::lock_guard lock(mu_);
    std::erase_if(watched_,
                  [&](const std::string& w) { return std::find(layers.begin(), layers.end(), w) != layers.end(); });
    ++version_;
  }
  host_.changed();
}

WatchPerformance StatsCollector::performance() const {
  std::lock_guard lock(mu_);
  return performance_;
}

bool StatsCollector::set_performance(const WatchPerformance& performance) {
  check_performance(performance);
  {
    std::lock_guard lock(mu_);
    if (performance_ == performance) return false;
    performance_ = performance;
    ++version_;
  }
  host_.changed();
  return true;
}

std::optional<std::vector<std::string>> StatsCollector::patch_layers() const {
  std::lock_guard lock(mu_);
  return patch_layers_;
}

void StatsCollector::set_patch_layers(const std::optional<std::vector<std::string>>& layers,
                                      const Architecture* architecture) {
  if (layers) {
    if (auto unknown = unknown_layers(*layers, architecture); !unknown.empty()) refuse_unknown(unknown, *architecture);
  }
  {
    std::lock_guard lock(mu_);
    patch_layers_ = layers;
    ++version_;
  }
  host_.changed();
}

bool StatsCollector::collecting() const {
  std::lock_guard lock(mu_);
  return !disabled_ && (scope_ == StatsScope::kAll || (scope_ == StatsScope::kWatched && !watched_.empty()));
}

void StatsCollector::add_metric(const std::string& name, MetricFn fn, MetricOn on, MetricReduce reduce) {
  if (name.empty()) throw UsageError("watch_metric needs a name (its chart's title), got an empty one");
  if (!fn) throw UsageError("watch_metric(\"" + name + "\") needs a function, got an empty one");
  add_metric(
      name,
      [fn = std::move(fn)](const LayerContext& ctx) -> NamedValues {
        const std::optional<double> value = fn(ctx);
        if (!value) return {};
        return {{std::string(), *value}};
      },
      on, reduce, nullptr);
}

void StatsCollector::add_metric(const std::string& name, NamedMetricFn fn, MetricOn on, MetricReduce reduce,
                                CustomReduce custom_reduce) {
  if (name.empty()) throw UsageError("watch_metric needs a name (its chart's title), got an empty one");
  if (!fn) throw UsageError("watch_metric(\"" + name + "\") needs a function, got an empty one");
  if (custom_reduce && on != MetricOn::kEpoch) {
    throw UsageError("watch_metric(\"" + name + "\"): a reduce function applies to on=epoch metrics only");
  }
  auto metric = std::make_shared<Metric>();
  metric->name = name;
  metric->fn = std::move(fn);
  metric->on = on;
  metric->reduce = reduce;
  metric->custom_reduce = std::move(custom_reduce);
  std::lock_guard lock(mu_);
  for (const auto& m : metrics_) {
    if (m->name == name) throw UsageError("a metric named \"" + name + "\" is already watched; choose another name");
  }
  metrics_.push_back(std::move(metric));
}

void StatsCollector::add_tensor_instrument(const std::string& name, LayerTensorFn layer_fn, WeightTensorFn weight_fn) {
  const char* call = layer_fn || !weight_fn ? "watch_layer_tensor" : "watch_weight_tensor";
  if (name.empty()) throw UsageError(std::string(call) + " needs a name (its strip's label), got an empty one");
  if (!layer_fn && !weight_fn)
    throw UsageError(std::string(call) + "(\"" + name + "\") needs a function, got an empty one");
  auto instrument = std::make_shared<TensorInstrument>();
  instrument->name = name;
  instrument->layer_fn = std::move(layer_fn);
  instrument->weight_fn = std::move(weight_fn);
  std::lock_guard lock(mu_);
  for (const auto& t : tensor_instruments_) {
    if (t->name == name && bool(t->layer_fn) == bool(instrument->layer_fn)) {
      throw UsageError(std::string("a tensor instrument named \"") + name + "\" is already registered with " + call +
                       "; choose another name");
    }
  }
  tensor_instruments_.push_back(std::move(instrument));
}

std::vector<FailedInstrument> StatsCollector::instrument_errors() const {
  std::lock_guard lock(mu_);
  return failed_;
}

template <class F>
void StatsCollector::guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mu_);
      disabled_ = true;
    }
    host_.report_error(std::string("statistics disabled: ") + what + " failed: " + e.what());
  }
}

std::vector<std::string> StatsCollector::check_watched(const Architecture& architecture) {
  std::vector<std::string> dropped;
  std::lock_guard lock(mu_);
  std::erase_if(watched_, [&](const std::string& name) {
    if (architecture.find(name)) return false;
    dropped.push_back(name);
    return true;
  });
  if (!dropped.empty()) ++version_;
  return dropped;
}

void StatsCollector::apply_settings() {
  WatchPerformance performance;
  const StatsScope was_scope = applied_scope_;
  const std::vector<std::string> was_watched = applied_watched_;
  {
    std::lock_guard lock(mu_);
    if (version_ == applied_version_) return;
    applied_version_ = version_;
    applied_scope_ = scope_;
    applied_watched_ = watched_;
    applied_patch_layers_ = patch_layers_;
    performance = performance_;
  }
  if (store_.set_detail(performance)) {
    dirty_ = true;
    drop_shards(std::nullopt);  // the other ranks flush theirs at this boundary too
  }
  // Narrowing to the watched layers drops what the others collected.
  const bool narrowed =
      was_scope != StatsScope::kWatched || std::any_of(was_watched.begin(), was_watched.end(), [&](const auto& w) {
        return std::find(applied_watched_.begin(), applied_watched_.end(), w) == applied_watched_.end();
      });
  if (applied_scope_ == StatsScope::kWatched && narrowed) {
    store_.keep_only(applied_watched_);
    dirty_ = true;
  }
}

namespace {

bool in_scope(StatsScope scope, const std::vector<std::string>& watched, const LayerInfo& layer) {
  if (scope == StatsScope::kAll) return !layer.shape_op;  // a shape op repeats its input's values
  return scope == StatsScope::kWatched && std::find(watched.begin(), watched.end(), layer.name) != watched.end();
}

}  // namespace

const std::vector<std::string>& StatsCollector::patched_layers() const {
  return applied_patch_layers_ ? *applied_patch_layers_ : applied_watched_;
}

std::vector<const LayerInfo*> StatsCollector::layers_in_scope(const Architecture& architecture) const {
  std::vector<const LayerInfo*> out;
  for (const auto& layer : architecture.layers) {
    if (in_scope(applied_scope_, applied_watched_, layer)) out.push_back(&layer);
  }
  return out;
}

capture::TraceKeep StatsCollector::trace_keep() {
  auto staged = std::make_shared<Staged>();
  staged->detail = store_.detail();
  if (staged->detail.samples_per_channel() > 0) {
    staged->patched_layers = patched_layers();
  }
  {
    std::lock_guard lock(mu_);
    // Metrics and layer-tensor instruments read the whole tensors at the end.
    for (const auto& m : metrics_) staged->hold_all = staged->hold_all || !m->failed;
    for (const auto& t : tensor_instruments_) staged->hold_all = staged->hold_all || (t->layer_fn && !t->failed);
  }
  staged->seed = ++staged_batches_ << 24;
  staged_ = staged;
  capture::TraceKeep keep;
  keep.device = true;
  keep.device_layer = [scope = applied_scope_, watched = applied_watched_](const LayerInfo& layer) {
    return in_scope(scope, watched, layer);
  };
  keep.take = [staged](int layer, int64_t op_seq, const std::string& name, bool gradient, const torch::Tensor& t) {
    return staged->take(layer, op_seq, name, gradient, t);
  };
  return keep;
}

bool StatsCollector::Staged::take(int layer, int64_t op_seq, const std::string& name, bool gradient,
                                  const torch::Tensor& t) {
  if (hold_all || !t.defined() || !t.is_cpu() || t.layout() != torch::kStrided || t.scalar_type() != torch::kFloat ||
      t.numel() == 0) {
    return false;
  }
  // A patched layer's activation is folded now too, while it is in the
  // cache, but stays held: its patches read the maps of the samples that
  // enter the galleries at the batch's end.
  const bool patched =
      !gradient && std::find(patched_layers.begin(), patched_layers.end(), name) != patched_layers.end();
  try {
    // Called where no op is observed (the observer skips its consumers' own
    // ops; gradient hooks run unobserved), so no DisableRecordFunctionGuard.
    c10::InferenceMode no_autograd;
    uint64_t draw;
    {
      std::lock_guard lock(mu);
      draw = seed++;
    }
    // The pixel rankings' extremes of each map ride on the same pass (the
    // average rankings read every value again at the batch's end anyway).
    std::shared_ptr<stats::MapExtremesTable> maps;
    if (patched && t.dim() == 4 && !detail.average_patches() && !t.is_inference()) {
      maps = std::make_shared<stats::MapExtremesTable>();
      maps->channels = stats::PatchSettings::from(detail).tracked(t.size(1));
    }
    auto fold = stats::fold_on_cpu(t.contiguous(), detail, draw, maps.get());
    if (maps && !maps->filled()) maps.reset();
    const auto kind = gradient ? stats::Kind::kGradient : stats::Kind::kActivation;
    Entry entry{layer, op_seq, kind, std::move(fold), std::move(maps), t.const_data_ptr(), 0};
    if (entry.maps) entry.version = static_cast<int64_t>(t._version());
    std::lock_guard lock(mu);
    // Offered again (a second backward through the same graph): the last wins,
    // as a held tensor would.
    for (auto& e : entries) {
      if (e.layer == layer && e.kind == kind) {
        e = std::move(entry);
        return !patched;
      }
    }
    entries.push_back(std::move(entry));
    return !patched;
  } catch (const std::exception&) {
    return false;  // held instead, and folded at the batch's end
  }
}

void StatsCollector::begin_batch(const BatchPosition& pos, bool collect, const Architecture* architecture) {
  guarded("starting a batch", [&] {
    apply_settings();
    if (epoch_ && pos.epoch != *epoch_) close_epoch(*epoch_);
    epoch_ = pos.epoch;
    if (!collect || sampling_parameters_ || !store_.wants_parameter_sample(pos.epoch)) return;
    // The parameters of the layers in scope (all of them before the first
    // architecture is known).
    std::set<std::string> wanted;
    if (architecture) {
      for (const LayerInfo* layer : layers_in_scope(*architecture)) {
        wanted.insert(layer->parameters.begin(), layer->parameters.end());
      }
    }
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& p : model_.named_parameters()) {
      if (!architecture || wanted.count(p.key())) params.emplace_back(p.key(), p.value());
    }
    store_.begin_parameter_sample(pos.epoch, params);
    sampling_parameters_ = true;
  });
}

void StatsCollector::fold(const BatchPosition& pos, capture::TraceResult& trace) {
  guarded("folding a batch", [&] {
    if (!trace.architecture) return;
    const auto layers = layers_in_scope(*trace.architecture);
    if (layers.empty()) return;
    std::map<std::string, torch::Tensor> gradients;
    {
      std::lock_guard lock(trace.grad_mu);
      gradients = trace.device_gradients;
    }
    // The batch's observer may still be listening: folding is not the model's work.
    common::OwnOps own_ops;
    torch::NoGradGuard no_grad;
    // What the tracer handed over ahead, by layer index, where it is still
    // the layer's final output (a module call extended later replaces it).
    const auto staged = std::exchange(staged_, nullptr);
    std::map<std::pair<std::string, stats::Kind>, const Staged::Entry*> ahead;
    if (staged) {
      std::lock_guard lock(trace.grad_mu);
      std::lock_guard staged_lock(staged->mu);
      for (const auto& e : staged->entries) {
        const auto i = static_cast<size_t>(e.layer);
        if (i < trace.final_op.size() && trace.final_op[i] == e.op_seq) {
          ahead[{trace.layer_names[i], e.kind}] = &e;
        }
      }
    }
    // The extremes taken ahead of a held activation, while it still holds
    // the values they were taken from.
    const auto maps_ahead = [&](const std::string& layer, const torch::Tensor& held) -> const stats::MapExtremesTable* {
      const auto f = ahead.find({layer, stats::Kind::kActivation});
      if (f == ahead.end() || !f->second->maps || held.is_inference()) return nullptr;
      const auto& e = *f->second;
      if (held.const_data_ptr() != e.data || static_cast<int64_t>(held._version()) != e.version) return nullptr;
      return e.maps.get();
    };
    // Folded ahead, the tensor may still be held (a patched layer's
    // activation): the fold ahead is of that same tensor, it is not folded again.
    auto add = [&](const std::map<std::string, torch::Tensor>& tensors, const std::string& layer, stats::Kind kind) {
      if (auto f = ahead.find({layer, kind}); f != ahead.end()) {
        store_.add(layer, pos.phase, pos.epoch, kind, f->second->fold);
        return;
      }
      auto it = tensors.find(layer);
      if (it != tensors.end() && it->second.defined() && it->second.is_floating_point()) {
        store_.add(layer, pos.phase, pos.epoch, kind, it->second);
      }
    };
    // Min/Max patches rank the samples of the batch's first image-like
    // input (undefined when it has none: the buckets then say so).
    torch::Tensor image;
    for (const auto& name : trace.architecture->inputs) {
      auto it = trace.device_activations.find(name);
      if (it != trace.device_activations.end() && stats::PatchCollector::image_like(it->second)) {
        image = it->second;
        break;
      }
    }
    for (const LayerInfo* layer : layers) {
      add(trace.device_activations, layer->name, stats::Kind::kActivation);
      add(gradients, layer->name, stats::Kind::kGradient);
      // Galleries cost far more than the statistics: the watched layers
      // keep them (scope all collects the others' statistics only), or
      // set_patch_layers' list.
      const auto& kept = patched_layers();
      const bool patches = std::find(kept.begin(), kept.end(), layer->name) != kept.end();
      auto act = trace.device_activations.find(layer->name);
      if (patches && act != trace.device_activations.end() && act->second.defined() &&
          act->second.is_floating_point() && layer->role != LayerInfo::Role::kInput) {
        store_.add_gallery(layer->name, pos.phase, pos.epoch, pos.batch_idx, act->second, image,
                           maps_ahead(layer->name, act->second));
      }
    }
    store_.end_batch();
    dirty_ = true;
    shard_pending_ = true;
    run_metrics(pos, layers, trace, gradients);
  });
}

void StatsCollector::run_metrics(const BatchPosition& pos, const std::vector<const LayerInfo*>& layers,
                                 const capture::TraceResult& trace,
                                 const std::map<std::string, torch::Tensor>& gradients) {
  std::vector<std::shared_ptr<Metric>> metrics;
  {
    std::lock_guard lock(mu_);
    for (const auto& m : metrics_) {
      if (!m->failed) metrics.push_back(m);
    }
  }
  if (metrics.empty()) return;
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : model_.named_parameters()) params.emplace(p.key(), p.value());
  torch::NoGradGuard no_grad;
  for (const LayerInfo* layer : layers) {
    LayerContext ctx = layer_context(*layer, pos, trace.device_activations, gradients, params);
    for (const auto& metric : metrics) {
      if (metric->failed) continue;
      NamedValues values;
      try {
        values = metric->fn(ctx);
      } catch (const std::exception& e) {
        fail_metric(*metric, layer->name, e.what());
        continue;
      } catch (...) {
        fail_metric(*metric, layer->name, "it threw something that is not a std::exception");
        continue;
      }
      for (const auto& [key, value] : values) {
        const std::string series = key.empty() ? metric->name : metric->name + "/" + key;
        if (metric->on == MetricOn::kBatch) {
          log_point(series, layer->name, pos, value);
        } else {
          Reduction& r = reductions_[{series, layer->name, pos.phase, pos.epoch}];
          if (!r.metric) r.metric = metric;
          r.add(value);
        }
      }
    }
  }
}

void StatsCollector::run_tensor_instruments(const BatchPosition& pos, capture::TraceResult& trace, BatchSnapshot& snap,
                                            const std::function<capture::OptimizerView()>& live_optimizer) {
  std::vector<std::shared_ptr<TensorInstrument>> instruments;
  {
    std::lock_guard lock(mu_);
    for (const auto& t : tensor_instruments_) {
      if (!t->failed) instruments.push_back(t);
    }
  }
  if (instruments.empty() || !trace.architecture) return;
  guarded("running tensor instruments", [&] {
    const auto layers = layers_in_scope(*trace.architecture);
    if (layers.empty()) return;
    bool wants_weights = false;
    for (const auto& t : instruments) wants_weights |= bool(t->weight_fn);
    std::map<std::string, torch::Tensor> activations, gradients;
    {
      std::lock_guard lock(trace.grad_mu);
      activations = trace.activations;
      gradients = trace.gradients;
      for (const auto& [name, t] : trace.device_activations) activations[name] = t;
      for (const auto& [name, t] : trace.device_gradients) gradients[name] = t;
    }
    std::map<std::string, torch::Tensor> params;
    for (const auto& p : model_.named_parameters()) params.emplace(p.key(), p.value());
    const capture::OptimizerView optimizer =
        wants_weights && live_optimizer ? live_optimizer() : capture::OptimizerView{};
    common::OwnOps own_ops;
    torch::NoGradGuard no_grad;
    const auto cpu = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, false, true); };
    const auto call = [&](TensorInstrument& instrument, const std::string& where, auto&& fn) -> torch::Tensor {
      try {
        return fn();
      } catch (const std::exception& e) {
        fail_instrument(instrument.failed, instrument.layer_fn ? "layer-tensor" : "weight-tensor", instrument.name,
                        where, e.what());
      } catch (...) {
        fail_instrument(instrument.failed, instrument.layer_fn ? "layer-tensor" : "weight-tensor", instrument.name,
                        where, "it threw something that is not a std::exception");
      }
      return {};
    };
    const auto shape_of = [](const torch::Tensor& t) { return common::shape_text(t.sizes()); };
    for (const LayerInfo* layer : layers) {
      LayerContext ctx = layer_context(*layer, pos, activations, gradients, params);
      for (const auto& instrument : instruments) {
        if (instrument->failed) continue;
        const std::string where = "layer \"" + layer->name + "\"";
        if (instrument->layer_fn) {
          if (!ctx.activation.defined()) continue;
          torch::Tensor out = call(*instrument, where, [&] { return instrument->layer_fn(ctx); });
          if (!out.defined()) continue;
          if (out.sizes() != ctx.activation.sizes()) {
            fail_instrument(instrument->failed, "layer-tensor", instrument->name, where,
                            "it returned a " + shape_of(out) + " tensor; the activation is " +
                                shape_of(ctx.activation) + " and the output must have its shape");
            continue;
          }
          // Trimmed like the activations the snapshot kept.
          if (snap.trimmed() && out.dim() > 0 && out.size(0) == snap.batch_size)
            out = out.narrow(0, 0, snap.samples_kept);
          snap.custom_activations[layer->name][instrument->name] = cpu(out);
          continue;
        }
        for (const auto& name : layer->parameters) {
          auto p = params.find(name);
          if (p == params.end() || instrument->failed) continue;
          WeightContext w;
          w.layer = layer->name;
          w.parameter = name;
          w.phase = pos.phase;
          w.position = pos;
          w.weight = p->second;
          w.gradient = p->second.grad();
          if (auto st = optimizer.state.find(name); st != optimizer.state.end()) w.optimizer_state = st->second;
          if (auto hp = optimizer.hyperparams.find(name); hp != optimizer.hyperparams.end()) w.hyperparams = hp->second;
          const std::string on = "parameter \"" + name + "\"";
          torch::Tensor out = call(*instrument, on, [&] { return instrument->weight_fn(w); });
          if (!out.defined()) continue;
          if (out.sizes() != w.weight.sizes()) {
            fail_instrument(instrument->failed, "weight-tensor", instrument->name, on,
                            "it returned a " + shape_of(out) + " tensor; the parameter is " + shape_of(w.weight) +
                                " and the output must have its shape");
            continue;
          }
          snap.custom_weight_tensors[name][instrument->name] = cpu(out);
        }
      }
    }
  });
}

void StatsCollector::fail_instrument(std::atomic<bool>& failed, const std::string& what, const std::string& name,
                                     const std::string& where, const std::string& error) {
  failed = true;
  {
    std::lock_guard lock(mu_);
    failed_.push_back({name, "on " + where + ": " + error});
  }
  host_.report_error(what + " instrument \"" + name + "\" failed on " + where + " and is disabled: " + error);
}

void StatsCollector::fail_metric(Metric& metric, const std::string& layer, const std::string& error) {
  metric.failed = true;
  {
    std::lock_guard lock(mu_);
    failed_.push_back({metric.name, "on layer \"" + layer + "\": " + error});
  }
  host_.report_error("metric instrument \"" + metric.name + "\" threw on layer \"" + layer +
                     "\" and is disabled: " + error);
}

void StatsCollector::end_batch(const Architecture* architecture) {
  if (!sampling_parameters_) return;
  sampling_parameters_ = false;
  guarded("sampling parameters", [&] {
    std::map<std::string, std::string> owner;
    if (architecture) {
      for (const auto& layer : architecture->layers) {
        for (const auto& p : layer.parameters) owner.emplace(p, layer.name);
      }
    }
    store_.finish_parameter_sample(owner);
    dirty_ = true;
  });
}

void StatsCollector::log_point(const std::string& name, const std::string& layer, const BatchPosition& pos,
                               double value) {
  const auto count = schedule_.phase_count(pos.phase);
  if (!count || *count <= 0) {
    held_.push_back({name, layer, pos.phase, pos.epoch, pos.batch_idx, value});
    return;
  }
  store_.log_scalar(name, layer, pos.phase, pos.epoch, pos.batch_idx,
                    static_cast<double>(pos.epoch) + static_cast<double>(pos.batch_idx) / static_cast<double>(*count),
                    value);
  dirty_ = true;
}

void StatsCollector::log_scalar(const std::string& name, double value, const BatchPosition& pos) {
  if (name.empty()) throw UsageError("log_scalar needs a name (its chart's title), got an empty one");
  guarded("logging a scalar", [&] { log_point(name, "", pos, value); });
}

void StatsCollector::forget_scalars_at(const BatchPosition& pos) {
  guarded("forgetting a re-run batch's scalars", [&] {
    held_.erase(std::remove_if(held_.begin(), held_.end(),
                               [&](const HeldPoint& p) {
                                 return p.phase == pos.phase && p.epoch == pos.epoch && p.batch == pos.batch_idx;
                               }),
                held_.end());
    store_.forget_points_at(pos.phase, pos.epoch, pos.batch_idx);
    dirty_ = true;
  });
}

void StatsCollector::end_phase(const std::string& phase, int64_t count) {
  if (held_.empty()) return;
  guarded("logging a scalar", [&] {
    int64_t length = schedule_.phase_count(phase).value_or(count);
    for (const auto& p : held_) {
      if (p.phase == phase) length = std::max(length, p.batch + 1);
    }
    std::vector<HeldPoint> still;
    for (auto& p : held_) {
      if (p.phase != phase) {
        still.push_back(std::move(p));
        continue;
      }
      store_.log_scalar(p.name, p.layer, p.phase, p.epoch, p.batch,
                        static_cast<double>(p.epoch) + static_cast<double>(p.batch) / static_cast<double>(length),
                        p.value);
      dirty_ = true;
    }
    held_ = std::move(still);
  });
}

void StatsCollector::close_epoch(int64_t epoch) {
  for (auto it = reductions_.begin(); it != reductions_.end();) {
    const auto& [name, layer, phase, e] = it->first;
    if (e > epoch) {
      ++it;
      continue;
    }
    double value = std::numeric_limits<double>::quiet_NaN();
    try {
      value = it->second.value();
    } catch (const std::exception& error) {
      fail_metric(*it->second.metric, layer, std::string("its reduce raised: ") + error.what());
      it = reductions_.erase(it);
      continue;
    }
    store_.log_scalar(name, layer, phase, e, std::nullopt, static_cast<double>(e), value);
    dirty_ = true;
    it = reductions_.erase(it);
  }
  publish();
}

void StatsCollector::rewind(int64_t epoch) {
  guarded("rewinding", [&] {
    store_.drop_from_epoch(epoch);
    std::erase_if(held_, [&](const HeldPoint& p) { return p.epoch >= epoch; });
    std::erase_if(reductions_, [&](const auto& entry) { return std::get<3>(entry.first) >= epoch; });
    epoch_.reset();
    sampling_parameters_ = false;
    dirty_ = true;
    shard_pending_ = true;
    drop_shards(epoch);
    publish();
  });
}

void StatsCollector::adopt_frozen(std::shared_ptr<const WatchSnapshot> view) {
  frozen_ = true;
  dirty_ = false;
  published_.store(std::move(view));
  host_.changed();
}

void StatsCollector::publish() {
  if (!dirty_ || frozen_) return;
  dirty_ = false;
  guarded("publishing", [&] { store_published(store_.publish()); });
  host_.changed();
}

void StatsCollector::store_published(std::shared_ptr<const WatchSnapshot> own) {
  std::lock_guard lock(shards_mu_);
  own_ = own;
  sequence_ = std::max(sequence_ + 1, own->sequence);
  if (shards_.empty() && own->sequence == sequence_) {
    published_.store(std::move(own));
  } else {
    published_.store(stats::with_shards(*own, shards_, ranks_, sequence_, memo_));
  }
}

void StatsCollector::drop_shards(std::optional<int64_t> from_epoch) {
  std::lock_guard lock(shards_mu_);
  if (!from_epoch) {
    for (auto& [_, shard] : shards_) shard.clear();
    memo_.clear();
    return;
  }
  for (auto& [_, shard] : shards_)
    std::erase_if(shard, [&](const auto& e) { return std::get<2>(e.first) >= *from_epoch; });
  std::erase_if(memo_, [&](const auto& e) { return std::get<2>(e.first.first) >= *from_epoch; });
}

std::string StatsCollector::take_shard() {
  if (!shard_pending_ || frozen_) return {};
  shard_pending_ = false;
  std::string out;
  guarded("sending the statistics to rank 0", [&] {
    auto own = store_.publish();
    out = stats::encode_shard(*own);
    dirty_ = false;
    store_published(std::move(own));
  });
  return out;
}

void StatsCollector::add_shard(int rank, int64_t ranks, const std::string& text) {
  auto buckets = stats::decode_shard(text);
  {
    std::lock_guard lock(shards_mu_);
    ranks_ = std::max<int64_t>(ranks_, ranks);
    auto& shard = shards_[rank];
    for (auto& b : buckets) {
      stats::BucketKey key{b.layer, b.phase, b.epoch};
      shard[key] = std::move(b);
    }
    if (!own_) return;
    sequence_ += 1;
    published_.store(stats::with_shards(*own_, shards_, ranks_, sequence_, memo_));
  }
  host_.changed();
}

void StatsCollector::finish() {
  if (frozen_) return;
  guarded("finishing", [&] {
    for (const auto& phase : schedule_.phase_order()) end_phase(phase, 0);
    if (epoch_) {
      close_epoch(*epoch_);
    } else {
      publish();
    }
  });
}

}  // namespace detail
}  // namespace nansense
