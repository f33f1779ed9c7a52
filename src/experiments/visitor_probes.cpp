#include "experiments/visitor_probes.h"

#include <stdexcept>

#include "common/refusal.h"

namespace nansense::experiments {

using common::Refusal;

VisitorProbes::VisitorProbes(torch::nn::Module& model, Probes::Host host, Limits limits)
    : model_(model), host_(std::move(host)), limits_(limits) {
  if (limits_.visitors == 0 || limits_.runs_in_flight == 0) {
    throw std::invalid_argument("VisitorProbes: the limits must be at least 1");
  }
  host_.show = nullptr;
  // Nothing changes it: it only answers "no probe" for visitors without one.
  Probes::Host none;
  none.snapshot = host_.snapshot;
  idle_ = std::make_unique<Probes>(model_, std::move(none));
}

std::shared_ptr<Probes> VisitorProbes::of_locked(const std::string& visitor) {
  if (auto it = slots_.find(visitor); it != slots_.end()) {
    recency_.splice(recency_.begin(), recency_, it->second.recency);
    return it->second.probes;
  }
  if (slots_.size() >= limits_.visitors) {
    // The least recently used visitor with nothing in flight makes room.
    auto victim = recency_.end();
    for (auto it = recency_.rbegin(); it != recency_.rend(); ++it) {
      if (!slots_.at(*it).probes->pending()) {
        victim = std::next(it).base();
        break;
      }
    }
    if (victim == recency_.end()) {
      throw Refusal(Refusal::Kind::kConflict, "every one of the " + std::to_string(limits_.visitors) +
                                                  " visitor slots of this locked session has a probe run in "
                                                  "flight; try again when one finishes");
    }
    slots_.erase(*victim);
    recency_.erase(victim);
  }
  // A queued run keeps its probes alive, even when the visitor is evicted
  // before it runs (the run then shows nobody).
  auto self = std::make_shared<std::weak_ptr<Probes>>();
  Probes::Host host = host_;
  auto shown = std::make_shared<Shown>();
  host.show = [shown, snapshot = host_.snapshot,
               next_sequence = host_.next_sequence](std::shared_ptr<const BatchSnapshot> view) {
    if (!view) {
      // The live snapshot again, under a sequence newer than the probe's.
      auto live = snapshot ? snapshot() : nullptr;
      if (live) {
        auto copy = std::make_shared<BatchSnapshot>(*live);
        if (next_sequence) copy->sequence = next_sequence();
        view = std::move(copy);
      }
    }
    std::lock_guard lock(shown->mu);
    shown->view = std::move(view);
  };
  host.post = [self, post = host_.post](std::function<void()> work) {
    auto keep = self->lock();
    if (!post) return;
    post([keep, work = std::move(work)] { work(); });
  };
  auto probes = std::make_shared<Probes>(model_, std::move(host));
  *self = probes;
  if (closed_) probes->close();
  recency_.push_front(visitor);
  slots_.emplace(visitor, Slot{probes, recency_.begin(), shown});
  return probes;
}

std::shared_ptr<Probes> VisitorProbes::of(const std::string& visitor) {
  std::lock_guard lock(mu_);
  return of_locked(visitor);
}

std::shared_ptr<Probes> VisitorProbes::find(const std::string& visitor) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(visitor);
  if (it == slots_.end()) return nullptr;
  recency_.splice(recency_.begin(), recency_, it->second.recency);
  return it->second.probes;
}

std::shared_ptr<const BatchSnapshot> VisitorProbes::shown(const std::string& visitor,
                                                          const std::shared_ptr<const BatchSnapshot>& live) {
  std::shared_ptr<Shown> slot;
  {
    std::lock_guard lock(mu_);
    auto it = slots_.find(visitor);
    if (it == slots_.end()) return nullptr;
    slot = it->second.shown;
  }
  std::shared_ptr<const BatchSnapshot> view;
  {
    std::lock_guard lock(slot->mu);
    view = slot->view;
  }
  if (!view) return nullptr;
  // A probe's view stands; a re-shown live snapshot only until a newer one.
  if (view->probe || !live || view->sequence > live->sequence) return view;
  return nullptr;
}

size_t VisitorProbes::in_flight_locked(const std::string& except) const {
  size_t n = 0;
  for (const auto& [visitor, slot] : slots_) {
    if (visitor != except && slot.probes->pending()) ++n;
  }
  return n;
}

std::shared_ptr<Probes> VisitorProbes::change(const std::string& visitor,
                                              const std::function<bool(const ProbeSettings&)>& starts_run,
                                              const std::function<void(Probes&)>& change) {
  // One change at a time: the count and the run it starts cannot interleave
  // with another visitor's. The run itself happens on the training thread,
  // which never takes this lock.
  std::lock_guard lock(mu_);
  // The bound is checked before a slot is made (a refused newcomer evicts
  // nobody).
  auto it = slots_.find(visitor);
  const bool pending = it != slots_.end() && it->second.probes->pending();
  const ProbeSettings before = it != slots_.end() ? it->second.probes->settings() : ProbeSettings{};
  if (!pending && starts_run(before)) {
    const size_t others = in_flight_locked(visitor);
    if (others >= limits_.runs_in_flight) {
      throw Refusal(Refusal::Kind::kConflict,
                    "too many probe runs in flight on this locked session (" + std::to_string(others) + " of at most " +
                        std::to_string(limits_.runs_in_flight) +
                        ", each visitor's probe runs in turn on the one model); try again in a moment");
    }
  }
  auto probes = of_locked(visitor);
  change(*probes);
  return probes;
}

size_t VisitorProbes::visitors() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

size_t VisitorProbes::runs_in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_locked("");
}

void VisitorProbes::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  for (auto& [visitor, slot] : slots_) slot.probes->close();
}

}  // namespace nansense::experiments
