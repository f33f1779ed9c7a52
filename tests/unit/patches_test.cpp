// Min/Max patches against a brute-force ranking of every (batch, sample)
// on known tensors: the kept samples and their order, scores, positions,
// crops (within the uint8 quantisation), activation maps, NaN handling, the
// channel limit, flat activations, ragged batches, refusals, and the store's
// epoch rules (only the newest epoch of a phase keeps patches).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nansense/stats.h"
#include "stats/map_extremes.h"
#include "stats/patches.h"
#include "stats/stats_store.h"

namespace nansense::stats {
namespace {

struct Candidate {
  float score;
  int64_t batch, sample, y, x;
};

// Every (batch, sample) of channel c ranked by its spatial max (min), or mean.
std::vector<Candidate> brute_force(const std::vector<torch::Tensor>& acts, int64_t c, PatchRanking ranking) {
  std::vector<Candidate> all;
  for (size_t b = 0; b < acts.size(); ++b) {
    const auto& a = acts[b];
    const int64_t w = a.dim() == 4 ? a.size(3) : 1;
    for (int64_t s = 0; s < a.size(0); ++s) {
      const auto map = a[s][c].reshape({-1});
      Candidate k{0, static_cast<int64_t>(b), s, 0, 0};
      int64_t at = 0;
      if (ranking == PatchRanking::kMaxPixel) {
        at = map.argmax().item<int64_t>();
        k.score = map[at].item<float>();
      } else if (ranking == PatchRanking::kMinPixel) {
        at = map.argmin().item<int64_t>();
        k.score = map[at].item<float>();
      } else {
        k.score = map.mean().item<float>();
      }
      k.y = at / w;
      k.x = at % w;
      all.push_back(k);
    }
  }
  const bool lowest = ranking == PatchRanking::kMinPixel || ranking == PatchRanking::kMinAverage;
  std::sort(all.begin(), all.end(),
            [&](const auto& p, const auto& q) { return lowest ? p.score < q.score : p.score > q.score; });
  return all;
}

const PatchGallery& ranking_of(const std::vector<PatchGallery>& views, PatchRanking r) {
  for (const auto& v : views) {
    if (v.ranking == r) return v;
  }
  throw std::runtime_error("no such ranking in the view");
}

TEST(PatchCollector, KeepsTheBruteForceTopKWithTheirCropsAndMaps) {
  torch::manual_seed(3);
  PatchSettings settings;
  settings.samples = 4;
  settings.averages = true;
  PatchCollector gallery(settings);
  std::vector<torch::Tensor> acts, inputs;
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t batch = b == 2 ? 3 : 7;  // a ragged last batch
    acts.push_back(torch::randn({batch, 3, 8, 8}));
    inputs.push_back(torch::rand({batch, 1, 32, 32}));
    ASSERT_TRUE(gallery.add(acts.back(), inputs.back(), b));
  }
  EXPECT_EQ(gallery.skipped(), 0);
  const auto views = gallery.view();
  ASSERT_EQ(views.size(), 4u);
  const int64_t side = crop_side(32, 8);
  EXPECT_EQ(side, 16);
  for (auto r :
       {PatchRanking::kMaxPixel, PatchRanking::kMinPixel, PatchRanking::kMaxAverage, PatchRanking::kMinAverage}) {
    SCOPED_TRACE(std::string(to_string(r)));
    const auto& v = ranking_of(views, r);
    const bool average = r == PatchRanking::kMaxAverage || r == PatchRanking::kMinAverage;
    ASSERT_EQ(v.samples, 4);
    ASSERT_EQ(v.channels, 3);
    EXPECT_EQ(v.crops.size(3), average ? 32 : side);
    for (int64_t c = 0; c < 3; ++c) {
      const auto expected = brute_force(acts, c, r);
      for (int64_t a = 0; a < 4; ++a) {
        const auto& slot = v.slot(a, c);
        const auto& e = expected[static_cast<size_t>(a)];
        ASSERT_TRUE(slot.filled);
        EXPECT_EQ(slot.batch, e.batch) << "channel " << c << " rank " << a;
        EXPECT_EQ(slot.sample, e.sample) << "channel " << c << " rank " << a;
        EXPECT_NEAR(slot.score, e.score, 1e-5);
        const auto& input = inputs[static_cast<size_t>(e.batch)][e.sample];
        torch::Tensor crop;
        if (average) {
          crop = input;
        } else {
          EXPECT_EQ(slot.y, e.y);
          EXPECT_EQ(slot.x, e.x);
          EXPECT_EQ(slot.top, crop_origin(e.y, 32, 8, side));
          EXPECT_EQ(slot.left, crop_origin(e.x, 32, 8, side));
          crop = input.narrow(1, slot.top, side).narrow(2, slot.left, side);
        }
        // uint8 levels over the crop's own range: within half a level.
        const double level = (crop.max() - crop.min()).item<double>() / 254;
        EXPECT_LE((v.crops[a][c] - crop).abs().max().item<double>(), level / 2 + 1e-6);
        const auto map = acts[static_cast<size_t>(e.batch)][e.sample][c];
        const double map_level = (map.max() - map.min()).item<double>() / 254;
        EXPECT_LE((v.heat[a][c] - map).abs().max().item<double>(), map_level / 2 + 1e-6);
      }
    }
  }
}

// The CPU's plain loops and the tensor ops a device runs keep the same
// galleries: channels past the limit (a narrowed activation), a NaN and an
// infinity in the maps, a ragged batch, flat activations, the averages.
TEST(PatchCollector, TheCpuLoopsAndTheTensorOpsKeepTheSameGalleries) {
  struct Restore {
    ~Restore() { set_patch_path(PatchPath::kCpuLoops); }
  } restore;
  for (const bool flat : {false, true}) {
    torch::manual_seed(11);
    std::vector<torch::Tensor> acts, inputs;
    for (int64_t b = 0; b < 6; ++b) {
      const int64_t batch = b == 5 ? 3 : 9;
      auto act = flat ? torch::randn({batch, 20}) : torch::randn({batch, 20, 6, 6});
      if (b == 1) act.view({-1})[7] = std::numeric_limits<float>::quiet_NaN();
      if (b == 2) act.view({-1})[40] = std::numeric_limits<float>::infinity();
      acts.push_back(act);
      inputs.push_back(torch::rand({batch, 3, 24, 24}));
    }
    PatchSettings settings;
    settings.samples = 3;
    settings.channel_limit = 5;
    settings.averages = true;
    std::vector<std::vector<PatchGallery>> views;
    for (auto path : {PatchPath::kCpuLoops, PatchPath::kTensorOps}) {
      set_patch_path(path);
      PatchCollector gallery(settings);
      for (size_t b = 0; b < acts.size(); ++b) ASSERT_TRUE(gallery.add(acts[b], inputs[b], static_cast<int64_t>(b)));
      views.push_back(gallery.view());
    }
    ASSERT_EQ(views[0].size(), views[1].size());
    ASSERT_EQ(views[0].size(), flat ? 2u : 4u);
    for (size_t r = 0; r < views[0].size(); ++r) {
      const auto &loops = views[0][r], &ops = views[1][r];
      ASSERT_EQ(loops.ranking, ops.ranking);
      ASSERT_EQ(loops.slots.size(), ops.slots.size());
      for (size_t j = 0; j < loops.slots.size(); ++j) {
        const auto &a = loops.slots[j], &b = ops.slots[j];
        ASSERT_EQ(a.filled, b.filled) << to_string(loops.ranking) << " slot " << j;
        if (!a.filled) continue;
        EXPECT_EQ(std::tie(a.batch, a.sample, a.y, a.x, a.top, a.left),
                  std::tie(b.batch, b.sample, b.y, b.x, b.top, b.left))
            << (flat ? "flat " : "") << to_string(loops.ranking) << " slot " << j;
        EXPECT_TRUE(a.score == b.score || (std::isnan(a.score) && std::isnan(b.score)));
      }
      EXPECT_TRUE(torch::allclose(loops.crops, ops.crops, 1e-6, 1e-6, /*equal_nan=*/true));
      ASSERT_EQ(loops.heat.defined(), ops.heat.defined());
      if (loops.heat.defined()) EXPECT_TRUE(torch::allclose(loops.heat, ops.heat, 1e-6, 1e-6, /*equal_nan=*/true));
    }
  }
}

// The pass PatchCollector made over each map before the extremes were
// vectorised and taken ahead (kept here as the reference): eight lanes of
// running extremes, joined lane by lane, then the tail; the first position
// holding each extreme; NaN extremes at position 0 for a map with a NaN.
MapExtreme extremes_before(const float* v, int64_t len) {
  constexpr int kLanes = 8;
  float his[kLanes], los[kLanes];
  int nans[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    his[k] = -std::numeric_limits<float>::infinity();
    los[k] = std::numeric_limits<float>::infinity();
    nans[k] = 0;
  }
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = v[j + k];
      his[k] = x > his[k] ? x : his[k];
      los[k] = x < los[k] ? x : los[k];
      nans[k] |= x != x;
    }
  }
  float hi = his[0], lo = los[0];
  int unordered = nans[0];
  for (int k = 1; k < kLanes; ++k) {
    hi = his[k] > hi ? his[k] : hi;
    lo = los[k] < lo ? los[k] : lo;
    unordered |= nans[k];
  }
  for (; j < len; ++j) {
    const float x = v[j];
    hi = x > hi ? x : hi;
    lo = x < lo ? x : lo;
    unordered |= x != x;
  }
  if (unordered) return {std::nanf(""), std::nanf(""), 0, 0};
  int64_t hi_j = 0, lo_j = 0;
  while (hi_j < len && v[hi_j] != hi) ++hi_j;
  while (lo_j < len && v[lo_j] != lo) ++lo_j;
  return {hi, lo, hi_j, lo_j};
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// Values that tie, signed zeros, infinities and (now and then) a NaN: ties
// and the sign of a zero are what an order of comparisons could change.
std::vector<float> awkward_map(std::mt19937& rng, int64_t len) {
  std::uniform_int_distribution<int> kind(0, 99), level(-3, 3);
  std::vector<float> v(static_cast<size_t>(len));
  const bool with_nan = kind(rng) < 15;
  for (auto& x : v) {
    const int k = kind(rng);
    x = k < 20   ? 0.0f
        : k < 40 ? -0.0f
        : k < 41 ? std::numeric_limits<float>::infinity()
        : k < 42 ? -std::numeric_limits<float>::infinity()
                 : static_cast<float>(level(rng));
  }
  if (with_nan) v[static_cast<size_t>(kind(rng) % len)] = std::nanf("");
  return v;
}

// Runs `body` on each path of map_extremes and quantise_levels (widest,
// then portable) with its name, and leaves the widest on afterwards.
template <class Body>
void on_every_extremes_path(Body&& body) {
  struct Restore {
    ~Restore() { set_extremes_path(ExtremesPath::kWidest); }
  } restore;
  for (auto path : {ExtremesPath::kWidest, ExtremesPath::kPortable}) {
    set_extremes_path(path);
    body(std::string(path == ExtremesPath::kPortable ? "portable, " : "widest, "));
  }
}

TEST(MapExtremes, EveryPathGivesThePassBeforeBitForBit) {
  std::mt19937 rng(5);
  std::vector<std::vector<float>> maps;
  for (int64_t len = 1; len <= 70; ++len) {
    for (int rep = 0; rep < 30; ++rep) maps.push_back(awkward_map(rng, len));
  }
  for (int64_t len : {196, 784, 1000}) {
    for (int rep = 0; rep < 30; ++rep) maps.push_back(awkward_map(rng, len));
  }
  // All one value: every position ties; all -inf; +0 and -0 alone.
  maps.push_back(std::vector<float>(37, -std::numeric_limits<float>::infinity()));
  maps.push_back(std::vector<float>(40, 2.0f));
  std::vector<float> zeros(48, 0.0f);
  for (size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
  maps.push_back(zeros);
  on_every_extremes_path([&](const std::string& path) {
    for (const auto& v : maps) {
      const auto len = static_cast<int64_t>(v.size());
      const MapExtreme want = extremes_before(v.data(), len);
      const MapExtreme got = map_extremes(v.data(), len);
      const std::string where = path + "len " + std::to_string(len);
      if (std::isnan(want.max)) {
        EXPECT_TRUE(std::isnan(got.max) && std::isnan(got.min)) << where;
      } else {
        EXPECT_EQ(bits(got.max), bits(want.max)) << where;
        EXPECT_EQ(bits(got.min), bits(want.min)) << where;
      }
      EXPECT_EQ(got.max_at, want.max_at) << where;
      EXPECT_EQ(got.min_at, want.min_at) << where;
    }
  });
}

// The loop that quantised a kept map or crop before it was vectorised (kept
// here as the reference): the finite extremes in order, then each value's
// level.
void quantise_before(const float* x, int64_t n, uint8_t* levels, float* q) {
  const float inf = std::numeric_limits<float>::infinity();
  float lo = inf, hi = -inf;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
  }
  if (!std::isfinite(lo)) lo = hi = 0;
  float step = (hi - lo) / 254.0f;
  if (!(step > 0)) step = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      levels[i] = 255;
      continue;
    }
    const float level = std::nearbyint((x[i] - lo) / step);
    levels[i] = static_cast<uint8_t>(std::clamp(level, 0.0f, 254.0f));
  }
  q[0] = lo;
  q[1] = step;
}

// Every path quantises as the loop before, to the bit: signed zeros as the
// smallest value (its sign is the offset's), ties on a half level, values
// all alike, infinities and NaN, and maps of every length to a few blocks.
TEST(QuantiseLevels, EveryPathGivesTheLoopBeforeBitForBit) {
  std::mt19937 rng(7);
  std::vector<std::vector<float>> maps;
  for (int64_t len = 1; len <= 70; ++len) {
    for (int rep = 0; rep < 20; ++rep) maps.push_back(awkward_map(rng, len));
  }
  std::normal_distribution<float> normal;
  for (int64_t len : {100, 196, 784}) {
    for (int rep = 0; rep < 20; ++rep) {
      maps.push_back(awkward_map(rng, len));
      std::vector<float> v(static_cast<size_t>(len));
      for (auto& x : v) x = normal(rng) * (rep % 2 ? 1e-3f : 10.0f);
      if (rep % 3 == 0) v[static_cast<size_t>(rep)] = -0.0f;
      maps.push_back(v);
    }
  }
  // Levels that fall on a half: 0..254 by halves over [0, 254].
  std::vector<float> halves;
  for (int k = 0; k <= 508; ++k) halves.push_back(0.5f * static_cast<float>(k));
  maps.push_back(halves);
  maps.push_back(std::vector<float>(24, 3.0f));
  maps.push_back(std::vector<float>(17, std::numeric_limits<float>::infinity()));
  // Non-negative values whose first zero is -0 in a later lane than a +0.
  std::vector<float> zeros(40, 1.0f);
  zeros[9] = -0.0f;
  zeros[16] = 0.0f;
  maps.push_back(zeros);
  on_every_extremes_path([&](const std::string& path) {
    for (const auto& v : maps) {
      const auto n = static_cast<int64_t>(v.size());
      std::vector<uint8_t> want(v.size()), got(v.size());
      float want_q[2], got_q[2];
      quantise_before(v.data(), n, want.data(), want_q);
      quantise_levels(v.data(), n, got.data(), got_q);
      const std::string where = path + "len " + std::to_string(n);
      EXPECT_EQ(got, want) << where;
      EXPECT_EQ(bits(got_q[0]), bits(want_q[0])) << where;
      EXPECT_EQ(bits(got_q[1]), bits(want_q[1])) << where;
    }
  });
}

// Each buffer of a collector, floats by their bits.
void expect_same_buffers(const PatchCollector& a, const PatchCollector& b, const std::string& what) {
  const auto x = a.buffers(), y = b.buffers();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].defined(), y[i].defined()) << what << " buffer " << i;
    if (!x[i].defined()) continue;
    const auto as_bits = [](const torch::Tensor& t) {
      return t.scalar_type() == torch::kFloat ? t.contiguous().view(torch::kInt) : t;
    };
    EXPECT_TRUE(torch::equal(as_bits(x[i]), as_bits(y[i]))) << what << " buffer " << i;
  }
}

// The extremes the statistics' fold takes ahead (fold_on_cpu with a table)
// keep the galleries PatchCollector keeps from its own pass, bit for bit:
// the same samples, positions, crops, maps and scores, ties and all; and the
// fold's own figures do not change for carrying them.
TEST(PatchCollector, ExtremesFoldedAheadKeepTheSameGalleries) {
  const auto detail = WatchPerformance().channel_limit(5).samples_per_channel(3);
  const auto settings = PatchSettings::from(detail);
  ASSERT_EQ(settings.tracked(20), 5);
  std::mt19937 rng(9);
  std::vector<torch::Tensor> acts, inputs;
  for (int64_t b = 0; b < 8; ++b) {
    const int64_t batch = b == 7 ? 3 : 9;  // a ragged last batch
    auto act = torch::randn({batch, 20, 8, 10});
    if (b % 2 == 1) {
      // Few levels, signed zeros, infinities, a NaN now and then: ties everywhere.
      auto v = awkward_map(rng, act.numel());
      act = torch::from_blob(v.data(), act.sizes(), torch::kFloat).clone();
      act[b % batch][b % 5][3][4] = std::nanf("");
    }
    acts.push_back(act);
    inputs.push_back(torch::rand({batch, 3, 24, 24}));
  }
  PatchCollector own(settings), ahead(settings);
  for (size_t b = 0; b < acts.size(); ++b) {
    const auto& act = acts[b];
    MapExtremesTable maps;
    maps.channels = settings.tracked(act.size(1));
    const auto with = fold_on_cpu(act, detail, b, &maps);
    ASSERT_TRUE(maps.filled()) << "batch " << b;
    ASSERT_EQ(maps.samples, act.size(0));
    ASSERT_EQ(maps.len, 80);
    const auto without = fold_on_cpu(act, detail, b);
    EXPECT_EQ(with.slots, without.slots);
    EXPECT_EQ(std::tie(with.exact.n, with.exact.nan, with.exact.pos_inf, with.exact.neg_inf),
              std::tie(without.exact.n, without.exact.nan, without.exact.pos_inf, without.exact.neg_inf));
    EXPECT_EQ(with.exact.min, without.exact.min);
    EXPECT_EQ(with.exact.max, without.exact.max);
    EXPECT_NEAR(with.exact.sum, without.exact.sum, 1e-9 * std::max(1.0, std::abs(without.exact.sum)));
    EXPECT_NEAR(with.exact.sum_sq, without.exact.sum_sq, 1e-9 * std::max(1.0, without.exact.sum_sq));
    ASSERT_EQ(with.ranges.size(), without.ranges.size());
    for (size_t c = 0; c < with.ranges.size(); ++c) {
      EXPECT_EQ(
          std::tie(with.ranges[c].seen, with.ranges[c].min, with.ranges[c].max, with.ranges[c].nonfinite),
          std::tie(without.ranges[c].seen, without.ranges[c].min, without.ranges[c].max, without.ranges[c].nonfinite));
    }
    ASSERT_TRUE(own.add(act, inputs[b], static_cast<int64_t>(b)));
    ASSERT_TRUE(ahead.add(act, inputs[b], static_cast<int64_t>(b), &maps));
    expect_same_buffers(own, ahead, "after batch " + std::to_string(b));
  }
  // Somebody entered with a NaN score, a tie or an infinity, so the odd
  // batches mattered.
  bool odd = false;
  for (const auto& v : ahead.view()) {
    for (const auto& slot : v.slots) odd = odd || (slot.filled && slot.batch % 2 == 1);
  }
  EXPECT_TRUE(odd);

  // Maps too short to fold one by one ([B, C, 7, 7]) leave the table empty:
  // the collector takes its own extremes.
  MapExtremesTable small;
  small.channels = 5;
  fold_on_cpu(torch::randn({4, 20, 7, 7}), detail, 0, &small);
  EXPECT_FALSE(small.filled());
  // A table for another shape is not used: the same galleries as without.
  PatchCollector mismatched(settings), plain(settings);
  const auto act = torch::randn({4, 20, 8, 10});
  const auto input = torch::rand({4, 3, 24, 24});
  MapExtremesTable other;
  other.channels = 5;
  fold_on_cpu(torch::randn({4, 20, 8, 9}), detail, 0, &other);
  ASSERT_TRUE(other.filled());
  ASSERT_TRUE(mismatched.add(act, input, 0, &other));
  ASSERT_TRUE(plain.add(act, input, 0));
  expect_same_buffers(mismatched, plain, "a table of another shape");
}

TEST(PatchCollector, NaNRanksBelowRealValuesAndEmptySlotsStayEmpty) {
  PatchSettings settings;
  settings.samples = 4;
  PatchCollector gallery(settings);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto act = torch::zeros({3, 1, 2, 2});
  act[0][0].fill_(nan);                                      // sample 0: only NaN
  act[1][0] = torch::tensor({{9.0f, nan}, {7.0f, -9.0f}});   // sample 1: a NaN among larger values
  act[2][0] = torch::tensor({{1.0f, 3.0f}, {5.0f, -2.0f}});  // sample 2: max 5 at (1, 0), min -2 at (1, 1)
  ASSERT_TRUE(gallery.add(act, torch::rand({3, 3, 8, 8}), 0));
  const auto views = gallery.view();
  for (auto r : {PatchRanking::kMaxPixel, PatchRanking::kMinPixel}) {
    SCOPED_TRACE(std::string(to_string(r)));
    const auto& v = ranking_of(views, r);
    // The finite map first, whatever the NaN-holding ones' other values.
    EXPECT_EQ(v.slot(0, 0).sample, 2);
    EXPECT_DOUBLE_EQ(v.slot(0, 0).score, r == PatchRanking::kMaxPixel ? 5.0 : -2.0);
    EXPECT_EQ(v.slot(0, 0).y, 1);
    EXPECT_EQ(v.slot(0, 0).x, r == PatchRanking::kMaxPixel ? 0 : 1);
    std::set<int64_t> demoted = {v.slot(1, 0).sample, v.slot(2, 0).sample};
    EXPECT_EQ(demoted, std::set<int64_t>({0, 1}));
    EXPECT_TRUE(std::isnan(v.slot(1, 0).score));
    EXPECT_TRUE(std::isnan(v.slot(2, 0).score));
    EXPECT_FALSE(v.slot(3, 0).filled);  // three samples, four slots
    EXPECT_TRUE(torch::isnan(v.crops[3][0]).all().item<bool>());
  }
  // Average rankings only on request.
  EXPECT_EQ(views.size(), 2u);
}

TEST(PatchCollector, ChannelLimitFlatActivationsAndRefusals) {
  PatchSettings settings;
  settings.samples = 2;
  settings.channel_limit = 16;
  PatchCollector wide(settings);
  ASSERT_TRUE(wide.add(torch::randn({5, 20, 3, 3}), torch::rand({5, 1, 12, 12}), 0));
  EXPECT_EQ(wide.view().front().channels, 16);
  // With no histogram limit, patches still stop at kMaxPatchChannels.
  PatchSettings unlimited = settings;
  unlimited.channel_limit = 0;
  PatchCollector widest(unlimited);
  ASSERT_TRUE(widest.add(torch::randn({2, 100}), torch::rand({2, 1, 4, 4}), 0));
  EXPECT_EQ(widest.view().front().channels, kMaxPatchChannels);

  // A flat [batch, features] activation: each feature a channel, whole inputs.
  PatchCollector flat(settings);
  auto features = torch::randn({6, 4});
  auto inputs = torch::rand({6, 1, 12, 12});
  ASSERT_TRUE(flat.add(features, inputs, 0));
  const auto views = flat.view();
  ASSERT_EQ(views.size(), 2u);
  const auto& max = views.front();
  EXPECT_FALSE(max.heat.defined());
  EXPECT_EQ(max.crops.size(3), 12);
  for (int64_t c = 0; c < 4; ++c) {
    const int64_t best = features.select(1, c).argmax().item<int64_t>();
    EXPECT_EQ(max.slot(0, c).sample, best);
    EXPECT_NEAR(max.slot(0, c).score, features[best][c].item<double>(), 1e-6);
  }

  PatchCollector tokens(settings);
  EXPECT_FALSE(tokens.add(torch::randn({2, 5, 7}), torch::rand({2, 1, 8, 8}), 0));
  ASSERT_TRUE(tokens.unsupported().has_value());
  EXPECT_NE(tokens.unsupported()->find("3-D"), std::string::npos);
  PatchCollector text(settings);
  EXPECT_FALSE(text.add(torch::randn({2, 5, 3, 3}), torch::rand({2, 7}), 0));
  EXPECT_NE(text.unsupported()->find("image-like input"), std::string::npos);

  // A later batch of another shape is skipped, not folded.
  PatchCollector fixed(settings);
  ASSERT_TRUE(fixed.add(torch::randn({2, 3, 4, 4}), torch::rand({2, 1, 8, 8}), 0));
  EXPECT_FALSE(fixed.add(torch::randn({2, 3, 5, 5}), torch::rand({2, 1, 10, 10}), 1));
  EXPECT_EQ(fixed.skipped(), 1);
}

TEST(PatchCollector, HoldsWhatTheReadmeSaysPerChannel) {
  PatchSettings settings;  // 5 samples, 16 channels, pixel rankings
  PatchCollector gallery(settings);
  // The demo CNN's first conv: [B, 16, 28, 28] over a 28x28 gray input.
  ASSERT_TRUE(gallery.add(torch::randn({8, 16, 28, 28}), torch::rand({8, 1, 28, 28}), 0));
  const int64_t side = crop_side(28, 28);
  EXPECT_EQ(side, 10);
  // Per ranking and slot: the crop and the map in uint8, two float32 pairs,
  // one float32 score and six int64 positions.
  const size_t per_slot = side * side + 28 * 28 + 2 * 2 * 4 + 4 + 6 * 8;
  EXPECT_EQ(gallery.bytes(), 2 * 5 * 16 * per_slot);
  EXPECT_EQ(per_slot * 5 * 2, 9520u);  // docs/guide/stats.md's 9,520 bytes per channel
}

TEST(StatsStore, GalleriesLiveInTheNewestEpochOfAPhaseAndSayWhyWhenMissing) {
  StatsStore store;
  auto input = torch::rand({4, 1, 8, 8});
  auto act = torch::randn({4, 2, 4, 4});
  store.add("conv", "train", 0, Kind::kActivation, act);
  store.add_gallery("conv", "train", 0, 0, act, input);
  store.add("fc", "train", 0, Kind::kActivation, torch::randn({4, 3}));
  store.add_gallery("fc", "train", 0, 0, torch::randn({4, 3}), torch::Tensor());  // no image input
  store.end_batch();
  auto snap = store.publish();
  const auto& conv = snap->layers.at({"conv", "train"}).back();
  ASSERT_EQ(conv.patches.size(), 2u);
  EXPECT_TRUE(conv.patches.front().slot(0, 0).filled);
  const auto& fc = snap->layers.at({"fc", "train"}).back();
  EXPECT_TRUE(fc.patches.empty());
  ASSERT_TRUE(fc.patches_note.has_value());
  EXPECT_NE(fc.patches_note->find("image-like"), std::string::npos);

  // Epoch 1 starts: epoch 0's bucket collapses and lets its patches go.
  store.add("conv", "train", 1, Kind::kActivation, act);
  store.add_gallery("conv", "train", 1, 0, act, input);
  store.end_batch();
  snap = store.publish();
  const auto& buckets = snap->layers.at({"conv", "train"});
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_TRUE(buckets.front().patches.empty());
  EXPECT_EQ(buckets.back().patches.size(), 2u);

  // samples_per_channel 0 turns them off.
  StatsStore off(WatchPerformance().samples_per_channel(0));
  off.add("conv", "train", 0, Kind::kActivation, act);
  off.add_gallery("conv", "train", 0, 0, act, input);
  off.end_batch();
  EXPECT_TRUE(off.publish()->layers.at({"conv", "train"}).back().patches.empty());
}

}  // namespace
}  // namespace nansense::stats
