// The names Session had before it took the reference API's (docs/guide/
// differences.md, "One name per concept") still answer, each as its new name
// does, until the release that removes them. They are deprecated: this file
// alone silences the warning, around the calls that must make it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "nansense/nansense.h"
#include "test_models.h"

namespace nansense {
namespace {

using test::make_batches;
using test::quiet_checks;
using test::train_step;
using test::TwoLayer;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static_assert(std::is_same_v<StatsSnapshot, WatchSnapshot>);
static_assert(std::is_same_v<FailedMetric, FailedInstrument>);

TEST(RenamedNames, EachOldSessionNameAnswersAsTheNewOne) {
  torch::manual_seed(0);
  TwoLayer model;
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  auto session = start(model, StartOptions().optimizer(&optimizer).debug(quiet_checks()));
  session.watch_metric(
      "boom", [](const LayerContext&) -> std::optional<double> { throw std::runtime_error("instrument bug"); });

  session.watch_layers({"fc1", "fc2"});  // watch
  session.unwatch_layers({"fc2"});       // unwatch
  EXPECT_EQ(session.watched_layers(), std::vector<std::string>{"fc1"});

  session.detach();
  auto data = make_batches(2);
  for (auto& b : session.batches(data, "train")) train_step(model, optimizer, b.first, b.second);
  session.close();

  // stats(): the very snapshot watch_snapshot() gives.
  ASSERT_TRUE(session.watch_snapshot());
  EXPECT_EQ(session.stats(), session.watch_snapshot());
  EXPECT_EQ(session.stats()->layers.count({"fc1", "train"}), 1u);
  EXPECT_EQ(session.stats()->layers.count({"fc2", "train"}), 0u);

  // failed_metrics(): instrument_errors().
  const std::vector<FailedMetric> failed = session.failed_metrics();
  const std::vector<FailedInstrument> errors = session.instrument_errors();
  ASSERT_EQ(errors.size(), 1u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].name, "boom");
  EXPECT_EQ(failed[0].error, errors[0].error);
  EXPECT_NE(failed[0].error.find("instrument bug"), std::string::npos) << failed[0].error;

  // silence_debug_check: disable_debug_check, with its refusal of a bad category.
  ASSERT_TRUE(session.debug_settings().check_nan_inf());
  session.silence_debug_check("nan_inf");
  EXPECT_FALSE(session.debug_settings().check_nan_inf());
  EXPECT_THROW(session.silence_debug_check("nan"), ArgumentError);
}

#pragma GCC diagnostic pop

}  // namespace
}  // namespace nansense
