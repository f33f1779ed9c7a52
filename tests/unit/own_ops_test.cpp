// common::OwnOps: the ops nansense runs for itself stay out of what the
// batch's observer and any other RecordFunction callback see, and the
// dispatcher's callbacks are toggled only where that hides something.
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/own_ops.h"
#include "observer/observer.h"

namespace nansense {
namespace {

struct Recorder : observer::Consumer {
  std::vector<std::string> ops;
  bool wants_backward() const override { return false; }
  void op_ended(const observer::Frame& frame, const std::vector<torch::Tensor>&,
                const std::vector<observer::Frame>&) override {
    ops.push_back(frame.op);
  }
};

std::atomic<int> g_seen{0};
std::unique_ptr<at::ObserverContext> count_start(const at::RecordFunction&) {
  ++g_seen;
  return nullptr;
}

TEST(OwnOps, TheObserverPassesOverOpsRunUnderEitherKind) {
  auto x = torch::ones({4});
  Recorder recorder;
  observer::Observer watching;
  watching.attach(&recorder);
  (void)x.neg();
  {
    common::OwnOps own(common::OwnOps::kFew);
    (void)x.exp();
  }
  {
    common::OwnOps own(common::OwnOps::kMany);
    (void)x.sin();
    common::OwnOps nested(common::OwnOps::kFew);
    (void)x.cos();
  }
  EXPECT_FALSE(common::OwnOps::active());
  (void)x.abs();
  watching.detach(&recorder);
  // Starts and ends skipped in pairs: the ops after the scopes are seen.
  EXPECT_EQ(recorder.ops, (std::vector<std::string>{"neg", "abs"}));
}

TEST(OwnOps, AnotherCallbackNeverSeesThemAndNoneLeavesRecordingAlone) {
  auto x = torch::ones({4});
  // No callback installed: nothing to hide, so no toggle of the callbacks' state.
  {
    common::OwnOps own;
    EXPECT_TRUE(common::OwnOps::active());
    EXPECT_TRUE(at::isRecordFunctionEnabled());
  }
  // A global callback (a profiler) is turned off under both kinds, with the
  // observer installed or not, and back on after.
  g_seen = 0;
  auto handle = at::addGlobalCallback(at::RecordFunctionCallback(&count_start).scopes({at::RecordScope::FUNCTION}));
  for (const bool with_observer : {false, true}) {
    std::optional<observer::Observer> watching;
    if (with_observer) watching.emplace();
    for (const auto kind : {common::OwnOps::kFew, common::OwnOps::kMany}) {
      const int before = g_seen;
      {
        common::OwnOps own(kind);
        EXPECT_FALSE(at::isRecordFunctionEnabled());
        (void)x.exp();
      }
      EXPECT_EQ(g_seen, before);
      EXPECT_TRUE(at::isRecordFunctionEnabled());
      (void)x.neg();
      EXPECT_GT(g_seen, before);
    }
  }
  at::removeCallback(handle);
}

TEST(OwnOps, ManyOpsHideFromTheObserversOwnCallbackFewDoNot) {
  // kMany turns the observer's thread-local callback off (each op would box
  // its arguments for it); kFew leaves it on and the observer passes over them.
  observer::Observer watching;
  {
    common::OwnOps own(common::OwnOps::kMany);
    EXPECT_FALSE(at::isRecordFunctionEnabled());
  }
  {
    common::OwnOps own(common::OwnOps::kFew);
    EXPECT_TRUE(at::isRecordFunctionEnabled());
  }
}

}  // namespace
}  // namespace nansense
