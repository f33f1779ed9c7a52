// The checks' arithmetic: exact fractions per dtype, merging and silencing of
// the standing error, settings validation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>

#include "common/dtype.h"
#include "numerics/bands.h"
#include "numerics/checks.h"
#include "numerics/debug_state.h"

namespace nansense::numerics {
namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

torch::Tensor values(std::vector<double> v, torch::ScalarType dtype) {
  return torch::tensor(v, torch::kDouble).to(dtype);
}

CheckResult check_one(const torch::Tensor& gradient, DebugSettings settings = {}) {
  CheckInput in;
  in.weight_gradients.emplace_back("fc", gradient);
  return run_checks(settings, in);
}

class Fractions : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    try {
      // Some CPUs' builds lack kernels for the reduced types.
      (void)band_stats({values({1.0, 2.0}, GetParam())});
    } catch (const c10::Error& e) {
      GTEST_SKIP() << c10::toString(GetParam()) << " is not supported on this CPU: " << e.what_without_backtrace();
    }
  }
  torch::ScalarType dtype() const { return GetParam(); }
  Band band() const { return *band_of(GetParam()); }
};

TEST_P(Fractions, NanIsAFractionOfElementCount) {
  auto r = check_one(values({1, kNan, 2, 3, kNan, 4, 5, 6}, dtype()));
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"nan"}));
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_DOUBLE_EQ(r.layers[0].nan, 0.25);
  EXPECT_DOUBLE_EQ(r.layers[0].inf, 0.0);
  EXPECT_EQ(r.layers[0].layer, "fc");
  EXPECT_EQ(r.layers[0].dtype, common::dtype_name(dtype()));
  EXPECT_EQ(r.layers[0].sources, (std::vector<std::string>{"weight_gradient"}));
}

TEST_P(Fractions, InfCountsBothSigns) {
  auto r = check_one(values({kInf, 1, -kInf, 2, 3}, dtype()));
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"inf"}));
  EXPECT_DOUBLE_EQ(r.layers[0].inf, 2.0 / 5.0);
}

TEST_P(Fractions, SubnormalIsAFractionOfSummedFiniteMagnitude) {
  // Powers of two: every sum is exact, so the fraction is exact too.
  const double sub = band().tiny / 2, normal = band().tiny * 4;
  auto r = check_one(values({sub, -sub, sub, normal, kNan}, dtype()), DebugSettings().check_nan_inf(false));
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"underflow"}));
  EXPECT_DOUBLE_EQ(r.layers[0].underflow, (3 * sub) / (3 * sub + normal));  // 3/11
  EXPECT_DOUBLE_EQ(r.layers[0].overflow, 0.0);
}

TEST_P(Fractions, OverflowBandStartsAtMaxOverSixteen) {
  const double big = std::exp2(std::ceil(std::log2(band().overflow)));  // first power of two in the band
  const double small = big / 1024;
  auto r = check_one(values({big, small, -small}, dtype()));
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"overflow"}));
  EXPECT_DOUBLE_EQ(r.layers[0].overflow, big / (big + 2 * small));
  // Just below the edge: nothing is in the band.
  const double below = std::exp2(std::floor(std::log2(band().overflow)) - 1);
  EXPECT_TRUE(check_one(values({below, 1}, dtype())).reasons.empty());
}

TEST_P(Fractions, ThresholdDecidesAndZeroGradientsAreNotSubnormal) {
  const double sub = band().tiny / 16;
  // 1 subnormal of 1 + 2^... : fraction 1/(1+256) < 0.1 -> no trip.
  EXPECT_TRUE(check_one(values({sub, sub * 256}, dtype())).reasons.empty());
  EXPECT_EQ(check_one(values({sub, sub * 256}, dtype()), DebugSettings().threshold_fraction(0.001)).reasons,
            (std::vector<std::string>{"underflow"}));
  EXPECT_TRUE(check_one(values({0, 0, 0}, dtype())).reasons.empty());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Fractions,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble),
                         [](const auto& info) { return common::dtype_name(info.param); });

TEST(Checks, LayersAggregateTheirParametersAndKeepGraphOrder) {
  CheckInput in;
  in.weight_gradients.emplace_back("b", torch::tensor({1.0f, NAN}));
  in.weight_gradients.emplace_back("a", torch::tensor({1.0f, 2.0f, 3.0f}));
  in.weight_gradients.emplace_back("a", torch::tensor({NAN}));
  in.layer_order = {"a", "b"};
  auto r = run_checks(DebugSettings(), in);
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].layer, "a");
  EXPECT_DOUBLE_EQ(r.layers[0].nan, 0.25);
  EXPECT_EQ(r.layers[1].layer, "b");
  EXPECT_DOUBLE_EQ(r.layers[1].nan, 0.5);
  EXPECT_EQ(r.checks_used, (std::vector<std::string>{"nan_inf", "under_over"}));
}

TEST(Checks, ActivationsCountNanInfAndAllowedLayersAreSkipped) {
  std::map<std::string, torch::Tensor> acts = {{"mask", torch::tensor({-INFINITY, 1.0f})},
                                               {"relu", torch::tensor({NAN, 1.0f, 2.0f, 3.0f})}};
  CheckInput in;
  in.activations = &acts;
  auto r = run_checks(DebugSettings().allow({"mask"}), in);
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"nan"}));
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers[0].layer, "relu");
  EXPECT_DOUBLE_EQ(r.layers[0].nan, 0.25);
  EXPECT_EQ(r.layers[0].dtype, std::nullopt);  // no gradient was scanned
  EXPECT_EQ(r.layers[0].sources, (std::vector<std::string>{"activation"}));
}

TEST(Checks, AnIntendedInfinityPassesAndANanBesideItStillTrips) {
  // An attention mask's -inf (the op tracer marks its layer): read in place,
  // or through a copy with the infinities cleared where it cannot be (a
  // strided view), it trips only on a NaN, counted against all its values.
  for (const bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "a strided view" : "dense");
    auto shaped = [&](std::vector<float> v) {
      auto t = torch::tensor(v);
      return strided ? torch::stack({t, t}, 1).select(1, 0) : t;
    };
    std::map<std::string, torch::Tensor> acts = {{"mask", shaped({-INFINITY, 1.0f, INFINITY, 2.0f})}};
    ASSERT_EQ(acts["mask"].is_non_overlapping_and_dense(), !strided);
    CheckInput in;
    in.activations = &acts;
    in.intended_activations = {"mask"};
    auto r = run_checks(DebugSettings(), in);
    EXPECT_TRUE(r.reasons.empty());
    EXPECT_TRUE(r.layers.empty());

    acts["mask"] = shaped({-INFINITY, NAN, 1.0f, 2.0f});
    r = run_checks(DebugSettings(), in);
    ASSERT_EQ(r.reasons, (std::vector<std::string>{"nan"}));
    ASSERT_EQ(r.layers.size(), 1u);
    EXPECT_EQ(r.layers[0].layer, "mask");
    EXPECT_DOUBLE_EQ(r.layers[0].nan, 0.25);
    EXPECT_DOUBLE_EQ(r.layers[0].inf, 0.0);

    // Not intended, the same infinities trip.
    in.intended_activations.clear();
    acts["mask"] = shaped({-INFINITY, 1.0f, 2.0f, 3.0f});
    EXPECT_EQ(run_checks(DebugSettings(), in).reasons, (std::vector<std::string>{"inf"}));
  }
}

TEST(Checks, MasksAndIndicesPassUncheckedBesideAFloatThatTrips) {
  // A padding mask and token ids among a traced batch's activations: they
  // cannot hold a NaN, are not scanned, and the float layer beside them is.
  std::map<std::string, torch::Tensor> acts = {{"pad", torch::tensor({true, false, true})},
                                               {"ids", torch::tensor({3, 1, 4}, torch::kLong)},
                                               {"div", torch::tensor({NAN, 1.0f})}};
  CheckInput in;
  in.activations = &acts;
  auto r = run_checks(DebugSettings(), in);
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"nan"}));
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers[0].layer, "div");
}

// A sparse gradient (an nn.Embedding(sparse=True)): its |g| sum reads, but
// the band statistics' kernels do not run on the sparse layout.
torch::Tensor sparse_nan_gradient() {
  auto indices = torch::tensor({0, 2}, torch::kLong).reshape({1, 2});
  auto values = torch::tensor({NAN, 1.0f, 2.0f, 3.0f}).reshape({2, 2});
  return torch::sparse_coo_tensor(indices, values, {4, 2});
}

TEST(Checks, ATensorTheChecksCannotReadIsLeftOutAndTheRestAreChecked) {
  CheckInput in;
  in.weight_gradients.emplace_back("embed", sparse_nan_gradient());
  in.weight_gradients.emplace_back("fc", torch::tensor({NAN, 1.0f}));
  in.weight_gradients.emplace_back("out", torch::tensor({1.0f, 2.0f}));
  in.weight_gradient_names = {"embed.weight", "fc.weight", "out.weight"};
  auto r = run_checks(DebugSettings(), in);
  // The dense NaN still trips, with its layer named.
  ASSERT_EQ(r.reasons, (std::vector<std::string>{"nan"}));
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers[0].layer, "fc");
  // The sparse one is named as failed, with the checks it loses.
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0].tensor, "embed.weight");
  EXPECT_EQ(r.failed[0].layer, "embed");
  EXPECT_EQ(r.failed[0].source, "weight_gradient");
  EXPECT_EQ(r.failed[0].checks, (std::vector<std::string>{"nan_inf", "under_over"}));
  EXPECT_FALSE(r.failed[0].error.empty());

  // Once turned off, it is not offered again (no second failure) and the
  // others stay checked.
  in.unchecked = {unchecked_key("weight_gradient", "embed.weight")};
  r = run_checks(DebugSettings(), in);
  EXPECT_TRUE(r.failed.empty());
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers[0].layer, "fc");

  // A batch where only the dense gradients are clean trips on nothing.
  in.weight_gradients[1].second = torch::tensor({1.0f, 1.0f});
  EXPECT_TRUE(run_checks(DebugSettings(), in).reasons.empty());
}

TEST(Checks, SumsThatThrowAreIsolatedPerTensor) {
  // A meta tensor has no data to sum: it fails alone.
  std::vector<torch::Tensor> tensors = {torch::tensor({1.0f, -2.0f}), torch::empty({3}, torch::kMeta),
                                        torch::tensor({4.0})};
  std::vector<std::string> errors;
  auto sums = abs_sums_each(tensors, &errors);
  ASSERT_EQ(sums.size(), 3u);
  ASSERT_TRUE(sums[0]);
  EXPECT_DOUBLE_EQ(*sums[0], 3.0);
  EXPECT_FALSE(sums[1]);
  EXPECT_FALSE(errors[1].empty());
  ASSERT_TRUE(sums[2]);
  EXPECT_DOUBLE_EQ(*sums[2], 4.0);
}

TEST(Checks, TheFastGradientSumSeesEveryValue) {
  // float32 CPU gradients are summed in 16 float lanes over blocks of 256
  // values, a block's total added in float64, the tail alone.
  torch::manual_seed(0);
  auto t = torch::randn({1000});  // three blocks and a tail of 232
  const double exact = t.to(torch::kDouble).abs().sum().item<double>();
  EXPECT_NEAR(abs_sums({t})[0], exact, exact * 1e-6);
  for (int64_t at : {0, 17, 255, 256, 767, 768, 999}) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      auto poisoned = t.clone();
      poisoned[at] = bad;
      EXPECT_FALSE(std::isfinite(abs_sums({poisoned})[0])) << at << " " << bad;
    }
  }
  // A lane never falls below its largest |x| (the overflow test needs the
  // sum to reach it); a lane that overflows float32 reads as not finite.
  auto one = torch::zeros({300});
  one[100] = -3.0e38f;
  EXPECT_GE(abs_sums({one})[0], 3.0e38);
  EXPECT_FALSE(std::isfinite(abs_sums({torch::full({512}, 3.0e38f)})[0]));
  EXPECT_TRUE(suspicious(abs_sums({torch::full({512}, 3.0e38f)})[0], 512, torch::kFloat, false, 0.01));
}

TEST(Checks, TheFastGradientSumReadsATransposedTensorInPlace) {
  // A dense tensor in another order (a transposed copy of an activation) is
  // summed in place too, and its sum is that of the same values.
  torch::manual_seed(0);
  auto t = torch::randn({40, 30}).t();
  ASSERT_FALSE(t.is_contiguous());
  const double exact = t.to(torch::kDouble).abs().sum().item<double>();
  EXPECT_NEAR(abs_sums({t})[0], exact, exact * 1e-6);
  auto poisoned = t.clone(at::MemoryFormat::Preserve);
  ASSERT_FALSE(poisoned.is_contiguous());
  poisoned[29][39] = NAN;
  EXPECT_FALSE(std::isfinite(abs_sums({poisoned})[0]));
  // A strided slice (not dense) takes the tensor ops and sees only its own values.
  auto base = torch::ones({10});
  base[1] = NAN;
  EXPECT_DOUBLE_EQ(abs_sums({base.slice(0, 0, 10, 2)})[0], 5.0);
}

// Sums already known (a capture's copies, summed as they were written) are
// taken as given; the rest are computed.
TEST(Checks, KnownAbsSumsAreTakenNotComputed) {
  const auto a = torch::full({4}, 2.0);
  const auto b = torch::full({3}, -1.0);
  KnownAbsSums known{{a.unsafeGetTensorImpl(), 99.0}};
  std::vector<std::string> errors;
  const auto sums = abs_sums_each({a, b}, &errors, &known);
  EXPECT_EQ(sums, (std::vector<std::optional<double>>{99.0, 3.0}));
  EXPECT_EQ(abs_sums_each({a, b}, &errors), (std::vector<std::optional<double>>{8.0, 3.0}));
}

// The root-cause tracer's test of every traced op's outputs.
TEST(Checks, AllFiniteInPlaceReadsEveryValueOfEachFloatDtype) {
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16}) {
    // The largest finite value and a subnormal are finite; a length that is
    // no multiple of the block or of a vector.
    auto t = torch::randn({4099}).to(dtype);
    t[0] = std::numeric_limits<float>::min() / 4;
    t[1] = dtype == torch::kDouble ? 1.0e300 : dtype == torch::kHalf ? 65504.0 : 3.0e38;
    ASSERT_TRUE(all_finite_in_place(t).has_value()) << dtype;
    EXPECT_TRUE(*all_finite_in_place(t)) << dtype;
    for (int64_t at : {0, 1, 4095, 4096, 4098}) {
      for (double bad : {static_cast<double>(NAN), static_cast<double>(INFINITY), -static_cast<double>(INFINITY)}) {
        auto poisoned = t.clone();
        poisoned[at] = bad;
        EXPECT_EQ(all_finite_in_place(poisoned), std::optional<bool>(false)) << dtype << " " << at << " " << bad;
        // Transposed: the same values in another order, read in place.
        auto square = poisoned.narrow(0, 0, 4096).reshape({64, 64}).t();
        EXPECT_EQ(all_finite_in_place(square), std::optional<bool>(at >= 4096)) << dtype << " " << at;
      }
    }
  }
  EXPECT_EQ(all_finite_in_place(torch::empty({0})), std::optional<bool>(true));
  // Not one dense block, or not a float: left to tensor ops.
  EXPECT_FALSE(all_finite_in_place(torch::ones({10}).slice(0, 0, 10, 2)).has_value());
  EXPECT_FALSE(all_finite_in_place(torch::ones({3}).expand({4, 3})).has_value());
  EXPECT_FALSE(all_finite_in_place(torch::ones({10}, torch::kInt)).has_value());
  EXPECT_FALSE(all_finite_in_place(torch::Tensor()).has_value());
}

// The root-cause tracer's test of which kinds an op's non-finite outputs hold
// (an attention mask's -inf on every traced batch).
TEST(Checks, NonFiniteKindsInPlaceTellNanFromInfInEachFloatDtype) {
  using Kinds = std::pair<bool, bool>;
  auto kinds = [](const torch::Tensor& t) {
    auto k = non_finite_kinds_in_place(t);
    EXPECT_TRUE(k.has_value());
    return k ? Kinds{k->nan, k->inf} : Kinds{};
  };
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16}) {
    auto t = torch::randn({8199}).to(dtype);
    t[1] = dtype == torch::kDouble ? 1.0e300 : dtype == torch::kHalf ? 65504.0 : 3.0e38;  // largest: not Inf
    t[2] = -t[1].item<double>();
    EXPECT_EQ(kinds(t), Kinds(false, false)) << dtype;
    for (int64_t at : {0, 4095, 4096, 8198}) {
      auto nan = t.clone();
      nan[at] = static_cast<double>(-NAN);  // the sign bit set too
      EXPECT_EQ(kinds(nan), Kinds(true, false)) << dtype << " " << at;
      for (double inf : {static_cast<double>(INFINITY), -static_cast<double>(INFINITY)}) {
        auto infinite = t.clone();
        infinite[at] = inf;
        EXPECT_EQ(kinds(infinite), Kinds(false, true)) << dtype << " " << at << " " << inf;
        // Both, in different blocks and in either order.
        auto both = infinite.clone();
        both[at == 0 ? 8198 : 0] = static_cast<double>(NAN);
        EXPECT_EQ(kinds(both), Kinds(true, true)) << dtype << " " << at;
        // Transposed: read in place all the same.
        EXPECT_EQ(kinds(both.narrow(0, 0, 4096).reshape({64, 64}).t()), Kinds(at != 0, at < 4096))
            << dtype << " " << at;
      }
    }
  }
  EXPECT_EQ(kinds(torch::empty({0})), Kinds(false, false));
  EXPECT_FALSE(non_finite_kinds_in_place(torch::ones({10}).slice(0, 0, 10, 2)).has_value());
  EXPECT_FALSE(non_finite_kinds_in_place(torch::ones({10}, torch::kInt)).has_value());
  EXPECT_FALSE(non_finite_kinds_in_place(torch::Tensor()).has_value());
}

TEST(DebugStateTest, UncheckedTensorsAreListed) {
  int changes = 0;
  DebugState state(DebugSettings(), [&] { ++changes; });
  EXPECT_TRUE(state.unchecked().empty());
  UncheckedTensor u;
  u.source = "weight_gradient";
  u.tensor = "embed.weight";
  u.checks = {"nan_inf"};
  u.error = "no kernel";
  state.note_unchecked(u);
  ASSERT_EQ(state.unchecked().size(), 1u);
  EXPECT_EQ(state.unchecked()[0].tensor, "embed.weight");
  EXPECT_EQ(changes, 1);
}

TEST(Checks, DisabledCategoriesDoNotTrip) {
  auto nan = torch::tensor({NAN, 1.0f});
  EXPECT_TRUE(check_one(nan, DebugSettings().check_nan_inf(false)).reasons.empty());
  EXPECT_TRUE(check_one(nan, DebugSettings().enabled(false)).reasons.empty());
}

TEST(Checks, ParametersMapToTheirLayer) {
  EXPECT_EQ(layer_of_parameter("features.0.weight", {}), "features.0");
  EXPECT_EQ(layer_of_parameter("w1", {}), "w1");
  EXPECT_EQ(layer_of_parameter("w1", {{"w1", "linear"}}), "linear");
}

DebugError hit(std::string phase, int64_t batch, std::vector<std::string> reasons, std::vector<LayerReport> layers) {
  DebugError e;
  e.position.phase = std::move(phase);
  e.position.batch_idx = batch;
  e.reasons = std::move(reasons);
  e.checks_used = {"nan_inf", "under_over"};
  e.layers = std::move(layers);
  return e;
}

TEST(DebugStateTest, LaterHitsMergeIntoTheFirst) {
  int changes = 0;
  DebugState state(DebugSettings(), [&] { ++changes; });
  EXPECT_TRUE(state.record(hit("train", 3, {"inf"}, {{"fc1", 0, 0.5}, {"fc2", 0, 0.1}})));
  EXPECT_FALSE(state.record(hit("train", 9, {"nan", "underflow"}, {{"fc2", 0.2, 0.05, 0.3}, {"fc3", 1.0}})));
  auto e = state.error();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->position.batch_idx, 3);  // the first position is kept
  EXPECT_EQ(e->reasons, (std::vector<std::string>{"nan", "inf", "underflow"}));
  ASSERT_EQ(e->layers.size(), 3u);
  EXPECT_EQ(e->layers[1].layer, "fc2");
  EXPECT_DOUBLE_EQ(e->layers[1].nan, 0.2);  // worst of each
  EXPECT_DOUBLE_EQ(e->layers[1].inf, 0.1);
  EXPECT_DOUBLE_EQ(e->layers[1].underflow, 0.3);
  EXPECT_EQ(e->layers[2].layer, "fc3");
  EXPECT_EQ(e->hits, 2);
  EXPECT_EQ(changes, 2);
}

TEST(DebugStateTest, ARefusedSkipSaysWhyAndApplyingStaysOpen) {
  DebugState state(DebugSettings(), [] {});
  state.record(hit("train", 3, {"nan"}, {{"fc1", 0.5}}));
  state.amend([](DebugError& e) { e.update = "held"; });
  state.refuse_skip("the other ranks step with these gradients");
  try {
    state.choose_update(true);
    ADD_FAILURE() << "skipping was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the other ranks step with these gradients");
  }
  EXPECT_FALSE(state.skip_chosen());
  state.choose_update(false);  // applying stays open
  state.refuse_skip("");
  state.choose_update(true);
  EXPECT_TRUE(state.skip_chosen());
}

TEST(DebugStateTest, SilencingACategoryTurnsItOffAndClearsIt) {
  DebugState state(DebugSettings(), nullptr);
  state.record(hit("train", 1, {"nan", "overflow"}, {{"fc1", 0.5}, {"fc2", 0, 0, 0, 0.4}}));
  EXPECT_EQ(state.silence("nan_inf"), (std::vector<std::string>{"nan_inf"}));
  EXPECT_FALSE(state.settings().check_nan_inf());
  EXPECT_TRUE(state.settings().check_under_over());
  auto e = state.error();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->reasons, (std::vector<std::string>{"overflow"}));
  ASSERT_EQ(e->layers.size(), 1u);
  EXPECT_EQ(e->layers[0].layer, "fc2");
  state.silence("under_over");
  EXPECT_FALSE(state.error());
}

TEST(DebugStateTest, SilencingEverythingTakesTheStandingCategories) {
  DebugState state(DebugSettings(), nullptr);
  state.record(hit("train", 1, {"underflow"}, {{"fc1", 0, 0, 0.5}}));
  EXPECT_EQ(state.silence(""), (std::vector<std::string>{"under_over"}));
  EXPECT_FALSE(state.error());
  EXPECT_TRUE(state.settings().check_nan_inf());
  EXPECT_THROW(state.silence("nan"), nansense::ArgumentError);
}

TEST(DebugStateTest, ClearKeepsTheChecksOn) {
  DebugState state(DebugSettings(), nullptr);
  state.record(hit("train", 1, {"nan"}, {}));
  state.clear();
  EXPECT_FALSE(state.error());
  EXPECT_TRUE(state.settings().check_nan_inf());
  EXPECT_TRUE(state.record(hit("train", 5, {"nan"}, {})));  // the next hit is a first hit again
}

TEST(DebugStateTest, BadSettingsAreRefusedWithTheirValue) {
  DebugState state(DebugSettings(), nullptr);
  auto message = [&](const DebugSettings& s) {
    try {
      state.set_settings(s);
    } catch (const nansense::ArgumentError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(DebugSettings().interval_batches(0)),
            "interval_batches must be a whole number of batches >= 1, got 0");
  EXPECT_NE(message(DebugSettings().threshold_fraction(1.5)).find("threshold_fraction must be a fraction in (0, 1]"),
            std::string::npos);
  EXPECT_NE(message(DebugSettings().threshold_fraction(0)).find("threshold_fraction"), std::string::npos);
  EXPECT_NE(message(DebugSettings().trace_interval_batches(-1)).find("trace_interval_batches"), std::string::npos);
  EXPECT_NE(message(DebugSettings().allow({""})).find("allow"), std::string::npos);
  EXPECT_EQ(state.settings().interval_batches(), 1);  // unchanged
}

}  // namespace
}  // namespace nansense::numerics
