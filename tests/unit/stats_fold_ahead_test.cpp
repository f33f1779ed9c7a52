// Statistics folded ahead: the tracer hands a layer's float32 CPU output to
// the statistics once no later op can change it (and each gradient as its
// hook delivers it), instead of holding every tensor to the batch's end.
// Checked here: what the tracer offers is the layer's final output (a module
// call extended by a later op replaces it; an in-place op after it does not
// reach it), a fold made ahead adds what the tensor itself adds, every float
// prefix bins as the op path bins it, and a session's statistics folded ahead
// equal a direct computation over the very tensors the model produced.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "capture/tracer.h"
#include "nansense/nansense.h"
#include "observer/observer.h"
#include "stats/histogram.h"
#include "stats/patches.h"
#include "stats/stats_store.h"

namespace nansense {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TensorStatsSnapshot published(const stats::TensorAccumulator& acc) {
  std::vector<torch::Tensor> cpu;
  for (const auto& b : acc.buffers()) cpu.push_back(b.cpu().clone());
  return acc.view(cpu);
}

void expect_same(const TensorStatsSnapshot& a, const TensorStatsSnapshot& b) {
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.pos_inf, b.pos_inf);
  EXPECT_EQ(a.neg_inf, b.neg_inf);
  EXPECT_EQ(a.hist, b.hist);
  EXPECT_EQ(a.channel_hists, b.channel_hists);
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.binned, b.binned);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_NEAR(a.sum, b.sum, 1e-9 * std::max(1.0, std::abs(a.sum)));
  EXPECT_NEAR(a.sum_sq, b.sum_sq, 1e-9 * std::max(1.0, a.sum_sq));
  EXPECT_EQ(a.dead_count, b.dead_count);
  EXPECT_EQ(a.dead_channels, b.dead_channels);
}

// [8, 5, 6] with a NaN, an infinity and a dead channel (3).
torch::Tensor batch(int seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({8, 5, 6}) * torch::pow(10.0, torch::randint(-10, 7, {8, 5, 6}).to(torch::kFloat));
  x.select(1, 3).uniform_(-1e-10, 1e-10);
  x[seed % 8][0][1] = kNaN;
  x[(seed + 3) % 8][2][4] = kInf;
  return x;
}

TEST(StatsFoldAhead, AFoldMadeAheadAddsWhatTheTensorAdds) {
  // A sampled histogram (64 of 240 values) and a channel limit of 4: the
  // same seeds draw the same samples, so everything must match.
  const auto detail = stats::Detail().channel_limit(4).histogram_sample(64);
  stats::TensorAccumulator by_tensor(detail), by_fold(detail);
  for (int b = 0; b < 3; ++b) {
    const auto x = batch(b);
    by_tensor.add(x);
    by_fold.add(stats::fold_on_cpu(x, detail, static_cast<uint64_t>(b)));
  }
  const auto a = published(by_tensor), f = published(by_fold);
  expect_same(a, f);
  EXPECT_EQ(f.n + f.nan + f.pos_inf, 3 * 240);
  EXPECT_EQ(f.nan, 3);
  EXPECT_EQ(f.dead_channels, (std::vector<int64_t>{3}));
  EXPECT_EQ(f.channel_hists.size(), 4u);
}

TEST(StatsFoldAhead, AStreamMixingTheOpPathAndFoldsStaysExact) {
  // Every value binned: the op path (float64) and CPU folds count the same.
  const auto detail = stats::Detail().channel_limit(4).histogram_sample(0);
  stats::TensorAccumulator mixed(detail), reference(detail);
  const auto x0 = batch(5), x1 = batch(6), x2 = batch(7);
  mixed.add(x0.to(torch::kDouble));              // op path: counts in the slots
  mixed.add(stats::fold_on_cpu(x1, detail, 0));  // now exact counts
  mixed.add(x2.to(torch::kDouble));              // op path again, after folds
  for (const auto& x : {x0, x1, x2}) reference.add(x);
  const auto m = published(mixed), r = published(reference);
  EXPECT_EQ(m.n, r.n);
  EXPECT_EQ(m.nan, r.nan);
  EXPECT_EQ(m.pos_inf, r.pos_inf);
  EXPECT_EQ(m.hist, r.hist);
  EXPECT_EQ(m.channel_hists, r.channel_hists);
  EXPECT_EQ(m.binned, r.binned);
  EXPECT_EQ(m.dead_channels, r.dead_channels);
  EXPECT_EQ(m.dead_channels, (std::vector<int64_t>{3}));
  EXPECT_EQ(m.min, r.min);
  EXPECT_EQ(m.max, r.max);

  // A fold whose dim 1 differs ends per-channel tracking, as a tensor does.
  stats::TensorAccumulator changed(detail);
  changed.add(stats::fold_on_cpu(x0, detail, 0));
  changed.add(stats::fold_on_cpu(torch::randn({8, 7, 6}), detail, 1));
  const auto c = published(changed);
  EXPECT_EQ(c.channels, 0);
  EXPECT_TRUE(c.channel_hists.empty());
  EXPECT_EQ(c.n + c.nan + c.pos_inf, 240 + 8 * 7 * 6);
}

// The prefix table against the op path for every float32 prefix (sign,
// exponent, 7 mantissa bits) at its smallest, middle and largest magnitude
// and one above the smallest: each value binned on its own.
TEST(StatsFoldAhead, EveryFloatPrefixBinsAsTheOpPathBinsIt) {
  constexpr uint32_t kLows[] = {0x0000u, 0x0001u, 0x8000u, 0xffffu};
  std::vector<float> values;
  values.reserve(4u << 16);
  for (uint32_t p = 0; p < (1u << 16); ++p) {
    for (uint32_t low : kLows) {
      const uint32_t bits = (p << 16) | low;
      float v;
      std::memcpy(&v, &bits, sizeof v);
      values.push_back(v);
    }
  }
  auto x = torch::from_blob(values.data(), {static_cast<int64_t>(values.size())}, torch::kFloat);
  const auto expected = stats::slot_index(x).contiguous();
  const int64_t* want = expected.data_ptr<int64_t>();
  std::vector<int64_t> counts(stats::kSlots);
  int64_t wrong = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    std::fill(counts.begin(), counts.end(), 0);
    stats::bin_cpu(&values[i], 1, 1, 1, nullptr, 1, 1, 0, counts.data(), stats::kSlots);
    if (counts[static_cast<size_t>(want[i])] != 1 && ++wrong <= 5) {
      ADD_FAILURE() << "value " << values[i] << " (bits " << std::hex << std::bit_cast<uint32_t>(values[i]) << std::dec
                    << ") expected slot " << want[i];
    }
  }
  EXPECT_EQ(wrong, 0);
}

// A module whose call is two ops (matmul, then the bias add that extends
// it), an in-place ReLU after it, and a Linear.
struct AffineImpl : torch::nn::Module {
  AffineImpl() {
    w = register_parameter("w", torch::randn({4, 6}) * 0.5);
    b = register_parameter("b", torch::randn({6}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x.matmul(w) + b; }
  torch::Tensor w, b;
};
TORCH_MODULE(Affine);

struct ExtendedNetImpl : torch::nn::Module {
  ExtendedNetImpl() : affine(register_module("affine", Affine())), fc(register_module("fc", torch::nn::Linear(6, 2))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = affine(x);
    h.relu_();
    return fc(h);
  }
  Affine affine;
  torch::nn::Linear fc;
};
TORCH_MODULE(ExtendedNet);

struct Offer {
  int layer;
  int64_t op_seq;
  bool gradient;
  torch::Tensor tensor;
};

TEST(StatsFoldAhead, TheTracerOffersEachLayersFinalOutputBeforeAnInPlaceOp) {
  torch::manual_seed(2);
  ExtendedNet model;
  const auto x = torch::randn({2, 3, 4});
  std::vector<Offer> offers;
  observer::Observer observer;
  capture::TraceKeep keep;
  keep.cpu = true;
  keep.device = true;
  keep.take = [&](int layer, int64_t op_seq, const std::string&, bool gradient, const torch::Tensor& t) {
    offers.push_back({layer, op_seq, gradient, t.detach().clone()});
    return true;
  };
  capture::Tracer tracer(*model, observer, keep);
  tracer.set_inputs({x}, false);
  auto out = model->forward(x);
  out.sum().backward();
  auto result = tracer.finish();
  ASSERT_TRUE(result->error.empty()) << result->error;

  std::map<std::string, int> index;
  for (size_t i = 0; i < result->layer_names.size(); ++i) {
    if (result->final_op[i] >= 0) index[result->layer_names[i]] = static_cast<int>(i);
  }
  ASSERT_TRUE(index.count("affine") && index.count("fc")) << "layers traced";
  // The last activation offered for a layer is its final output.
  auto last = [&](const std::string& name, bool gradient) -> const Offer* {
    const Offer* found = nullptr;
    for (const auto& o : offers) {
      if (o.layer == index[name] && o.gradient == gradient) found = &o;
    }
    return found;
  };
  torch::NoGradGuard no_grad;
  const auto affine_out = x.matmul(model->affine->w) + model->affine->b;
  ASSERT_TRUE(affine_out.lt(0).any().item<bool>()) << "the ReLU must change something for the check to mean anything";
  const Offer* a = last("affine", false);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->op_seq, result->final_op[static_cast<size_t>(index["affine"])]);
  // The bias add's output, before relu_ overwrote it.
  EXPECT_TRUE(torch::allclose(a->tensor, affine_out)) << a->tensor;
  EXPECT_TRUE(torch::equal(a->tensor, result->activations.at("affine")));
  const Offer* f = last("fc", false);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(torch::equal(f->tensor, out.detach()));
  // Taken tensors are not held; the input (never offered) is.
  EXPECT_EQ(result->device_activations.count("affine"), 0u);
  EXPECT_EQ(result->device_activations.count("fc"), 0u);
  EXPECT_EQ(result->device_activations.count("input"), 1u);
  // Gradients as their hooks delivered them, equal to the CPU copies.
  for (const std::string name : {"affine", "fc"}) {
    const Offer* g = last(name, true);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->op_seq, result->final_op[static_cast<size_t>(index[name])]) << name;
    EXPECT_TRUE(torch::equal(g->tensor, result->gradients.at(name))) << name;
    EXPECT_EQ(result->device_gradients.count(name), 0u) << name;
  }
}

// conv -> relu -> flatten -> fc, keeping copies of the conv's output and
// its gradient as the model itself produced them. With `inplace` the ReLU
// overwrites the conv's output (relu_).
struct RecordingNetImpl : torch::nn::Module {
  explicit RecordingNetImpl(bool inplace = false)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(4 * 6 * 6, 3))),
        inplace(inplace) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = conv(x);
    activations.push_back(h.detach().clone().to(torch::kDouble));
    h.register_hook([this](torch::Tensor g) { gradients.push_back(g.detach().clone().to(torch::kDouble)); });
    if (inplace) return fc(torch::relu_(h).flatten(1));
    return fc(torch::relu(h).flatten(1));
  }
  bool inplace = false;
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
  std::vector<torch::Tensor> activations, gradients;
};
TORCH_MODULE(RecordingNet);

void expect_direct(const std::optional<TensorStatsSnapshot>& got, const std::vector<torch::Tensor>& seen,
                   const char* what) {
  ASSERT_TRUE(got) << what;
  const auto all = torch::cat(seen).reshape({-1});
  EXPECT_EQ(got->n, all.numel()) << what;
  EXPECT_EQ(got->binned, all.numel()) << what;
  EXPECT_NEAR(got->sum, all.sum().item<double>(), 1e-9 * all.abs().sum().item<double>()) << what;
  EXPECT_NEAR(got->sum_sq, all.square().sum().item<double>(), 1e-9 * all.square().sum().item<double>()) << what;
  EXPECT_EQ(got->min, all.min().item<double>()) << what;
  EXPECT_EQ(got->max, all.max().item<double>()) << what;
  int64_t total = 0;
  for (auto c : got->hist) total += c;
  EXPECT_EQ(total, all.numel()) << what;
}

TEST(StatsFoldAhead, ASessionsStatisticsEqualTheTensorsTheModelProduced) {
  // Galleries off: both the activation and the gradient are folded ahead.
  // Galleries on: the same, and the activation stays held for the galleries
  // (it is not folded a second time at the batch's end). An in-place ReLU
  // after the conv changes neither: the statistics are of the conv's output
  // as it produced it, with galleries or without.
  for (const auto& [patches, inplace] :
       std::vector<std::pair<int64_t, bool>>{{0, false}, {2, false}, {0, true}, {2, true}}) {
    SCOPED_TRACE(std::string("patches ") + std::to_string(patches) + (inplace ? ", relu_" : ", relu"));
    torch::manual_seed(4);
    RecordingNet model(inplace);
    torch::optim::SGD optimizer(model->parameters(), 0.05);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
    for (int i = 0; i < 3; ++i) data.emplace_back(torch::randn({5, 1, 6, 6}), torch::randint(3, {5}));
    auto session =
        start(model, StartOptions()
                         .optimizer(&optimizer)
                         .watch({"conv"})
                         .watch_performance(WatchPerformance().histogram_sample(0).samples_per_channel(patches)));
    session.detach();
    for (auto& b : session.batches(data, "train")) {
      optimizer.zero_grad();
      torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
      optimizer.step();
    }
    session.close();
    const auto stats = session.watch_snapshot();
    ASSERT_TRUE(stats);
    const auto it = stats->layers.find({"conv", "train"});
    ASSERT_NE(it, stats->layers.end());
    ASSERT_EQ(it->second.size(), 1u);
    const auto& bucket = it->second[0];
    EXPECT_EQ(bucket.batches, 3);
    ASSERT_EQ(model->activations.size(), 3u);
    ASSERT_EQ(model->gradients.size(), 3u);
    expect_direct(bucket.activation, model->activations, patches ? "activation (ahead, held)" : "activation (ahead)");
    expect_direct(bucket.gradient, model->gradients, "gradient (ahead)");
    EXPECT_EQ(bucket.activation->channels, 4);
    EXPECT_EQ(bucket.patches.empty(), patches == 0);
  }
}

TEST(StatsFoldAhead, ALoopsEndPublishesItsStatisticsBeforeClose) {
  // The default live view publishes every 2 s; a phase shorter than that
  // (and a detached run, which never captures) is shown when its loop ends,
  // every batch of it, not only at close().
  torch::manual_seed(4);
  RecordingNet model(false);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
  for (int i = 0; i < 3; ++i) data.emplace_back(torch::randn({5, 1, 6, 6}), torch::randint(3, {5}));
  auto session = start(model, StartOptions().optimizer(&optimizer).watch({"conv"}));
  session.detach();
  for (auto& b : session.batches(data, "train")) {
    optimizer.zero_grad();
    torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
    optimizer.step();
    // Nothing of the phase is shown while it runs (no update is due).
    EXPECT_EQ(session.watch_snapshot(), nullptr);
  }
  const auto stats = session.watch_snapshot();
  ASSERT_TRUE(stats);
  const auto it = stats->layers.find({"conv", "train"});
  ASSERT_NE(it, stats->layers.end());
  ASSERT_EQ(it->second.size(), 1u);
  EXPECT_EQ(it->second[0].batches, 3);
  expect_direct(it->second[0].activation, model->activations, "activation at the loop's end");
  session.close();
}

// conv (10x10 maps: long enough to be folded row by row) -> relu or relu_ ->
// fc, keeping float copies of the conv's output as the model produced it.
struct PatchedNetImpl : torch::nn::Module {
  explicit PatchedNetImpl(bool inplace)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 3, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(3 * 10 * 10, 2))),
        inplace(inplace) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = conv(x);
    activations.push_back(h.detach().clone());
    if (inplace) return fc(torch::relu_(h).flatten(1));
    return fc(torch::relu(h).flatten(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
  bool inplace = false;
  std::vector<torch::Tensor> activations;
};
TORCH_MODULE(PatchedNet);

bool same_values(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.sizes() == b.sizes() && ((a == b) | (torch::isnan(a) & torch::isnan(b))).all().item<bool>();
}

// A session's galleries, whose pixel rankings take the maps' extremes from
// the statistics' fold ahead, are the galleries a PatchCollector keeps from
// the same activations by its own pass. With an in-place ReLU after the conv
// the held activation is no longer what was folded: the galleries then rank
// the held (overwritten) values, as they always did.
TEST(StatsFoldAhead, GalleriesFromExtremesFoldedAheadEqualTheCollectorsOwn) {
  for (const bool inplace : {false, true}) {
    SCOPED_TRACE(inplace ? "relu_" : "relu");
    torch::manual_seed(6);
    PatchedNet model(inplace);
    torch::optim::SGD optimizer(model->parameters(), 0.05);
    std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
    for (int i = 0; i < 4; ++i) data.emplace_back(torch::randn({6, 1, 10, 10}), torch::randint(2, {6}));
    const auto performance = WatchPerformance().samples_per_channel(2);
    auto session = start(model, StartOptions().optimizer(&optimizer).watch({"conv"}).watch_performance(performance));
    session.detach();
    for (auto& b : session.batches(data, "train")) {
      optimizer.zero_grad();
      torch::cross_entropy_loss(model->forward(b.first), b.second).backward();
      optimizer.step();
    }
    session.close();
    const auto stats = session.watch_snapshot();
    ASSERT_TRUE(stats);
    const auto& bucket = stats->layers.at({"conv", "train"}).at(0);
    ASSERT_EQ(bucket.patches.size(), 2u);
    ASSERT_EQ(model->activations.size(), data.size());

    stats::PatchCollector own(stats::PatchSettings::from(performance));
    for (size_t b = 0; b < data.size(); ++b) {
      const auto& act = model->activations[b];
      ASSERT_TRUE(own.add(inplace ? torch::relu(act) : act, data[b].first, static_cast<int64_t>(b)));
    }
    const auto want = own.view();
    ASSERT_EQ(want.size(), bucket.patches.size());
    for (size_t r = 0; r < want.size(); ++r) {
      const auto &got = bucket.patches[r], &expected = want[r];
      SCOPED_TRACE(std::string(to_string(expected.ranking)));
      ASSERT_EQ(got.ranking, expected.ranking);
      ASSERT_EQ(got.slots.size(), expected.slots.size());
      for (size_t j = 0; j < got.slots.size(); ++j) {
        const auto &a = got.slots[j], &e = expected.slots[j];
        EXPECT_EQ(std::tie(a.filled, a.batch, a.sample, a.y, a.x, a.top, a.left),
                  std::tie(e.filled, e.batch, e.sample, e.y, e.x, e.top, e.left))
            << "slot " << j;
        EXPECT_EQ(std::bit_cast<uint64_t>(a.score), std::bit_cast<uint64_t>(e.score)) << "slot " << j;
      }
      EXPECT_TRUE(same_values(got.crops, expected.crops));
      EXPECT_TRUE(same_values(got.heat, expected.heat));
    }
  }
}

// A batch only collected reuses the session's model index; a module replaced
// between batches makes a new one, so its layer is still found by name.
TEST(StatsFoldAhead, TheModelIndexIsReusedUntilAModuleIsReplaced) {
  torch::manual_seed(5);
  ExtendedNet model;
  const auto first = capture::ModelIndex::of(*model);
  EXPECT_EQ(capture::ModelIndex::of(*model, first), first) << "same modules, parameters and buffers: reused";
  const auto* old_weight = model->fc->weight.unsafeGetTensorImpl();
  ASSERT_TRUE(first->owners.count(old_weight));
  EXPECT_EQ(first->owners.at(old_weight).param_name, "fc.weight");
  EXPECT_EQ(first->modules.at(first->module_index.at("fc")).description,
            "Linear(in_features=6, out_features=2, bias=true)");
  EXPECT_FALSE(first->modules.at(first->module_index.at("fc")).parameterless);
  EXPECT_FALSE(first->modules.at(first->module_index.at("")).parameterless)
      << "the root holds the modules that hold tensors";

  model->fc = model->replace_module("fc", torch::nn::Linear(6, 2));
  const auto second = capture::ModelIndex::of(*model, first);
  ASSERT_NE(second, first) << "a replaced module makes a new index";
  EXPECT_EQ(second->owners.count(old_weight), 0u);
  ASSERT_TRUE(second->owners.count(model->fc->weight.unsafeGetTensorImpl()));

  // Through a session: statistics of "fc" on every batch of two epochs, the
  // module replaced between them, all counted under its name.
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  auto session = start(model, StartOptions().optimizer(&optimizer).watch({"fc"}));
  session.detach();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
  for (int i = 0; i < 2; ++i) data.emplace_back(torch::randn({3, 4}), torch::randn({3, 2}));
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    if (epoch == 1) {
      model->fc = model->replace_module("fc", torch::nn::Linear(6, 2));
      optimizer.add_param_group(torch::optim::OptimizerParamGroup(model->fc->parameters()));
    }
    for (auto& b : session.batches(data, "train", epoch)) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(b.first), b.second).backward();
      optimizer.step();
    }
  }
  session.close();
  const auto stats = session.watch_snapshot();
  ASSERT_TRUE(stats);
  const auto it = stats->layers.find({"fc", "train"});
  ASSERT_NE(it, stats->layers.end());
  ASSERT_EQ(it->second.size(), 2u) << "one bucket per epoch";
  for (const auto& bucket : it->second) {
    EXPECT_EQ(bucket.batches, 2) << "epoch " << bucket.epoch;
    ASSERT_TRUE(bucket.activation);
    EXPECT_EQ(bucket.activation->n, 2 * 3 * 2) << "epoch " << bucket.epoch;
  }
}

}  // namespace
}  // namespace nansense

namespace nansense::stats {
namespace {

// The exact pass bins what bin_cpu bins, as it goes: every value or the
// sampled runs, into each channel's row, on shapes folded channel by channel
// (long rows) and flat (short rows), with and without a NaN (which sends a
// channel back through the chunked path after its values were binned).
TEST(StatsFoldAhead, TheExactPassBinsWhatTheSampledPassBins) {
  torch::manual_seed(9);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{6, 5, 100}, {64, 20, 3}, {3, 4, 333}}) {
    for (const bool nan : {false, true}) {
      for (const int64_t stride : {int64_t{1}, int64_t{48}, int64_t{700}}) {
        auto x = (torch::randn(shape) * torch::pow(10.0, torch::randint(-9, 6, shape).to(torch::kFloat))).contiguous();
        if (nan) x[1][2][0] = std::numeric_limits<float>::quiet_NaN();
        const int64_t outer = shape[0], channels = shape[1], inner = shape[2];
        const int64_t tracked = 3;  // channels 3.. share one row
        std::vector<int64_t> offsets(static_cast<size_t>(channels));
        for (int64_t c = 0; c < channels; ++c) offsets[static_cast<size_t>(c)] = std::min(c, tracked) * kSlots;
        std::vector<int64_t> fused((tracked + 1) * kSlots, 0), separate(fused.size(), 0);
        SampledBins bins;
        bins.row_offset = offsets.data();
        bins.stride = stride;
        bins.run = 16;
        bins.seed = 5;
        bins.slots = fused.data();
        bins.slot_count = static_cast<int64_t>(fused.size());
        ExactFold with_bins, without;
        std::vector<ChannelRange> r1(static_cast<size_t>(tracked)), r2(static_cast<size_t>(tracked));
        fold_exact_cpu(x.data_ptr<float>(), outer, channels, inner, tracked, r1.data(), with_bins, &bins);
        fold_exact_cpu(x.data_ptr<float>(), outer, channels, inner, tracked, r2.data(), without);
        bin_cpu(x.data_ptr<float>(), outer, channels, inner, offsets.data(), stride, 16, 5, separate.data(),
                static_cast<int64_t>(separate.size()));
        const std::string what =
            "shape " + std::to_string(inner) + (nan ? " with NaN" : "") + " stride " + std::to_string(stride);
        EXPECT_EQ(fused, separate) << what;
        EXPECT_EQ(with_bins.n, without.n) << what;
        EXPECT_EQ(with_bins.nan, nan ? 1 : 0) << what;
        EXPECT_EQ(with_bins.min, without.min) << what;
        EXPECT_EQ(with_bins.max, without.max) << what;
        for (int64_t c = 0; c < tracked; ++c) {
          EXPECT_EQ(r1[static_cast<size_t>(c)].seen, outer * inner) << what;
          EXPECT_EQ(r1[static_cast<size_t>(c)].min, r2[static_cast<size_t>(c)].min) << what;
          EXPECT_EQ(r1[static_cast<size_t>(c)].nonfinite, nan && c == 2) << what;
        }
        // The values' own count, against direct arithmetic.
        auto d = x.to(torch::kDouble);
        auto kept = d.masked_select(torch::isfinite(d));
        EXPECT_EQ(with_bins.n, kept.numel()) << what;
        EXPECT_NEAR(with_bins.sum_sq, kept.square().sum().item<double>(), 1e-12 * kept.square().sum().item<double>())
            << what;
        int64_t binned = 0;
        for (auto c : fused) binned += c;
        if (stride == 1) EXPECT_EQ(binned, x.numel()) << what;
      }
    }
  }
}

}  // namespace
}  // namespace nansense::stats
