#include "stats/stats_store.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

#include "common/host_copy.h"
#include "common/own_ops.h"
#include "stats/patches.h"

namespace nansense::stats {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using Key = std::tuple<std::string, std::string, int64_t>;

int64_t tracked_channels(const Detail& detail, int64_t channels) {
  if (!detail.channel_limit_enabled()) return channels;
  return std::min(channels, std::max<int64_t>(1, detail.channel_limit()));
}

// Values of a small CPU tensor as doubles (MPS accumulates in float32).
std::vector<double> doubles(const torch::Tensor& cpu) {
  auto d = cpu.to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// ranges[c] (made on first use) widened by r.
void merge_range(std::vector<ChannelRange>& ranges, int64_t c, const ChannelRange& r) {
  if (static_cast<int64_t>(ranges.size()) <= c) ranges.resize(static_cast<size_t>(c) + 1);
  ranges[static_cast<size_t>(c)].widen(r);
}

std::vector<torch::Tensor> slice(const std::vector<torch::Tensor>& all, size_t begin, size_t count) {
  return std::vector<torch::Tensor>(all.begin() + begin, all.begin() + begin + count);
}

}  // namespace

// ---------------------------------------------------------------------------
// TensorAccumulator

struct TensorAccumulator::State {
  explicit State(Detail d) : detail(std::move(d)) {}
  Detail detail;
  bool started = false;  // a non-empty tensor fixed the device and channels
  bool per_channel = false;
  int64_t channels = 0;  // dim-1 size while per-channel tracking is on
  int64_t tracked = 0;   // channels with a row of their own
  // [sum, sum of squares, min, -max] of the finite values in the accumulator
  // dtype (the extremes both fold with minimum), and views of its halves.
  torch::Tensor scalars, sums, extremes;
  // Counts over the kSlots slots, flat. Per channel: one row per tracked
  // channel, then (when some are not tracked) one row for all the others, so
  // a single index_add_ counts every element and the rows sum to the layer.
  // Without per-channel tracking: one row, the layer.
  torch::Tensor slots;
  torch::Tensor row_offsets;  // [channels]: each channel's row * kSlots
  torch::Tensor one;          // [1] int64, expanded as the counts' source
  // The CPU path's exact counts (its histogram may be sampled), and per
  // tracked channel its extremes for dead-channel detection; the device path
  // counts every value into the slots and keeps neither.
  std::optional<ExactFold> exact;
  std::vector<ChannelRange> ranges;
  int64_t adds = 0;  // tensors folded in: seeds the histogram's sample
  // The dtype of the latest tensor folded in, before any widening.
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  // Fixes the device and the channels (dim 1 when `channels` > 0).
  void start(const torch::Device& device, int64_t dim1) {
    started = true;
    // Made on the device: a host->device copy would be a sync on most of them.
    const auto counts = torch::TensorOptions().dtype(torch::kLong).device(device);
    scalars = torch::zeros({4}, torch::TensorOptions().dtype(common::accumulator_dtype(device)).device(device));
    sums = scalars.narrow(0, 0, 2);
    extremes = scalars.narrow(0, 2, 2);
    extremes.fill_(kInf);
    one = torch::ones({1}, counts);
    int64_t rows = 1;
    if (dim1 > 0) {
      per_channel = true;
      channels = dim1;
      tracked = tracked_channels(detail, channels);
      rows = tracked < channels ? tracked + 1 : tracked;
      row_offsets = torch::arange(channels, counts).clamp_max_(tracked).mul_(kSlots);
    }
    slots = torch::zeros({rows * kSlots}, counts);
  }

  // The device path's state moved to the CPU (a CPU fold is merged there).
  void move_to_cpu() {
    scalars = scalars.to(torch::kCPU, torch::kDouble);
    sums = scalars.narrow(0, 0, 2);
    extremes = scalars.narrow(0, 2, 2);
    slots = slots.cpu();
    one = one.cpu();
    if (row_offsets.defined()) row_offsets = row_offsets.cpu();
  }

  // Counts of values the op path binned (every one of them, [rows *
  // kSlots] on the CPU) into the exact counts and the channel ranges the
  // CPU path keeps: a stream that saw both kinds of tensor stays exact.
  void absorb_counts(const torch::Tensor& counts) {
    const auto flat = counts.contiguous();
    const int64_t* c = flat.data_ptr<int64_t>();
    const int64_t rows = flat.numel() / kSlots;
    if (!exact) exact.emplace();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t* row = c + r * kSlots;
      for (int b = 0; b < kBins; ++b) exact->n += row[b];
      exact->nan += row[kNanSlot];
      exact->pos_inf += row[kPosInfSlot];
      exact->neg_inf += row[kNegInfSlot];
    }
    if (!per_channel) return;
    if (static_cast<int64_t>(ranges.size()) < tracked) ranges.resize(static_cast<size_t>(tracked));
    for (int64_t ch = 0; ch < tracked && ch < rows; ++ch) {
      const int64_t* row = c + ch * kSlots;
      ChannelRange r;
      for (int k = 0; k < kSlots; ++k) r.seen += row[k];
      if (r.seen == 0) continue;
      r.nonfinite = row[kNanSlot] + row[kPosInfSlot] + row[kNegInfSlot] > 0;
      // In the zero band or not: one value of the kind stands for them all.
      r.min = r.max = row[kZeroBin] + row[kNanSlot] + row[kPosInfSlot] + row[kNegInfSlot] == r.seen ? 0.0 : 1.0;
      merge_range(ranges, ch, r);
    }
  }

  // For good: token counts change dim 1 from batch to batch, and rows of
  // different widths cannot be summed into one channel's histogram.
  void stop_per_channel() {
    slots = slots.view({-1, kSlots}).sum(0);
    row_offsets = torch::Tensor();
    ranges.clear();
    per_channel = false;
    channels = tracked = 0;
  }
};

TensorAccumulator::TensorAccumulator(Detail detail) : state_(std::make_shared<State>(std::move(detail))) {}

void TensorAccumulator::add(const torch::Tensor& t) {
  if (collapsed() || !t.defined() || t.numel() == 0 || t.is_complex()) return;
  auto& s = *state_;
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  auto x = t;
  if (!s.started) {
    s.start(x.device(), x.dim() >= 2 ? x.size(1) : 0);
  } else {
    // A model moved between devices: follow the accumulator's device.
    if (x.device() != s.scalars.device()) x = x.to(s.scalars.device());
    if (s.per_channel && (x.dim() < 2 || x.size(1) != s.channels)) s.stop_per_channel();
  }
  // Half precision is widened once; float64 keeps its own.
  if (x.scalar_type() != torch::kDouble && x.scalar_type() != torch::kFloat) x = x.to(torch::kFloat);

  // On the CPU hand-written passes do what the ops below do, far faster
  // (bench/stats): an exact pass over every value and a histogram of at most
  // histogram_sample of them; the CPU has no kernel launches to batch.
  if (x.is_cpu() && x.scalar_type() == torch::kFloat) {
    auto fold = fold_on_cpu(x.contiguous(), s.detail, static_cast<uint64_t>(s.adds++));
    fold.dtype = t.scalar_type();
    add(fold);
    return;
  }
  s.dtype = t.scalar_type();

  // Counts. torch::bincount would count the slots too, but on CUDA it reads
  // the index range back to size its result (a sync); index_add_ into the
  // running counts, whose size is known, does it on the device.
  auto slot = slot_index(x);
  if (s.per_channel) {
    std::vector<int64_t> shape(slot.dim(), 1);
    shape[1] = s.channels;
    slot.add_(s.row_offsets.view(shape));
  }
  // After CPU folds (a float64 tensor in a float32 stream, on the CPU): this
  // tensor's counts join their exact counts.
  const auto before = s.exact ? s.slots.clone() : torch::Tensor();
  s.slots.index_add_(0, slot.view({-1}), s.one.expand({slot.numel()}));
  if (before.defined()) s.absorb_counts(s.slots - before);

  // Scalars of the finite values, summed in float64 on the device.
  auto d = x.to(s.scalars.scalar_type());
  auto finite = torch::nan_to_num(d, 0.0, 0.0, 0.0);
  s.sums.add_(torch::stack({finite.sum(), torch::linalg_vector_norm(finite, 2).square()}));
  auto batch_extremes = torch::stack(
      {torch::nan_to_num(d, kInf, kInf, kInf).amin(), torch::nan_to_num(d, -kInf, -kInf, -kInf).amax().neg()});
  at::minimum_out(s.extremes, s.extremes, batch_extremes);
}

CpuFold fold_on_cpu(const torch::Tensor& x, const Detail& detail, uint64_t seed, MapExtremesTable* maps) {
  CpuFold f;
  f.numel = x.numel();
  if (f.numel == 0) return f;
  f.channels = x.dim() >= 2 ? x.size(1) : 0;
  const int64_t channels = std::max<int64_t>(1, f.channels);
  const int64_t outer = f.channels > 0 ? x.size(0) : 1;
  const int64_t inner = f.numel / (outer * channels);
  const float* values = x.data_ptr<float>();
  f.tracked = f.channels > 0 ? tracked_channels(detail, f.channels) : 0;
  const int64_t rows = f.channels == 0 ? 1 : f.tracked < f.channels ? f.tracked + 1 : f.tracked;
  f.slots.assign(static_cast<size_t>(rows * kSlots), 0);

  // The histogram from at most histogram_sample values: runs of 16 (a cache
  // line of floats), one at a random place in each equal window, drawn anew
  // for every tensor.
  constexpr int64_t kRun = 16;
  int64_t stride = 1;
  const int64_t budget = detail.histogram_sample();
  if (budget > 0 && f.numel > budget) {
    const int64_t runs = std::max<int64_t>(1, budget / kRun);
    stride = std::max(kRun, (f.numel + runs - 1) / runs);
  }
  std::vector<int64_t> row_offset;
  if (f.channels > 0) {
    row_offset.resize(static_cast<size_t>(f.channels));
    for (int64_t c = 0; c < f.channels; ++c) row_offset[static_cast<size_t>(c)] = std::min(c, f.tracked) * kSlots;
  }
  // One pass: counts, sums and extremes of every value exactly, each tracked
  // channel's extremes (a dead channel is exact too), and the histogram's
  // sample binned as the pass goes by.
  f.ranges.resize(static_cast<size_t>(f.tracked));
  SampledBins bins;
  bins.row_offset = f.channels > 0 ? row_offset.data() : nullptr;
  bins.stride = stride;
  bins.run = kRun;
  bins.seed = seed;
  bins.slots = f.slots.data();
  bins.slot_count = static_cast<int64_t>(f.slots.size());
  fold_exact_cpu(values, outer, channels, inner, f.tracked, f.tracked > 0 ? f.ranges.data() : nullptr, f.exact, &bins,
                 maps);
  return f;
}

void TensorAccumulator::add(const CpuFold& f) {
  if (collapsed() || f.numel == 0) return;
  auto& s = *state_;
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  if (!s.started) s.start(torch::kCPU, f.channels);
  if (!s.scalars.is_cpu()) s.move_to_cpu();
  s.dtype = f.dtype;
  // What the op path counted so far (every value) becomes exact counts.
  if (!s.exact) s.absorb_counts(s.slots);
  const int64_t fold_rows = static_cast<int64_t>(f.slots.size()) / kSlots;
  if (s.per_channel && (f.channels != s.channels || fold_rows * kSlots != s.slots.numel())) s.stop_per_channel();
  // Counts: row by row while the channels match, else the fold's rows
  // summed into the accumulator's one row.
  int64_t* slots = s.slots.data_ptr<int64_t>();
  if (s.per_channel) {
    for (size_t k = 0; k < f.slots.size(); ++k) slots[k] += f.slots[k];
    for (int64_t c = 0; c < s.tracked; ++c) merge_range(s.ranges, c, f.ranges[static_cast<size_t>(c)]);
  } else {
    for (int64_t r = 0; r < fold_rows; ++r) {
      for (int k = 0; k < kSlots; ++k) slots[k] += f.slots[static_cast<size_t>(r * kSlots + k)];
    }
  }
  auto& e = *s.exact;
  e.n += f.exact.n;
  e.nan += f.exact.nan;
  e.pos_inf += f.exact.pos_inf;
  e.neg_inf += f.exact.neg_inf;
  // scalars: [sum, sum of squares, min, -max], as the device path keeps them.
  auto scalars = s.scalars.accessor<double, 1>();
  scalars[0] += f.exact.sum;
  scalars[1] += f.exact.sum_sq;
  scalars[2] = std::min(scalars[2], f.exact.min);
  scalars[3] = std::min(scalars[3], -f.exact.max);
}

void TensorAccumulator::collapse() {
  if (collapsed()) return;
  collapse(common::copy_to_host(buffers()));
}

void TensorAccumulator::collapse(const std::vector<torch::Tensor>& cpu_buffers) {
  if (collapsed()) return;
  collapsed_ = CollapsedStats(describe(cpu_buffers, /*bins=*/false));
  state_.reset();
}

bool TensorAccumulator::collapsed() const { return !state_; }

size_t TensorAccumulator::bytes() const {
  if (collapsed()) return 0;
  const auto& s = *state_;
  size_t total = 0;
  for (const auto* t : {&s.scalars, &s.slots, &s.row_offsets, &s.one}) {
    if (t->defined()) total += t->nbytes();
  }
  return total;
}

std::vector<torch::Tensor> TensorAccumulator::buffers() const {
  if (collapsed()) return {};
  const auto& s = *state_;
  if (!s.started) return {};
  return {s.scalars, s.slots};
}

TensorStatsSnapshot TensorAccumulator::view(const std::vector<torch::Tensor>& cpu_buffers) const {
  if (collapsed()) return collapsed_.expand();
  return describe(cpu_buffers, /*bins=*/true);
}

TensorStatsSnapshot TensorAccumulator::describe(const std::vector<torch::Tensor>& cpu_buffers, bool bins) const {
  const auto& s = *state_;
  TensorStatsSnapshot v;
  v.dtype = s.dtype;
  if (cpu_buffers.size() < 2) return v;
  const auto scalars = doubles(cpu_buffers[0]);
  const auto counts = cpu_buffers[1].contiguous();
  const int64_t* rows = counts.data_ptr<int64_t>();
  const int64_t n_rows = counts.numel() / kSlots;
  // The layer is the sum of the rows.
  std::vector<int64_t> layer(rows, rows + kSlots);
  for (int64_t r = 1; r < n_rows; ++r) {
    for (int k = 0; k < kSlots; ++k) layer[k] += rows[r * kSlots + k];
  }
  int64_t binned = 0;
  for (int k = 0; k < kSlots; ++k) binned += layer[k];
  if (s.exact) {
    v.n = s.exact->n;
    v.nan = s.exact->nan;
    v.pos_inf = s.exact->pos_inf;
    v.neg_inf = s.exact->neg_inf;
  } else {
    v.nan = layer[kNanSlot];
    v.pos_inf = layer[kPosInfSlot];
    v.neg_inf = layer[kNegInfSlot];
    for (int b = 0; b < kBins; ++b) v.n += layer[b];
  }
  v.binned = binned;
  v.sum = scalars[0];
  v.sum_sq = scalars[1];
  if (v.n > 0) {
    v.min = scalars[2];
    v.max = -scalars[3];
  }
  v.hist = hist_from_slots(layer.data());
  v.median = median_from_hist(v.hist);
  if (s.per_channel) {
    v.channels = s.channels;
    int64_t dead = 0;
    for (int64_t c = 0; c < s.tracked; ++c) {
      const int64_t* row = rows + c * kSlots;
      bool is_dead = false;
      if (!s.ranges.empty()) {
        // Exact, from every value (the bins may be a sample).
        is_dead = s.ranges[static_cast<size_t>(c)].zero_band();
      } else {
        int64_t seen = 0;
        for (int k = 0; k < kSlots; ++k) seen += row[k];
        is_dead = seen > 0 && row[kZeroBin] == seen;
      }
      if (is_dead) {
        ++dead;
        if (bins) v.dead_channels.push_back(c);
      }
      if (bins) v.channel_hists.push_back(hist_from_slots(row));
    }
    v.dead_count = dead;
  }
  if (!bins) {
    v.hist.clear();
    v.binned = 0;
  }
  return v;
}

// ---------------------------------------------------------------------------
// StatsStore

struct StatsStore::Bucket {
  Key key;
  int64_t batches = 0;
  std::optional<TensorAccumulator> activation;
  std::optional<TensorAccumulator> gradient;
  // Min/Max patches of the activation while this is its stream's newest
  // epoch, and why there are none when none could be collected.
  std::unique_ptr<PatchCollector> gallery;
  std::optional<std::string> patches_note;
  bool touched = false;    // in touched_
  bool queued = false;     // in collapse_queue_
  bool collapsed = false;  // its epoch is over: no more adds

  std::vector<TensorAccumulator*> accumulators() {
    std::vector<TensorAccumulator*> out;
    if (activation) out.push_back(&*activation);
    if (gradient) out.push_back(&*gradient);
    return out;
  }
};

struct StatsStore::Pending {
  int64_t epoch = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;  // the live parameters (their .grad() too)
  std::vector<torch::Tensor> before;  // clones on their device, before the step
};

StatsStore::StatsStore(Detail detail) : detail_(std::move(detail)) {}

bool StatsStore::set_detail(const Detail& detail) {
  if (detail == detail_) return false;
  detail_ = detail;
  // Only the layer histograms depend on the detail: logged scalars, metric
  // series and parameter samples stay (a loss curve must survive a setting).
  buckets_.clear();
  touched_.clear();
  collapse_queue_.clear();
  return true;
}

bool StatsStore::live(const std::shared_ptr<Bucket>& bucket) const {
  auto it = buckets_.find(bucket->key);
  return it != buckets_.end() && it->second == bucket;
}

TensorAccumulator* StatsStore::accumulator(const std::string& layer, const std::string& phase, int64_t epoch,
                                           Kind kind) {
  auto& bucket = bucket_for(layer, phase, epoch);
  if (bucket->collapsed) return nullptr;
  auto& acc = kind == Kind::kActivation ? bucket->activation : bucket->gradient;
  if (!acc) acc.emplace(detail_);
  touch(bucket);
  return &*acc;
}

void StatsStore::add(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind,
                     const torch::Tensor& t) {
  if (!t.defined()) return;
  if (auto* acc = accumulator(layer, phase, epoch, kind)) acc->add(t);
}

void StatsStore::add(const std::string& layer, const std::string& phase, int64_t epoch, Kind kind,
                     const CpuFold& fold) {
  if (auto* acc = accumulator(layer, phase, epoch, kind)) acc->add(fold);
}

void StatsStore::touch(const std::shared_ptr<Bucket>& bucket) {
  if (!bucket->touched) {
    bucket->touched = true;
    touched_.push_back(bucket);
  }
}

void StatsStore::add_gallery(const std::string& layer, const std::string& phase, int64_t epoch, int64_t batch,
                             const torch::Tensor& activation, const torch::Tensor& input,
                             const MapExtremesTable* maps) {
  if (detail_.samples_per_channel() <= 0 || !activation.defined() || activation.numel() == 0) return;
  auto& bucket = bucket_for(layer, phase, epoch);
  if (bucket->collapsed || bucket->patches_note) return;
  if (!input.defined()) {
    bucket->patches_note = "Min/Max patches need an image-like model input ([batch, 1 or 3, height, width])";
    return;
  }
  if (!bucket->gallery) bucket->gallery = std::make_unique<PatchCollector>(PatchSettings::from(detail_));
  bucket->gallery->add(activation, input, batch, maps);
  if (bucket->gallery->unsupported()) {
    bucket->patches_note = *bucket->gallery->unsupported();
    bucket->gallery.reset();
  }
  touch(bucket);
}

std::shared_ptr<StatsStore::Bucket>& StatsStore::bucket_for(const std::string& layer, const std::string& phase,
                                                            int64_t epoch) {
  Key key{layer, phase, epoch};
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    auto bucket = std::make_shared<Bucket>();
    bucket->key = key;
    it = buckets_.emplace(key, bucket).first;
    auto queue = [this](const std::shared_ptr<Bucket>& b) {
      if (b->queued || b->collapsed) return;
      b->queued = true;
      collapse_queue_.push_back(b);
    };
    // Only the newest epoch of (layer, phase) keeps its bins. Every older
    // one was queued when its successor came, so the neighbours suffice.
    auto same_stream = [&](auto o) { return std::get<0>(o->first) == layer && std::get<1>(o->first) == phase; };
    if (it != buckets_.begin() && same_stream(std::prev(it))) queue(std::prev(it)->second);
    if (std::next(it) != buckets_.end() && same_stream(std::next(it))) queue(bucket);
  }
  return it->second;
}

void StatsStore::end_batch() {
  for (auto& b : touched_) {
    ++b->batches;
    b->touched = false;
  }
  touched_.clear();
  collapse_queued();
}

void StatsStore::collapse_queued() {
  if (collapse_queue_.empty()) return;
  std::vector<TensorAccumulator*> accs;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<torch::Tensor> all;
  for (auto& b : collapse_queue_) {
    b->queued = false;
    if (!live(b) || b->collapsed) continue;
    for (auto* acc : b->accumulators()) {
      auto bufs = acc->buffers();
      accs.push_back(acc);
      ranges.emplace_back(all.size(), bufs.size());
      all.insert(all.end(), bufs.begin(), bufs.end());
    }
    b->collapsed = true;
    b->gallery.reset();  // an older epoch keeps no patches
  }
  collapse_queue_.clear();
  auto cpu = common::copy_to_host(all);
  for (size_t i = 0; i < accs.size(); ++i) accs[i]->collapse(slice(cpu, ranges[i].first, ranges[i].second));
}

bool StatsStore::wants_parameter_sample(int64_t epoch) const {
  if (pending_ && pending_->epoch == epoch) return false;
  return sampled_epochs_.count(epoch) == 0;
}

void StatsStore::begin_parameter_sample(int64_t epoch,
                                        const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  auto pending = std::make_shared<Pending>();
  pending->epoch = epoch;
  for (const auto& [name, p] : params) {
    if (!p.defined() || p.numel() == 0 || p.is_complex()) continue;
    pending->names.push_back(name);
    pending->params.push_back(p);
    pending->before.push_back(p.detach().clone());
  }
  pending_ = std::move(pending);
}

void StatsStore::finish_parameter_sample(const std::map<std::string, std::string>& owner_of) {
  if (!pending_) return;
  auto pending = std::move(pending_);
  pending_.reset();
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  // Per parameter, on its device: [norm, mean, std, min, max] of the value,
  // the same of the gradient (zeros without one), ||w - w before||, ||w before||.
  auto summary = [](const torch::Tensor& v, std::vector<torch::Tensor>& out) {
    out.insert(out.end(), {torch::linalg_vector_norm(v, 2), v.mean(), v.std(/*unbiased=*/false), v.min(), v.max()});
  };
  std::vector<torch::Tensor> rows;
  std::vector<bool> has_grad;
  for (size_t i = 0; i < pending->params.size(); ++i) {
    const auto& p = pending->params[i];
    const auto acc = common::accumulator_dtype(p.device());
    auto w = p.detach().to(acc);
    auto before = pending->before[i].to(acc);
    std::vector<torch::Tensor> parts;
    summary(w, parts);
    const auto& g = p.grad();
    has_grad.push_back(g.defined() && g.numel() == p.numel());
    if (has_grad.back()) {
      summary(g.detach().to(acc).to(w.device()), parts);
    } else {
      for (int k = 0; k < 5; ++k) parts.push_back(torch::zeros({}, w.options()));
    }
    parts.push_back(torch::linalg_vector_norm(w - before, 2));
    parts.push_back(torch::linalg_vector_norm(before, 2));
    parts.push_back(w.numel() > 0 ? w.flatten().median() : torch::full({}, std::nan(""), w.options()));
    rows.push_back(torch::stack(parts));
  }
  pending->before.clear();  // the clones are freed before the copy back
  const auto cpu = common::copy_to_host(rows);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const auto r = doubles(cpu[i]);
    ParameterSample sample;
    sample.epoch = pending->epoch;
    sample.value_norm = r[0];
    sample.mean = r[1];
    sample.std = r[2];
    sample.min = r[3];
    sample.max = r[4];
    if (has_grad[i]) {
      sample.grad_norm = r[5];
      sample.grad_mean = r[6];
      sample.grad_std = r[7];
      sample.grad_min = r[8];
      sample.grad_max = r[9];
    }
    if (r[11] != 0) sample.update_ratio = r[10] / r[11];
    if (!std::isnan(r[12])) sample.median = r[12];
    auto& samples = parameters_[pending->names[i]];
    auto at = std::lower_bound(samples.begin(), samples.end(), sample.epoch,
                               [](const ParameterSample& s, int64_t e) { return s.epoch < e; });
    if (at != samples.end() && at->epoch == sample.epoch) {
      *at = sample;
    } else {
      samples.insert(at, sample);
    }
    auto owner = owner_of.find(pending->names[i]);
    if (owner != owner_of.end()) owner_[pending->names[i]] = owner->second;
  }
  sampled_epochs_.insert(pending->epoch);
}

void StatsStore::log_scalar(const std::string& name, const std::string& layer, const std::string& phase, int64_t epoch,
                            std::optional<int64_t> batch, double x, double value) {
  auto key = std::make_tuple(name, layer, phase);
  auto it = series_index_.find(key);
  if (it == series_index_.end()) {
    SeriesView series;
    series.name = name;
    series.phase = phase;
    series.layer = layer;
    series_.push_back(std::move(series));
    it = series_index_.emplace(key, series_.size() - 1).first;
  }
  series_[it->second].points.push_back(ScalarPoint{epoch, batch, x, value});
}

void StatsStore::forget_points_at(const std::string& phase, int64_t epoch, int64_t batch) {
  for (auto& series : series_) {
    if (series.phase != phase) continue;
    auto& points = series.points;
    points.erase(std::remove_if(points.begin(), points.end(),
                                [&](const ScalarPoint& p) { return p.epoch == epoch && p.batch == batch; }),
                 points.end());
  }
}

void StatsStore::drop_from_epoch(int64_t epoch) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    it = std::get<2>(it->first) >= epoch ? buckets_.erase(it) : std::next(it);
  }
  for (auto it = parameters_.begin(); it != parameters_.end();) {
    auto& samples = it->second;
    samples.erase(
        std::remove_if(samples.begin(), samples.end(), [epoch](const ParameterSample& s) { return s.epoch >= epoch; }),
        samples.end());
    if (samples.empty()) {
      owner_.erase(it->first);
      it = parameters_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<SeriesView> kept;
  series_index_.clear();
  for (auto& series : series_) {
    auto& points = series.points;
    points.erase(
        std::remove_if(points.begin(), points.end(), [epoch](const ScalarPoint& p) { return p.epoch >= epoch; }),
        points.end());
    if (points.empty()) continue;
    series_index_.emplace(std::make_tuple(series.name, series.layer, series.phase), kept.size());
    kept.push_back(std::move(series));
  }
  series_ = std::move(kept);
  sampled_epochs_.erase(sampled_epochs_.lower_bound(epoch), sampled_epochs_.end());
  if (pending_ && pending_->epoch >= epoch) pending_.reset();
  forget_dropped();
}

void StatsStore::keep_only(const std::vector<std::string>& keep) {
  const std::unordered_set<std::string> layers(keep.begin(), keep.end());
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    it = layers.count(std::get<0>(it->first)) ? std::next(it) : buckets_.erase(it);
  }
  forget_dropped();
}

void StatsStore::clear() {
  buckets_.clear();
  touched_.clear();
  collapse_queue_.clear();
  pending_.reset();
  parameters_.clear();
  owner_.clear();
  series_.clear();
  series_index_.clear();
  sampled_epochs_.clear();
}

// Dropped buckets must not stay alive (and hold device memory) through the
// lists of the current batch.
void StatsStore::forget_dropped() {
  auto dropped = [this](const std::shared_ptr<Bucket>& b) { return !live(b); };
  touched_.erase(std::remove_if(touched_.begin(), touched_.end(), dropped), touched_.end());
  collapse_queue_.erase(std::remove_if(collapse_queue_.begin(), collapse_queue_.end(), dropped), collapse_queue_.end());
}

std::shared_ptr<const WatchSnapshot> StatsStore::publish() {
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<torch::Tensor> all;
  for (auto& [_, b] : buckets_) {
    for (auto* acc : b->accumulators()) {
      auto bufs = acc->buffers();
      ranges.emplace_back(all.size(), bufs.size());
      all.insert(all.end(), bufs.begin(), bufs.end());
    }
    // A bucket about to collapse publishes no patches.
    if (b->gallery && !(b->queued && !b->collapsed)) {
      auto bufs = b->gallery->buffers();
      ranges.emplace_back(all.size(), bufs.size());
      all.insert(all.end(), bufs.begin(), bufs.end());
    }
  }
  const auto cpu = common::copy_to_host(all);
  auto snapshot = std::make_shared<WatchSnapshot>();
  snapshot->sequence = ++sequence_;
  size_t next = 0;
  for (auto& [key, b] : buckets_) {
    LayerStatsSnapshot view;
    view.layer = std::get<0>(key);
    view.phase = std::get<1>(key);
    view.epoch = std::get<2>(key);
    view.batches = b->batches;
    // An older epoch waiting to collapse does so from this same copy.
    const bool collapse = b->queued && !b->collapsed;
    auto take = [&](std::optional<TensorAccumulator>& acc, std::optional<TensorStatsSnapshot>& out) {
      if (!acc) return;
      auto part = slice(cpu, ranges[next].first, ranges[next].second);
      ++next;
      if (collapse) acc->collapse(part);
      out = acc->view(part);
    };
    take(b->activation, view.activation);
    take(b->gradient, view.gradient);
    if (b->gallery && !collapse) {
      view.patches = b->gallery->view(slice(cpu, ranges[next].first, ranges[next].second));
      view.patches_skipped = b->gallery->skipped();
      ++next;
    }
    view.patches_note = b->patches_note;
    if (collapse) {
      b->collapsed = true;
      b->gallery.reset();
    }
    b->queued = false;
    auto& stream = snapshot->layers[{view.layer, view.phase}];
    // One exact allocation per stream: grown by push_back, a vector of 100
    // epochs would keep room for 128 (28% of the view's buckets unused).
    if (stream.empty()) {
      stream.reserve(static_cast<size_t>(std::distance(
          buckets_.find(key), buckets_.upper_bound(Key{view.layer, view.phase, std::numeric_limits<int64_t>::max()}))));
    }
    stream.push_back(std::move(view));
  }
  collapse_queue_.clear();
  snapshot->parameters = parameters_;
  snapshot->owner = owner_;
  snapshot->series = series_;
  snapshot->device_bytes = device_bytes();
  return snapshot;
}

size_t StatsStore::device_bytes() const {
  size_t total = 0;
  for (const auto& [_, b] : buckets_) {
    if (b->activation) total += b->activation->bytes();
    if (b->gradient) total += b->gradient->bytes();
    if (b->gallery) total += b->gallery->bytes();
  }
  return total;
}

}  // namespace nansense::stats
