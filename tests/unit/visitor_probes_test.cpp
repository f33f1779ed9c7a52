// VisitorProbes on its own, with a pause loop the test drives (the runs are
// queued, and run only when the test says): each visitor's settings and
// results are its own and never shown to everyone; the bound on runs in
// flight counts other visitors' queued or running runs, lets a visitor's
// own further changes and every ending change pass, and is checked before a
// slot is made; the least recently used visitor with nothing in flight
// makes room past the cap, and one with a run in flight never does.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <deque>

#include "common/refusal.h"
#include "experiments/visitor_probes.h"

namespace visitor_probes_unit {

using nansense::common::Refusal;
using nansense::experiments::Perturbation;
using nansense::experiments::ProbeMode;
using nansense::experiments::Probes;
using nansense::experiments::ProbeSettings;
using nansense::experiments::VisitorProbes;

struct Loop {
  torch::nn::Linear model{torch::nn::LinearOptions(3, 2)};
  std::shared_ptr<nansense::BatchSnapshot> snap = std::make_shared<nansense::BatchSnapshot>();
  std::deque<std::function<void()>> queued;
  int shown = 0;  // calls of the session's show: none may come from a visitor
  uint64_t sequence = 100;

  Loop() {
    torch::manual_seed(0);
    snap->sequence = 7;
    snap->inputs = {torch::randn({4, 3})};
  }
  Probes::Host host() {
    Probes::Host h;
    h.snapshot = [this] { return std::shared_ptr<const nansense::BatchSnapshot>(snap); };
    h.paused = [] { return true; };
    h.in_batch_pause = [] { return false; };
    h.ended = [] { return std::string(); };
    h.post = [this](std::function<void()> work) { queued.push_back(std::move(work)); };
    h.forward = [this] { return [this](const std::vector<torch::Tensor>& in) { return model->forward(in.at(0)); }; };
    h.next_sequence = [this] { return ++sequence; };
    h.show = [this](std::shared_ptr<const nansense::BatchSnapshot>) { ++shown; };
    return h;
  }
  // The pause loop's turn: every queued run, in order.
  void run_queued() {
    while (!queued.empty()) {
      auto work = std::move(queued.front());
      queued.pop_front();
      work();
    }
  }
};

bool always(const ProbeSettings&) { return true; }
bool never(const ProbeSettings&) { return false; }

std::string refusal_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Refusal& e) {
    EXPECT_EQ(e.kind(), Refusal::Kind::kConflict) << e.what();
    return e.what();
  }
  return "";
}

TEST(VisitorProbes, EachVisitorsSettingsAndResultsAreItsOwn) {
  Loop loop;
  VisitorProbes visitors(*loop.model, loop.host(), VisitorProbes::Limits{8, 4});
  visitors.change("a", always, [](Probes& p) { p.pin(); });
  visitors.change("b", always, [](Probes& p) { p.set_mode(ProbeMode::kEval); });
  visitors.change("b", always, [](Probes& p) { p.add_perturbation(Perturbation{0, 1, {2}, {5.0}}); });
  EXPECT_EQ(visitors.runs_in_flight(), 2u);
  loop.run_queued();
  EXPECT_EQ(visitors.runs_in_flight(), 0u);
  auto a = visitors.find("a");
  auto b = visitors.find("b");
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->settings().pinned);
  EXPECT_EQ(a->settings().mode, ProbeMode::kUnchanged);
  EXPECT_TRUE(a->settings().perturbations.empty());
  EXPECT_FALSE(b->settings().pinned);
  EXPECT_EQ(b->settings().mode, ProbeMode::kEval);
  EXPECT_EQ(b->settings().perturbations.size(), 1u);
  ASSERT_TRUE(a->result() && a->result()->view);
  ASSERT_TRUE(b->result() && b->result()->view);
  EXPECT_FALSE(a->result()->diff);
  EXPECT_TRUE(b->result()->diff);
  EXPECT_NE(a->result()->view->sequence, b->result()->view->sequence);
  EXPECT_EQ(loop.shown, 0) << "a visitor's probe was shown to everyone";
  // A reader without a slot gets none (and the idle probe answers for it).
  EXPECT_EQ(visitors.find("c"), nullptr);
  EXPECT_FALSE(visitors.idle().settings().active());
  EXPECT_EQ(visitors.visitors(), 2u);
  // Each is shown its own view; one that ends its probe is shown the live
  // snapshot again, under a sequence newer than its probe's.
  EXPECT_EQ(visitors.shown("a", loop.snap), a->result()->view);
  EXPECT_EQ(visitors.shown("b", loop.snap), b->result()->view);
  EXPECT_EQ(visitors.shown("c", loop.snap), nullptr);
  const uint64_t probe_sequence = a->result()->view->sequence;
  visitors.change("a", never, [](Probes& p) { p.unpin(); });
  auto again = visitors.shown("a", loop.snap);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->probe);
  EXPECT_GT(again->sequence, probe_sequence);
  EXPECT_TRUE(torch::equal(again->inputs.at(0), loop.snap->inputs.at(0)));
  EXPECT_EQ(loop.shown, 0);
}

TEST(VisitorProbes, TheBoundOnRunsInFlightCountsOtherVisitors) {
  Loop loop;
  VisitorProbes visitors(*loop.model, loop.host(), VisitorProbes::Limits{8, 2});
  visitors.change("a", always, [](Probes& p) { p.pin(); });
  visitors.change("b", always, [](Probes& p) { p.pin(); });
  // A third visitor's run: refused, and no slot is made for it.
  const std::string why = refusal_of([&] { visitors.change("c", always, [](Probes& p) { p.pin(); }); });
  EXPECT_NE(why.find("too many probe runs in flight"), std::string::npos) << why;
  EXPECT_NE(why.find("2 of at most 2"), std::string::npos) << why;
  EXPECT_EQ(visitors.find("c"), nullptr);
  // Its own further change passes while its run is queued (it counts once).
  visitors.change("a", always, [](Probes& p) { p.set_mode(ProbeMode::kTrain); });
  EXPECT_EQ(loop.queued.size(), 2u);
  // A change that starts no run passes.
  visitors.change("c", never, [](Probes& p) { p.set_mode(ProbeMode::kUnchanged); });
  loop.run_queued();
  visitors.change("c", always, [](Probes& p) { p.pin(); });
  EXPECT_EQ(visitors.runs_in_flight(), 1u);
  loop.run_queued();
  EXPECT_TRUE(visitors.find("c")->settings().pinned);
  EXPECT_EQ(visitors.find("a")->settings().mode, ProbeMode::kTrain);
}

TEST(VisitorProbes, TheLeastRecentlyUsedIdleVisitorMakesRoom) {
  Loop loop;
  VisitorProbes visitors(*loop.model, loop.host(), VisitorProbes::Limits{2, 4});
  visitors.change("a", always, [](Probes& p) { p.pin(); });
  visitors.change("b", always, [](Probes& p) { p.pin(); });
  loop.run_queued();
  ASSERT_TRUE(visitors.find("a"));  // a is now the most recent
  visitors.change("c", always, [](Probes& p) { p.pin(); });
  EXPECT_EQ(visitors.visitors(), 2u);
  EXPECT_EQ(visitors.find("b"), nullptr) << "b was the least recent";
  ASSERT_TRUE(visitors.find("a"));
  EXPECT_TRUE(visitors.find("a")->settings().pinned);
  // c's run is in flight: it is never the one evicted, even as the least recent.
  ASSERT_TRUE(visitors.find("a"));
  visitors.change("d", never, [](Probes&) {});
  EXPECT_NE(visitors.find("c"), nullptr) << "a visitor with a run in flight was evicted";
  EXPECT_EQ(visitors.find("a"), nullptr);
  // Every slot in flight: a newcomer is refused, saying so.
  visitors.change("d", always, [](Probes& p) { p.pin(); });
  const std::string why = refusal_of([&] { visitors.change("e", never, [](Probes&) {}); });
  EXPECT_NE(why.find("visitor slots"), std::string::npos) << why;
  loop.run_queued();
  EXPECT_TRUE(visitors.find("c")->result() && visitors.find("d")->result());
}

}  // namespace visitor_probes_unit
