// The statistics engine against direct computation on known tensors: the
// signed-log bins and their edges, saturation, the zero band, NaN and
// infinities, medians, dead channels, the per-channel limit, exact running
// sums, collapsing older epochs (their compact form, bit for bit), rewinds,
// parameter samples over a real optimizer step, and what it holds for a
// large network over many epochs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nansense/stats.h"
#include "stats/collapsed_stats.h"
#include "stats/histogram.h"
#include "stats/stats_store.h"

namespace nansense::stats {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Independent of the engine: the bin of one value by a search over
// bin_edges() rounded to the dtype compared in (what "exactly on an edge"
// means for a float32 value).
template <typename T>
int reference_bin(T v) {
  if (std::isnan(v)) return -1;
  const auto& edges = bin_edges();
  const T magnitude = std::abs(v);
  if (magnitude < static_cast<T>(kZeroBand)) return kZeroBin;
  // Magnitude bins by the positive edges 1e-9 .. 1e6 (edges[106..211]).
  int k = 0;
  while (k + 1 < kSideBins && magnitude >= static_cast<T>(edges[kZeroBin + 2 + k])) ++k;
  return v > 0 ? kZeroBin + 1 + k : kZeroBin - 1 - k;
}

template <typename T>
std::vector<int64_t> reference_hist(const torch::Tensor& x) {
  std::vector<int64_t> hist(kBins, 0);
  auto flat = x.contiguous().reshape({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const int b = reference_bin<T>(flat[i].item<T>());
    if (b >= 0) ++hist[b];
  }
  return hist;
}

std::vector<int64_t> bins_of(const torch::Tensor& x) {
  auto b = bin_index(x).contiguous();
  return std::vector<int64_t>(b.data_ptr<int64_t>(), b.data_ptr<int64_t>() + b.numel());
}

TensorStatsSnapshot published(const TensorAccumulator& acc) {
  std::vector<torch::Tensor> cpu;
  for (const auto& b : acc.buffers()) cpu.push_back(b.cpu().clone());
  return acc.view(cpu);
}

Detail limit(int64_t channels) { return Detail().channel_limit_enabled(true).channel_limit(channels); }
Detail unlimited() { return Detail().channel_limit_enabled(false); }

// --- bins --------------------------------------------------------------

TEST(StatsHistogram, EdgesAreMonotoneWithExactPowersOfTenEverySevenBins) {
  const auto& e = bin_edges();
  ASSERT_EQ(e.size(), 212u);
  for (size_t i = 1; i < e.size(); ++i) EXPECT_LT(e[i - 1], e[i]) << i;
  EXPECT_EQ(e.front(), -1e6);
  EXPECT_EQ(e[105], -1e-9);
  EXPECT_EQ(e[106], 1e-9);
  EXPECT_EQ(e.back(), 1e6);
  const double decades[] = {1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
  for (int d = 0; d < 16; ++d) {
    EXPECT_EQ(e[106 + 7 * d], decades[d]) << d;
    EXPECT_EQ(e[105 - 7 * d], -decades[d]) << d;
  }
  // Six log-spaced interior edges per decade.
  for (int i = 107; i < 212; ++i) EXPECT_NEAR(e[i] / e[i - 1], std::pow(10.0, 1.0 / 7), 1e-12) << i;
  for (int i = 0; i < 106; ++i) EXPECT_EQ(e[i], -e[211 - i]);
}

TEST(StatsHistogram, ChosenValuesLandInTheirBins) {
  const std::vector<double> values = {0,    -0.0, 1e-10, -1e-10, 1e-9,  -1e-9, 1,      -1,   1e6,
                                      -1e6, 1e7,  -1e7,  kInf,   -kInf, kNaN,  1.2e-9, -2e-9};
  const std::vector<int64_t> expected = {105, 105, 105, 105, 106, 104, 169, 41, 210, 0, 210, 0, 210, 0, -1, 106, 102};
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    EXPECT_EQ(bins_of(torch::tensor(values, torch::kDouble).to(dtype)), expected) << dtype;
  }
  // Shape is kept, a 0-dim tensor included.
  EXPECT_EQ(bin_index(torch::zeros({2, 3, 4})).sizes(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(bin_index(torch::tensor(1.0)).item<int64_t>(), 169);
  EXPECT_EQ(bin_index(torch::zeros({2, 3, 4})).scalar_type(), torch::kLong);
}

TEST(StatsHistogram, ValuesOnEveryEdgeLandOnTheLargerMagnitudesSide) {
  const auto& e = bin_edges();
  std::vector<double> on, below;
  std::vector<int64_t> on_bin, below_bin;
  for (int i = 1; i < 211; ++i) {
    on.push_back(e[i]);
    below.push_back(std::nextafter(e[i], 0.0));  // just inside, towards zero
    if (e[i] > 0) {
      on_bin.push_back(i);
      below_bin.push_back(i - 1);
    } else {
      on_bin.push_back(i - 1);
      below_bin.push_back(i);
    }
  }
  EXPECT_EQ(bins_of(torch::tensor(on, torch::kDouble)), on_bin);
  EXPECT_EQ(bins_of(torch::tensor(below, torch::kDouble)), below_bin);
  // float32: the edges as float32 rounds them.
  std::vector<float> on_f, below_f;
  for (double v : on) on_f.push_back(static_cast<float>(v));
  for (float v : on_f) below_f.push_back(std::nextafter(v, 0.0f));
  EXPECT_EQ(bins_of(torch::tensor(on_f)), on_bin);
  EXPECT_EQ(bins_of(torch::tensor(below_f)), below_bin);
  for (size_t k = 0; k < on_f.size(); ++k) EXPECT_EQ(reference_bin(on_f[k]), on_bin[k]);
}

TEST(StatsHistogram, EveryBinCentreLandsInItsBinAndRandomValuesMatchTheReference) {
  std::vector<double> centres;
  for (int b = 0; b < kBins; ++b) centres.push_back(bin_center(b));
  std::vector<int64_t> all(kBins);
  for (int b = 0; b < kBins; ++b) all[b] = b;
  EXPECT_EQ(bins_of(torch::tensor(centres, torch::kDouble)), all);
  EXPECT_EQ(bin_center(kZeroBin), 0.0);
  EXPECT_NEAR(bin_center(210), std::pow(10.0, 6 - 1.0 / 14), 1e-6);
  EXPECT_EQ(bin_center(0), -bin_center(210));
  EXPECT_TRUE(std::isnan(bin_center(-1)));
  EXPECT_TRUE(std::isnan(bin_center(kBins)));

  torch::manual_seed(3);
  auto x = torch::randn({4000}) * torch::pow(10.0, torch::randn({4000}) * 6);
  auto hist = reference_hist<float>(x);
  auto b = bins_of(x);
  std::vector<int64_t> counted(kBins, 0);
  for (auto i : b) ++counted[i];
  EXPECT_EQ(counted, hist);
}

// The CPU passes count what the op path counts: every edge, just inside it,
// zero, subnormals, NaN, the infinities, beyond 1e6, random magnitudes, per
// channel rows, and the finite values' count, sums and extremes.
TEST(StatsHistogram, TheCpuPassesCountWhatTheOpPathCounts) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1e-45f,
                               -1e-40f,
                               3.0f,
                               -7.5e7f,
                               2e9f,
                               static_cast<float>(kNaN),
                               static_cast<float>(kInf),
                               static_cast<float>(-kInf)};
  for (double e : bin_edges()) {
    values.push_back(static_cast<float>(e));
    values.push_back(std::nextafter(static_cast<float>(e), 0.0f));
  }
  auto random = torch::randn({4000}) * torch::pow(10.0, torch::randint(-12, 9, {4000}).to(torch::kFloat));
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(random[i].item<float>());
  while (values.size() % 12 != 0) values.push_back(1.0f);
  // [outer, channels 3, inner 4]: rows at offsets 0, kSlots, 0 (channel 2
  // shares channel 0's row) to check the row map is followed.
  auto x = torch::tensor(values).view({-1, 3, 4});
  std::vector<int64_t> offsets = {0, kSlots, 0};
  std::vector<int64_t> counts(2 * kSlots, 0);
  bin_cpu(x.data_ptr<float>(), x.size(0), 3, 4, offsets.data(), /*stride=*/1, /*run=*/16, /*seed=*/0, counts.data(),
          static_cast<int64_t>(counts.size()));
  ExactFold folded;
  fold_exact_cpu(x.data_ptr<float>(), x.numel(), 1, 1, 0, nullptr, folded);
  // The same by rows, with channel ranges: the same sums.
  ExactFold by_rows;
  std::vector<ChannelRange> ranges(3);
  fold_exact_cpu(x.data_ptr<float>(), x.size(0), 3, 4, 3, ranges.data(), by_rows);
  EXPECT_EQ(by_rows.n, folded.n);
  EXPECT_EQ(by_rows.nan, folded.nan);
  EXPECT_EQ(by_rows.min, folded.min);
  EXPECT_EQ(by_rows.max, folded.max);
  EXPECT_NEAR(by_rows.sum_sq, folded.sum_sq, 1e-12 * folded.sum_sq);
  int64_t seen = 0;
  for (const auto& r : ranges) seen += r.seen;
  EXPECT_EQ(seen, x.numel());

  std::vector<int64_t> expected(2 * kSlots, 0);
  auto slots = slot_index(x).contiguous();
  for (int64_t o = 0; o < x.size(0); ++o) {
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t i = 0; i < 4; ++i) ++expected[offsets[c] + slots[o][c][i].item<int64_t>()];
    }
  }
  EXPECT_EQ(counts, expected);
  auto d = x.to(torch::kDouble);
  auto finite = torch::isfinite(d);
  auto kept = d.masked_select(finite);
  EXPECT_EQ(folded.n, kept.numel());
  EXPECT_EQ(folded.nan, torch::isnan(d).sum().item<int64_t>());
  EXPECT_EQ(folded.pos_inf, d.eq(kInf).sum().item<int64_t>());
  EXPECT_EQ(folded.neg_inf, d.eq(-kInf).sum().item<int64_t>());
  EXPECT_NEAR(folded.sum, kept.sum().item<double>(), 1e-12 * kept.abs().sum().item<double>());
  EXPECT_NEAR(folded.sum_sq, kept.square().sum().item<double>(), 1e-12 * kept.square().sum().item<double>());
  EXPECT_EQ(folded.min, kept.min().item<double>());
  EXPECT_EQ(folded.max, kept.max().item<double>());
}

// The widest vector path (AVX2 where the CPU has it) and the portable one
// count the same values and extremes and reach the same float64 sums, on
// lengths that leave every kind of tail, with NaN and infinities in chunks.
TEST(StatsHistogram, TheVectorPathsFoldTheSameFigures) {
  torch::manual_seed(11);
  for (int64_t n : {1, 7, 15, 16, 17, 511, 512, 513, 4099}) {
    auto x = (torch::randn({n}) * torch::pow(10.0, torch::randint(-8, 6, {n}).to(torch::kFloat))).contiguous();
    if (n > 600) {
      x[3] = std::numeric_limits<float>::quiet_NaN();
      x[1000] = kInf;
      x[2047] = -kInf;
    }
    ExactFold widest, portable;
    std::vector<ChannelRange> r_widest(1), r_portable(1);
    fold_exact_cpu(x.data_ptr<float>(), 1, 1, n, 1, r_widest.data(), widest);
    set_fold_path(FoldPath::kPortable);
    fold_exact_cpu(x.data_ptr<float>(), 1, 1, n, 1, r_portable.data(), portable);
    set_fold_path(FoldPath::kWidest);
    EXPECT_EQ(widest.n, portable.n) << n;
    EXPECT_EQ(widest.nan, portable.nan) << n;
    EXPECT_EQ(widest.pos_inf, portable.pos_inf) << n;
    EXPECT_EQ(widest.neg_inf, portable.neg_inf) << n;
    EXPECT_EQ(widest.min, portable.min) << n;
    EXPECT_EQ(widest.max, portable.max) << n;
    EXPECT_NEAR(widest.sum, portable.sum, 1e-12 * x.abs().nan_to_num(0, 0, 0).sum().item<double>()) << n;
    EXPECT_NEAR(widest.sum_sq, portable.sum_sq, 1e-12 * portable.sum_sq) << n;
    EXPECT_EQ(r_widest[0].min, r_portable[0].min) << n;
    EXPECT_EQ(r_widest[0].max, r_portable[0].max) << n;
    EXPECT_EQ(r_widest[0].nonfinite, r_portable[0].nonfinite) << n;
    // Both against float64 arithmetic over the finite values.
    auto d = x.to(torch::kDouble);
    auto kept = d.masked_select(torch::isfinite(d));
    EXPECT_EQ(widest.n, kept.numel()) << n;
    EXPECT_NEAR(widest.sum_sq, kept.square().sum().item<double>(), 1e-12 * kept.square().sum().item<double>()) << n;
  }
}

// Channel by channel ([outer, channels, inner] with inner >= 64), each
// tracked channel's rows go through one set of vector sums: the figures and
// every channel's range are the portable path's, with a NaN or an infinity
// in some rows (the channel's rows are then folded again chunk by chunk)
// and row lengths that leave a tail under 16 values.
TEST(StatsHistogram, TheVectorPathsFoldTheSameFiguresRowByRow) {
  torch::manual_seed(12);
  for (const int64_t inner : {64, 100, 784}) {
    const int64_t outer = 6, channels = 5, tracked = 3;
    auto x = (torch::randn({outer, channels, inner}) *
              torch::pow(10.0, torch::randint(-6, 5, {outer, channels, inner}).to(torch::kFloat)))
                 .contiguous();
    x[2][1][inner - 1] = std::numeric_limits<float>::quiet_NaN();  // tracked channel 1
    x[4][4][7] = -kInf;                                            // the untracked rest
    ExactFold widest, portable;
    std::vector<ChannelRange> r_widest(tracked), r_portable(tracked);
    fold_exact_cpu(x.data_ptr<float>(), outer, channels, inner, tracked, r_widest.data(), widest);
    set_fold_path(FoldPath::kPortable);
    fold_exact_cpu(x.data_ptr<float>(), outer, channels, inner, tracked, r_portable.data(), portable);
    set_fold_path(FoldPath::kWidest);
    SCOPED_TRACE(inner);
    EXPECT_EQ(widest.n, portable.n);
    EXPECT_EQ(widest.n, outer * channels * inner - 2);
    EXPECT_EQ(widest.nan, 1);
    EXPECT_EQ(widest.neg_inf, 1);
    EXPECT_EQ(widest.nan, portable.nan);
    EXPECT_EQ(widest.neg_inf, portable.neg_inf);
    EXPECT_EQ(widest.min, portable.min);
    EXPECT_EQ(widest.max, portable.max);
    EXPECT_NEAR(widest.sum, portable.sum, 1e-12 * x.abs().nan_to_num(0, 0, 0).sum().item<double>());
    EXPECT_NEAR(widest.sum_sq, portable.sum_sq, 1e-12 * portable.sum_sq);
    for (int64_t c = 0; c < tracked; ++c) {
      const auto& w = r_widest[static_cast<size_t>(c)];
      const auto& p = r_portable[static_cast<size_t>(c)];
      auto values = x.select(1, c);
      auto finite = values.masked_select(torch::isfinite(values));
      EXPECT_EQ(w.min, p.min) << c;
      EXPECT_EQ(w.max, p.max) << c;
      EXPECT_EQ(w.min, finite.min().item<double>()) << c;
      EXPECT_EQ(w.max, finite.max().item<double>()) << c;
      EXPECT_EQ(w.nonfinite, c == 1) << c;
      EXPECT_EQ(w.nonfinite, p.nonfinite) << c;
      EXPECT_EQ(w.seen, p.seen) << c;
      EXPECT_EQ(w.seen, outer * inner) << c;
    }
  }
}

// A sampled pass bins exactly the runs run_start() places, one inside each
// window, into their channel's row.
TEST(StatsHistogram, TheSampledPassBinsOneRunPerWindowIntoItsChannelRow) {
  torch::manual_seed(3);
  auto x = torch::randn({5, 4, 7, 9}) * torch::pow(10.0, torch::randint(-6, 4, {5, 4, 7, 9}).to(torch::kFloat));
  x[2][1][3][3] = kNaN;
  const int64_t stride = 50, run = 16;
  const uint64_t seed = 7;
  std::vector<int64_t> row_offsets = {0, kSlots, 2 * kSlots, 2 * kSlots};  // channel 3 shares row 2
  std::vector<int64_t> counts(3 * kSlots, 0);
  bin_cpu(x.data_ptr<float>(), 5, 4, 63, row_offsets.data(), stride, run, seed, counts.data(),
          static_cast<int64_t>(counts.size()));
  std::vector<int64_t> expected(3 * kSlots, 0);
  auto flat = x.reshape({-1});
  auto slots = slot_index(flat);
  int64_t sampled = 0;
  std::set<int64_t> windows_seen;
  for (int64_t j = 0; j * stride < flat.numel(); ++j) {
    const int64_t start = run_start(j, stride, run, seed);
    EXPECT_GE(start, j * stride);
    EXPECT_LE(start + run, (j + 1) * stride);
    windows_seen.insert(start % stride);
    for (int64_t p = start; p < std::min(start + run, flat.numel()); ++p, ++sampled) {
      ++expected[row_offsets[(p / 63) % 4] + slots[p].item<int64_t>()];
    }
  }
  EXPECT_EQ(counts, expected);
  int64_t total = 0;
  for (auto c : counts) total += c;
  EXPECT_EQ(total, sampled);
  EXPECT_GT(windows_seen.size(), 3u);  // not one fixed phase
}

// Above histogram_sample values a CPU tensor's histograms count an even
// sample; everything else stays exact: counts, sums, extremes, non-finite
// counts and dead channels (a channel alive by one value the sample misses
// is not called dead).
TEST(StatsAccumulator, ASampledHistogramKeepsEveryOtherStatisticExact) {
  torch::manual_seed(4);
  auto x = torch::randn({64, 16, 28, 28});
  x.select(1, 3).zero_();  // dead
  x.select(1, 5).zero_();
  x[17][5][13][2] = 0.5;  // alive by one value
  x[0][0][0][0] = kNaN;
  x[1][2][3][4] = kInf;
  x[9][7][1][1] = -kInf;
  x[30][8][8][8] = 7e7;  // the largest finite value
  TensorAccumulator sampled(limit(16).histogram_sample(4096));
  TensorAccumulator every(limit(16).histogram_sample(0));
  sampled.add(x);
  every.add(x);
  const auto s = published(sampled), e = published(every);

  auto d = x.to(torch::kDouble);
  auto kept = d.masked_select(torch::isfinite(d));
  for (const auto* v : {&s, &e}) {
    EXPECT_EQ(v->n, kept.numel());
    EXPECT_EQ(v->nan, 1);
    EXPECT_EQ(v->pos_inf, 1);
    EXPECT_EQ(v->neg_inf, 1);
    EXPECT_NEAR(v->sum, kept.sum().item<double>(), 1e-9 * kept.abs().sum().item<double>());
    EXPECT_NEAR(v->sum_sq, kept.square().sum().item<double>(), 1e-12 * kept.square().sum().item<double>());
    EXPECT_EQ(v->min, kept.min().item<double>());
    EXPECT_EQ(v->max, 7e7f);
    EXPECT_EQ(v->dead_channels, std::vector<int64_t>({3}));
  }
  EXPECT_EQ(e.binned, x.numel());
  int64_t hist_total = 0;
  for (auto c : s.hist) hist_total += c;
  // Every value is counted once without sampling; with it, 256 runs of 16.
  EXPECT_GE(s.binned, hist_total);  // the rest: a sampled NaN
  EXPECT_LE(s.binned, hist_total + 1);
  EXPECT_LE(s.binned, 4096);
  EXPECT_GE(s.binned, 3000);
  EXPECT_LT(s.binned, e.binned);
  // The sample's median lies within a bin of the whole tensor's.
  const auto& edges = bin_edges();
  auto bin_of_median = [&](double m) { return std::upper_bound(edges.begin(), edges.end(), m) - edges.begin(); };
  EXPECT_LE(std::abs(bin_of_median(s.median.value()) - bin_of_median(e.median.value())), 1);
  // Every channel gets its share of the sample.
  ASSERT_EQ(s.channel_hists.size(), 16u);
  for (const auto& row : s.channel_hists) {
    int64_t total = 0;
    for (auto c : row) total += c;
    EXPECT_GT(total, 4096 / 16 / 4);
  }
  // Another batch samples other places: the same tensor twice gives two
  // different samples.
  TensorAccumulator twice(limit(16).histogram_sample(4096));
  twice.add(x);
  const auto first = published(twice).hist;
  twice.add(x);
  auto second = published(twice).hist;
  for (size_t i = 0; i < second.size(); ++i) second[i] -= first[i];
  EXPECT_NE(first, second);
}

// float64 tensors take the op path, float32 the CPU pass: the same values
// (exact in both) give the same statistics.
TEST(StatsAccumulator, TheOpPathAndTheCpuPassAgree) {
  auto x = torch::randint(-2000, 2000, {8, 5, 6}).to(torch::kFloat) / 64;
  x[0][0][0] = kNaN;
  x[1][2][3] = kInf;
  x[2][4][5] = 0;
  TensorAccumulator by_ops(limit(3)), by_pass(limit(3));
  by_ops.add(x.to(torch::kDouble));
  by_pass.add(x);
  const auto a = published(by_ops), b = published(by_pass);
  EXPECT_EQ(a.hist, b.hist);
  EXPECT_EQ(a.channel_hists, b.channel_hists);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.pos_inf, b.pos_inf);
  EXPECT_DOUBLE_EQ(a.sum, b.sum);
  EXPECT_DOUBLE_EQ(a.sum_sq, b.sum_sq);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_EQ(a.dead_channels, b.dead_channels);
}

TEST(StatsHistogram, MedianIsTheCentreOfTheBinHoldingTheMedian) {
  EXPECT_FALSE(median_from_hist(std::vector<int64_t>(kBins, 0)).has_value());
  // 50 x -2, 49 near zero, 100 x 1: the 100th of 199 values is a 1.
  std::vector<int64_t> hist(kBins, 0);
  hist[bin_index(torch::tensor(-2.0)).item<int64_t>()] = 50;
  hist[kZeroBin] = 49;
  hist[169] = 100;
  EXPECT_EQ(median_from_hist(hist), bin_center(169));
  hist[kZeroBin] = 50;  // 200 values: the lower median (100th) is near zero
  EXPECT_EQ(median_from_hist(hist), 0.0);

  // Known distributions (odd counts): the bin of the true median.
  torch::manual_seed(7);
  const std::vector<torch::Tensor> samples = {torch::rand({1001}) * 99 + 1, torch::randn({2001}).exp(),
                                              -torch::randn({501}).abs() * 1e-4, torch::randn({999}) * 1e5};
  for (const auto& x : samples) {
    TensorAccumulator acc(limit(16));
    acc.add(x);
    const double median = std::get<0>(x.to(torch::kDouble).median(0)).item<double>();
    EXPECT_EQ(published(acc).median, bin_center(bin_index(torch::tensor(median)).item<int64_t>()));
  }
}

// --- one accumulator ---------------------------------------------------

TEST(StatsAccumulator, SaturationZeroBandAndNonFiniteCounts) {
  TensorAccumulator acc(limit(16));
  auto x = torch::tensor({0.0, 1e-12, -5e-10, 2e6, -3e9, kInf, -kInf, kNaN, kNaN, 1.0}, torch::kDouble);
  acc.add(x);
  auto v = published(acc);
  EXPECT_EQ(v.n, 6);
  EXPECT_EQ(v.nan, 2);
  EXPECT_EQ(v.pos_inf, 1);
  EXPECT_EQ(v.neg_inf, 1);
  ASSERT_EQ(v.hist.size(), 211u);
  EXPECT_EQ(v.hist[kZeroBin], 3);
  EXPECT_EQ(v.hist[210], 2);  // 2e6 and +inf saturate
  EXPECT_EQ(v.hist[0], 2);    // -3e9 and -inf
  EXPECT_EQ(v.hist[169], 1);
  int64_t total = 0;
  for (auto c : v.hist) total += c;
  EXPECT_EQ(total, v.n + v.pos_inf + v.neg_inf);  // NaN is not binned
  EXPECT_EQ(v.min, -3e9);
  EXPECT_EQ(v.max, 2e6);
  const double sum = 1e-12 - 5e-10 + 2e6 - 3e9 + 1.0, sum_sq = 1e-24 + 25e-20 + 4e12 + 9e18 + 1.0;
  EXPECT_NEAR(v.sum, sum, std::abs(sum) * 1e-15);
  EXPECT_NEAR(v.sum_sq, sum_sq, sum_sq * 1e-15);
  EXPECT_EQ(v.channels, 0);  // 1-D: no channels
  EXPECT_TRUE(v.channel_hists.empty());
  EXPECT_FALSE(v.dead_count.has_value());

  TensorAccumulator only_nan(limit(16));
  only_nan.add(torch::full({5}, kNaN));
  auto w = published(only_nan);
  EXPECT_EQ(w.n, 0);
  EXPECT_EQ(w.nan, 5);
  EXPECT_FALSE(w.min.has_value());
  EXPECT_FALSE(w.max.has_value());
  EXPECT_FALSE(w.mean().has_value());
  EXPECT_FALSE(w.median.has_value());
}

TEST(StatsAccumulator, DeadChannelsSawValuesAllInTheZeroBand) {
  torch::manual_seed(1);
  auto x = torch::randn({4, 6, 3});
  x.select(1, 1).zero_();
  x.select(1, 4).fill_(1e-12);
  x.select(1, 2).zero_();
  x[0][2][0] = kNaN;  // a NaN keeps a channel alive
  x.select(1, 5).zero_();
  x[3][5][2] = 1e-3;
  TensorAccumulator acc(limit(16));
  acc.add(x);
  auto v = published(acc);
  EXPECT_EQ(v.channels, 6);
  ASSERT_EQ(v.channel_hists.size(), 6u);
  ASSERT_TRUE(v.dead_count.has_value());
  EXPECT_EQ(*v.dead_count, 2);
  EXPECT_EQ(v.dead_channels, (std::vector<int64_t>{1, 4}));
  // A later batch where channel 4 wakes up.
  auto y = torch::zeros({2, 6, 3});
  y.select(1, 4).fill_(0.5);
  acc.add(y);
  v = published(acc);
  EXPECT_EQ(v.dead_channels, (std::vector<int64_t>{1}));
}

TEST(StatsAccumulator, PerChannelHistogramsUpToTheLimitAndTheLayerOverAll) {
  torch::manual_seed(2);
  auto x = torch::randn({3, 40, 5}) * torch::arange(1, 41).view({1, 40, 1});
  for (const auto& detail : {limit(16), unlimited()}) {
    TensorAccumulator acc(detail);
    acc.add(x);
    acc.add(x * -3);
    auto both = torch::cat({x, x * -3});
    auto v = published(acc);
    const size_t rows = detail.channel_limit_enabled() ? 16 : 40;
    EXPECT_EQ(v.channels, 40);
    ASSERT_EQ(v.channel_hists.size(), rows);
    EXPECT_EQ(v.hist, reference_hist<float>(both));
    std::vector<int64_t> sum(kBins, 0);
    for (size_t c = 0; c < rows; ++c) {
      EXPECT_EQ(v.channel_hists[c], reference_hist<float>(both.select(1, c))) << c;
      for (int b = 0; b < kBins; ++b) sum[b] += v.channel_hists[c][b];
    }
    if (rows == 40) {
      EXPECT_EQ(sum, v.hist);
    }
  }
  // Features of a 2-D tensor are its channels.
  TensorAccumulator flat(limit(4));
  flat.add(torch::randn({8, 10}));
  auto v = published(flat);
  EXPECT_EQ(v.channels, 10);
  EXPECT_EQ(v.channel_hists.size(), 4u);
}

TEST(StatsAccumulator, Dim1ChangingMidStreamEndsPerChannelTrackingForGood) {
  for (const auto& detail : {limit(4), unlimited()}) {
    TensorAccumulator acc(detail);
    auto a = torch::randn({2, 5, 8});
    auto b = torch::randn({2, 7, 8});
    auto c = torch::randn({2, 5, 8});
    acc.add(a);
    EXPECT_EQ(published(acc).channels, 5);
    EXPECT_NO_THROW(acc.add(b));
    EXPECT_NO_THROW(acc.add(c));
    auto v = published(acc);
    EXPECT_EQ(v.channels, 0);
    EXPECT_TRUE(v.channel_hists.empty());
    EXPECT_FALSE(v.dead_count.has_value());
    EXPECT_EQ(v.n, 80 + 112 + 80);
    EXPECT_EQ(v.hist, reference_hist<float>(torch::cat({a.reshape(-1), b.reshape(-1), c.reshape(-1)})));
  }
}

TEST(StatsAccumulator, HalfPrecisionIsWidenedOnTheDevice) {
  const std::vector<double> values = {-2.0, 0.5, 0.0, 65504.0, -kInf, kNaN, 1e-3};
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    auto x = torch::tensor(values, torch::kDouble).to(dtype);
    auto widened = x.to(torch::kDouble);
    TensorAccumulator acc(limit(16));
    acc.add(x.view({1, 7}));
    auto v = published(acc);
    EXPECT_EQ(v.n, 5);
    EXPECT_EQ(v.nan, 1);
    EXPECT_EQ(v.neg_inf, 1);
    EXPECT_EQ(v.min, -2.0);
    EXPECT_EQ(v.max, widened[3].item<double>());
    const double finite_sum = torch::nan_to_num(widened, 0, 0, 0).sum().item<double>();
    EXPECT_EQ(v.sum, finite_sum);
    EXPECT_EQ(v.hist, reference_hist<float>(x.to(torch::kFloat)));
    EXPECT_EQ(bins_of(x), bins_of(x.to(torch::kFloat)));
  }
}

TEST(StatsAccumulator, EmptyTensorsChangeNothing) {
  TensorAccumulator acc(limit(16));
  acc.add(torch::empty({0, 4}));
  acc.add(torch::Tensor());
  auto v = published(acc);
  EXPECT_EQ(v.n, 0);
  EXPECT_EQ(v.nan, 0);
  acc.add(torch::ones({2, 4}));
  acc.add(torch::empty({0, 9}));  // no values: not a change of dim 1 either
  v = published(acc);
  EXPECT_EQ(v.n, 8);
  EXPECT_EQ(v.channels, 4);
  EXPECT_EQ(v.sum, 8.0);
}

TEST(StatsAccumulator, SumsOverManyBatchesEqualFloat64DirectSums) {
  torch::manual_seed(5);
  TensorAccumulator acc(limit(16));
  std::vector<torch::Tensor> seen;
  for (int batch = 0; batch < 300; ++batch) {
    // Large offset, small spread: what float32 running sums get wrong.
    auto x = (torch::randn({16, 8, 4}) * 0.01 + 1000.0 + batch).to(torch::kFloat);
    if (batch % 50 == 0) x[0][0][0] = kNaN;
    acc.add(x);
    seen.push_back(x.to(torch::kDouble).reshape({-1}));
  }
  auto all = torch::cat(seen);
  auto finite = all.masked_select(torch::isfinite(all));
  auto v = published(acc);
  EXPECT_EQ(v.n, finite.numel());
  EXPECT_EQ(v.nan, 6);
  const double sum = finite.sum().item<double>();
  const double sum_sq = finite.square().sum().item<double>();
  EXPECT_NEAR(v.sum, sum, std::abs(sum) * 1e-13);
  EXPECT_NEAR(v.sum_sq, sum_sq, std::abs(sum_sq) * 1e-13);
  EXPECT_EQ(v.min, finite.min().item<double>());
  EXPECT_EQ(v.max, finite.max().item<double>());
  EXPECT_NEAR(v.mean().value(), finite.mean().item<double>(), 1e-9);
  EXPECT_NEAR(v.std().value(), finite.std(/*unbiased=*/false).item<double>(), 1e-6);
}

TEST(StatsAccumulator, CollapseKeepsScalarsMedianAndDeadCountAndFreesTheDevice) {
  auto x = torch::randn({4, 6, 3});
  x.select(1, 2).zero_();
  TensorAccumulator acc(limit(16));
  acc.add(x);
  auto before = published(acc);
  EXPECT_GT(acc.bytes(), 6u * kSlots * sizeof(int64_t));
  acc.collapse();
  EXPECT_TRUE(acc.collapsed());
  EXPECT_EQ(acc.bytes(), 0u);
  EXPECT_TRUE(acc.buffers().empty());
  auto after = acc.view({});
  EXPECT_TRUE(after.hist.empty());
  EXPECT_TRUE(after.channel_hists.empty());
  EXPECT_TRUE(after.dead_channels.empty());
  EXPECT_EQ(after.median, before.median);
  EXPECT_EQ(after.dead_count, std::optional<int64_t>(1));
  EXPECT_EQ(after.n, before.n);
  EXPECT_EQ(after.sum, before.sum);
  EXPECT_EQ(after.sum_sq, before.sum_sq);
  EXPECT_EQ(after.min, before.min);
  EXPECT_EQ(after.max, before.max);
  acc.add(torch::ones({4, 6, 3}));  // its epoch is over
  EXPECT_EQ(acc.view({}).n, before.n);
}

// Every field of two snapshots, doubles bit for bit (a -0.0 or a NaN sum
// must come back as it went in).
void expect_identical(const TensorStatsSnapshot& a, const TensorStatsSnapshot& b) {
  auto bits = [](double v) { return std::bit_cast<uint64_t>(v); };
  auto same = [&](const std::optional<double>& x, const std::optional<double>& y) {
    return x.has_value() == y.has_value() && (!x || bits(*x) == bits(*y));
  };
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(bits(a.sum), bits(b.sum));
  EXPECT_EQ(bits(a.sum_sq), bits(b.sum_sq));
  EXPECT_TRUE(same(a.min, b.min));
  EXPECT_TRUE(same(a.max, b.max));
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.pos_inf, b.pos_inf);
  EXPECT_EQ(a.neg_inf, b.neg_inf);
  EXPECT_EQ(a.hist, b.hist);
  EXPECT_EQ(a.channel_hists, b.channel_hists);
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.binned, b.binned);
  EXPECT_TRUE(same(a.median, b.median));
  EXPECT_EQ(a.dead_count, b.dead_count);
  EXPECT_EQ(a.dead_channels, b.dead_channels);
  EXPECT_EQ(a.dtype, b.dtype);
}

TEST(StatsCollapsed, EveryFieldComesBackForEveryDtypeAndEveryAbsentOptional) {
  const double awkward[] = {-0.0, std::numeric_limits<double>::denorm_min(), -kInf, kNaN, 1e308, -3.25};
  for (int d = 0; d < static_cast<int>(c10::ScalarType::NumOptions); ++d) {
    for (int present = 0; present < 16; ++present) {
      TensorStatsSnapshot v;
      v.n = (int64_t{1} << 40) + d;
      v.sum = awkward[d % 6];
      v.sum_sq = awkward[(d + 1) % 6];
      if (present & 1) v.min = awkward[(d + 2) % 6];
      if (present & 2) v.max = awkward[(d + 3) % 6];
      if (present & 4) v.median = awkward[(d + 4) % 6];
      if (present & 8) v.dead_count = present;
      v.nan = 3 + d;
      v.pos_inf = 5;
      v.neg_inf = std::numeric_limits<int64_t>::max();
      v.channels = 64;
      v.dtype = static_cast<c10::ScalarType>(d);
      SCOPED_TRACE(testing::Message() << "dtype " << d << ", present " << present);
      expect_identical(CollapsedStats(v).expand(), v);
    }
  }
}

TEST(StatsCollapsed, TheBinsAreNotKept) {
  TensorStatsSnapshot v;
  v.n = 2;
  v.hist.assign(kBins, 1);
  v.channel_hists.assign(2, std::vector<int64_t>(kBins, 1));
  v.binned = 2;
  v.dead_channels = {1};
  v.dead_count = 1;
  const auto back = CollapsedStats(v).expand();
  EXPECT_TRUE(back.hist.empty());
  EXPECT_TRUE(back.channel_hists.empty());
  EXPECT_TRUE(back.dead_channels.empty());
  EXPECT_EQ(back.binned, 0);
  EXPECT_EQ(back.dead_count, std::optional<int64_t>(1));
  EXPECT_EQ(back.n, 2);
}

// --- the store ---------------------------------------------------------

const LayerStatsSnapshot& bucket(const WatchSnapshot& s, const std::string& layer, const std::string& phase,
                                 int64_t epoch) {
  for (const auto& b : s.layers.at({layer, phase})) {
    if (b.epoch == epoch) return b;
  }
  throw std::runtime_error("no bucket");
}

TEST(StatsStore, BucketsPerLayerPhaseEpochCountBatchesAndKinds) {
  StatsStore store;
  store.add("fc", "train", 0, Kind::kActivation, torch::ones({2, 3}));
  store.add("fc", "train", 0, Kind::kGradient, torch::full({2, 3}, -1.0));
  store.add("relu", "train", 0, Kind::kActivation, torch::ones({2, 3}));
  store.end_batch();
  store.add("fc", "train", 0, Kind::kActivation, torch::ones({2, 3}));
  store.end_batch();
  store.end_batch();  // nothing touched
  auto s = store.publish();
  const auto& fc = bucket(*s, "fc", "train", 0);
  EXPECT_EQ(fc.batches, 2);
  ASSERT_TRUE(fc.activation && fc.gradient);
  EXPECT_EQ(fc.activation->n, 12);
  EXPECT_EQ(fc.gradient->n, 6);
  EXPECT_EQ(fc.gradient->sum, -6.0);
  const auto& relu = bucket(*s, "relu", "train", 0);
  EXPECT_EQ(relu.batches, 1);
  EXPECT_FALSE(relu.gradient.has_value());
  EXPECT_EQ(s->device_bytes, store.device_bytes());
  EXPECT_GT(s->device_bytes, 0u);
}

TEST(StatsStore, ANewerEpochCollapsesTheOlderBucketOfItsPhaseOnly) {
  auto x = torch::randn({4, 6, 3});
  x.select(1, 0).zero_();
  StatsStore store;
  store.add("fc", "train", 0, Kind::kActivation, x);
  store.add("fc", "val", 0, Kind::kActivation, x);
  store.end_batch();
  const auto per_accumulator = store.device_bytes() / 2;
  auto s0 = store.publish();
  store.add("fc", "train", 1, Kind::kActivation, x * 2);
  store.end_batch();  // the epoch boundary's one batched copy
  EXPECT_EQ(store.device_bytes(), 2 * per_accumulator);
  auto s = store.publish();
  const auto& old = bucket(*s, "fc", "train", 0);
  EXPECT_TRUE(old.activation->hist.empty());
  EXPECT_EQ(old.activation->median, bucket(*s0, "fc", "train", 0).activation->median);
  EXPECT_EQ(old.activation->dead_count, std::optional<int64_t>(1));
  EXPECT_EQ(old.activation->n, 72);
  EXPECT_EQ(bucket(*s, "fc", "train", 1).activation->hist.size(), 211u);
  EXPECT_EQ(bucket(*s, "fc", "val", 0).activation->hist.size(), 211u);
  ASSERT_EQ(s->layers.at({"fc", "train"}).size(), 2u);
  EXPECT_EQ(s->layers.at({"fc", "train"})[0].epoch, 0);  // ascending epochs

  // publish() collapses from its own copy when no end_batch() came between.
  store.add("fc", "val", 1, Kind::kActivation, x);
  auto s2 = store.publish();
  EXPECT_TRUE(bucket(*s2, "fc", "val", 0).activation->hist.empty());
  EXPECT_EQ(bucket(*s2, "fc", "val", 0).activation->n, 72);
  EXPECT_EQ(store.device_bytes(), 2 * per_accumulator);
  // An older epoch's bucket takes no more values.
  store.add("fc", "val", 0, Kind::kActivation, x);
  EXPECT_EQ(bucket(*store.publish(), "fc", "val", 0).activation->n, 72);
}

// Store -> published snapshot across the collapse: an older epoch reports
// what its last live view reported, bins aside, whatever the dtype and
// whichever optional fields are absent.
TEST(StatsStore, ACollapsedEpochPublishesWhatItsLiveViewDidButTheBins) {
  auto per_channel = torch::randn({4, 3, 5});
  per_channel.select(1, 1).zero_();  // one dead channel
  auto with_nonfinite = torch::randn({6});
  with_nonfinite[0] = kNaN;
  with_nonfinite[1] = kInf;
  with_nonfinite[2] = -kInf;
  const std::map<std::string, torch::Tensor> layers = {
      {"float", per_channel},
      {"half", per_channel.to(torch::kHalf)},
      {"bfloat16", per_channel.to(torch::kBFloat16)},
      {"double", per_channel.to(torch::kDouble)},
      {"int", torch::arange(12).view({3, 4}).to(torch::kInt)},
      {"nonfinite", with_nonfinite},
      {"all_nan", torch::full({2, 3}, kNaN)},  // no min, max or median
      {"negative_zero", torch::full({2, 2}, -0.0)},
  };
  StatsStore store;
  for (const auto& [name, t] : layers) {
    store.add(name, "train", 0, Kind::kActivation, t);
    store.add(name, "train", 0, Kind::kGradient, t * 0.5);
  }
  store.end_batch();
  const auto live = store.publish();
  for (const auto& [name, t] : layers) store.add(name, "train", 1, Kind::kActivation, t);
  store.end_batch();
  const auto later = store.publish();
  for (const auto& [name, t] : layers) {
    SCOPED_TRACE(name);
    const auto& before = bucket(*live, name, "train", 0);
    const auto& after = bucket(*later, name, "train", 0);
    EXPECT_EQ(after.batches, before.batches);
    for (const auto& [was, is] :
         {std::pair{&before.activation, &after.activation}, {&before.gradient, &after.gradient}}) {
      ASSERT_TRUE(*was && *is);
      auto expected = **was;
      EXPECT_FALSE(expected.hist.empty());
      expected.hist.clear();
      expected.channel_hists.clear();
      expected.dead_channels.clear();
      expected.binned = 0;
      expect_identical(**is, expected);
    }
  }
  const auto& all_nan = *bucket(*later, "all_nan", "train", 0).activation;
  EXPECT_FALSE(all_nan.min || all_nan.max || all_nan.median);
  EXPECT_EQ(all_nan.nan, 6);
  EXPECT_EQ(bucket(*later, "half", "train", 0).activation->dtype, c10::ScalarType::Half);
  EXPECT_EQ(bucket(*later, "int", "train", 0).activation->dtype, c10::ScalarType::Int);
  EXPECT_EQ(bucket(*later, "float", "train", 0).activation->dead_count, std::optional<int64_t>(1));
}

TEST(StatsStore, DropFromEpochForgetsBucketsSamplesAndPoints) {
  StatsStore store;
  torch::nn::Linear fc(2, 2);
  std::vector<std::pair<std::string, torch::Tensor>> params = {{"fc.weight", fc->weight}};
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    store.add("fc", "train", epoch, Kind::kActivation, torch::ones({2, 2}));
    store.begin_parameter_sample(epoch, params);
    store.finish_parameter_sample({{"fc.weight", "fc"}});
    store.log_scalar("loss", "", "train", epoch, 0, epoch, 1.0 / (epoch + 1));
    store.end_batch();
  }
  EXPECT_FALSE(store.wants_parameter_sample(2));
  store.drop_from_epoch(2);
  auto s = store.publish();
  const auto& buckets = s->layers.at({"fc", "train"});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets.back().epoch, 1);
  ASSERT_EQ(s->parameters.at("fc.weight").size(), 2u);
  EXPECT_EQ(s->parameters.at("fc.weight").back().epoch, 1);
  ASSERT_EQ(s->series.size(), 1u);
  EXPECT_EQ(s->series[0].points.size(), 2u);
  EXPECT_TRUE(store.wants_parameter_sample(2));
  EXPECT_FALSE(store.wants_parameter_sample(1));
  // Training again from epoch 2 builds a fresh bucket.
  store.add("fc", "train", 2, Kind::kActivation, torch::ones({2, 2}));
  store.end_batch();
  EXPECT_EQ(bucket(*store.publish(), "fc", "train", 2).activation->n, 4);
  store.drop_from_epoch(0);
  s = store.publish();
  EXPECT_TRUE(s->layers.empty());
  EXPECT_TRUE(s->parameters.empty());
  EXPECT_TRUE(s->series.empty());
  EXPECT_EQ(store.device_bytes(), 0u);
}

TEST(StatsStore, KeepOnlyDropsOtherLayers) {
  StatsStore store;
  for (const char* layer : {"a", "b", "c"}) store.add(layer, "train", 0, Kind::kActivation, torch::ones({3}));
  store.end_batch();
  store.keep_only({"a", "c", "never-seen"});
  auto s = store.publish();
  EXPECT_EQ(s->layers.size(), 2u);
  EXPECT_EQ(s->layers.count({"b", "train"}), 0u);
  EXPECT_EQ(s->layers.count({"c", "train"}), 1u);
}

TEST(StatsStore, ADifferentDetailFlushes) {
  StatsStore store(limit(16));
  store.add("a", "train", 0, Kind::kActivation, torch::ones({2, 40}));
  store.log_scalar("loss", "", "train", 0, 0, 0.0, 1.0);
  EXPECT_FALSE(store.set_detail(limit(16)));
  EXPECT_EQ(store.publish()->layers.size(), 1u);
  EXPECT_TRUE(store.set_detail(unlimited()));
  EXPECT_EQ(store.detail(), unlimited());
  auto s = store.publish();
  EXPECT_TRUE(s->layers.empty());
  // A logged loss curve survives a detail change.
  ASSERT_EQ(s->series.size(), 1u);
  EXPECT_EQ(s->series[0].points.size(), 1u);
  store.add("a", "train", 0, Kind::kActivation, torch::ones({2, 40}));
  EXPECT_EQ(bucket(*store.publish(), "a", "train", 0).activation->channel_hists.size(), 40u);
}

TEST(StatsStore, ParameterSamplesOverARealOptimizerStep) {
  torch::manual_seed(11);
  torch::nn::Linear fc(4, 3);
  torch::optim::SGD sgd(fc->parameters(), torch::optim::SGDOptions(0.1));
  auto zero = torch::zeros({5});  // a parameter of zeros: no ratio to take
  std::vector<std::pair<std::string, torch::Tensor>> params = {
      {"fc.weight", fc->weight}, {"fc.bias", fc->bias}, {"frozen", zero}};
  StatsStore store;
  ASSERT_TRUE(store.wants_parameter_sample(0));
  sgd.zero_grad();
  torch::mse_loss(fc(torch::randn({8, 4})), torch::randn({8, 3})).backward();
  store.begin_parameter_sample(0, params);
  EXPECT_FALSE(store.wants_parameter_sample(0));
  auto before = fc->weight.detach().clone();
  auto grad = fc->weight.grad().clone();
  sgd.step();
  store.finish_parameter_sample({{"fc.weight", "fc"}, {"fc.bias", "fc"}});
  EXPECT_FALSE(store.wants_parameter_sample(0));
  EXPECT_TRUE(store.wants_parameter_sample(1));

  auto s = store.publish();
  const auto& w = s->parameters.at("fc.weight").at(0);
  auto after = fc->weight.detach().to(torch::kDouble);
  auto b = before.to(torch::kDouble);
  EXPECT_EQ(w.epoch, 0);
  EXPECT_NEAR(w.value_norm, after.norm().item<double>(), 1e-12);
  EXPECT_NEAR(w.mean, after.mean().item<double>(), 1e-12);
  EXPECT_NEAR(w.std, after.std(/*unbiased=*/false).item<double>(), 1e-12);
  EXPECT_EQ(w.min, after.min().item<double>());
  EXPECT_EQ(w.max, after.max().item<double>());
  auto g = grad.to(torch::kDouble);
  ASSERT_TRUE(w.grad_norm && w.grad_mean && w.grad_std && w.grad_min && w.grad_max);
  EXPECT_NEAR(*w.grad_norm, g.norm().item<double>(), 1e-12);
  EXPECT_NEAR(*w.grad_mean, g.mean().item<double>(), 1e-12);
  EXPECT_NEAR(*w.grad_std, g.std(false).item<double>(), 1e-12);
  EXPECT_EQ(*w.grad_min, g.min().item<double>());
  ASSERT_TRUE(w.update_ratio);
  const double ratio = ((after - b).norm() / b.norm()).item<double>();
  EXPECT_GT(ratio, 0);
  EXPECT_NEAR(*w.update_ratio, ratio, 1e-12);
  // Plain SGD: the step is lr * grad.
  EXPECT_NEAR(*w.update_ratio, 0.1 * g.norm().item<double>() / b.norm().item<double>(), 1e-6);

  const auto& frozen = s->parameters.at("frozen").at(0);
  EXPECT_FALSE(frozen.update_ratio.has_value());
  EXPECT_FALSE(frozen.grad_norm.has_value());
  EXPECT_EQ(s->owner.at("fc.bias"), "fc");
  EXPECT_EQ(s->owner.count("frozen"), 0u);

  // An eval batch: nothing changes the weights.
  store.begin_parameter_sample(1, params);
  store.finish_parameter_sample({});
  s = store.publish();
  EXPECT_EQ(s->parameters.at("fc.weight").size(), 2u);
  EXPECT_EQ(s->parameters.at("fc.weight").at(1).update_ratio, std::optional<double>(0.0));
  EXPECT_EQ(store.device_bytes(), 0u);  // the clones are gone
}

TEST(StatsStore, PublishedSnapshotsAreNumberedAndNeverChange) {
  StatsStore store;
  store.add("fc", "train", 0, Kind::kActivation, torch::ones({4}));
  store.log_scalar("loss", "", "train", 0, 0, 0.0, 2.0);
  auto first = store.publish();
  store.add("fc", "train", 0, Kind::kActivation, torch::ones({4}));
  store.log_scalar("loss", "", "train", 0, 1, 0.5, 1.0);
  store.log_scalar("loss", "", "val", 0, std::nullopt, 1.0, 3.0);
  store.log_scalar("acc", "fc", "train", 0, 1, 0.5, 0.9);
  store.log_scalar("loss", "", "train", 0, 2, 0.75, kNaN);
  auto second = store.publish();
  EXPECT_EQ(first->sequence + 1, second->sequence);
  EXPECT_EQ(bucket(*first, "fc", "train", 0).activation->n, 4);
  EXPECT_EQ(bucket(*second, "fc", "train", 0).activation->n, 8);
  ASSERT_EQ(first->series.size(), 1u);
  EXPECT_EQ(first->series[0].points.size(), 1u);
  ASSERT_EQ(second->series.size(), 3u);
  const auto& loss = second->series[0];
  EXPECT_EQ(loss.name, "loss");
  EXPECT_EQ(loss.phase, "train");
  ASSERT_EQ(loss.points.size(), 3u);
  EXPECT_EQ(loss.points[1].batch, std::optional<int64_t>(1));
  EXPECT_EQ(loss.points[1].x, 0.5);
  EXPECT_TRUE(std::isnan(loss.points[2].value));
  EXPECT_EQ(second->series[2].layer, "fc");
  EXPECT_FALSE(second->series[1].points[0].batch.has_value());
  EXPECT_GT(second->host_bytes(), first->host_bytes());
}

// What the engine holds for a 200-layer network (64-channel activations,
// train and val, activation gradients in train) after 100 epochs: older
// epochs hold no device memory, so it does not grow with epochs.
TEST(StatsStore, MemoryOfTwoHundredLayersOverAHundredEpochs) {
  constexpr int kLayers = 200, kEpochs = 100;
  std::vector<std::string> layers;
  for (int i = 0; i < kLayers; ++i) layers.push_back("layers." + std::to_string(i));
  auto act = torch::randn({2, 64});
  auto grad = torch::randn({2, 64}) * 1e-3;
  StatsStore store;
  size_t after_first = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (const auto& l : layers) {
      store.add(l, "train", epoch, Kind::kActivation, act);
      store.add(l, "train", epoch, Kind::kGradient, grad);
    }
    store.end_batch();
    for (const auto& l : layers) store.add(l, "val", epoch, Kind::kActivation, act);
    store.end_batch();
    if (epoch == 0) after_first = store.device_bytes();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto s = store.publish();
  std::cout << "[ stats memory ] " << kLayers << " layers x " << kEpochs << " epochs: device " << s->device_bytes / 1024
            << " KiB (after epoch 0: " << after_first / 1024 << " KiB), published snapshot " << s->host_bytes() / 1024
            << " KiB on the host; " << 3 * kLayers * kEpochs << " adds in " << seconds << " s\n";
  EXPECT_EQ(s->device_bytes, after_first);
  EXPECT_EQ(s->layers.at({"layers.7", "val"}).size(), static_cast<size_t>(kEpochs));
  EXPECT_EQ(s->layers.at({"layers.7", "val"}).back().activation->hist.size(), 211u);
  EXPECT_EQ(s->layers.at({"layers.7", "train"}).front().gradient->n, 128);
  // The view keeps no room it does not use (its vectors are its memory).
  for (const auto& [key, buckets] : s->layers) EXPECT_EQ(buckets.capacity(), buckets.size()) << key.first;
}

}  // namespace
}  // namespace nansense::stats
