// Probes per visitor of a locked session (Session::lock: a shared demo many
// anonymous visitors browse at once). Each visitor (a browser, named by the
// cookie the server issues) gets probes of its own: its pin, forward mode and
// perturbations re-run the model for its view only, and the shared view that
// every other visitor sees never shows them. Slots are bounded (the least
// recently used idle visitor makes room) and so are the runs in flight (a
// change that would start one past the bound is refused with a reason). The
// runs themselves are Probes runs: queued to the pause loop, each isolated
// (state/isolation.h), one at a time on the training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "experiments/probe.h"

namespace nansense::experiments {

class VisitorProbes {
 public:
  struct Limits {
    // Visitors holding probe state at once; one more evicts the least
    // recently used visitor with no run in flight (its probe ends).
    size_t visitors = 256;
    // Probe runs queued or running at once, over all visitors; a change that
    // would start one more is refused (a visitor's own queued run absorbs
    // its further changes and counts once).
    size_t runs_in_flight = 4;
  };

  // `host` as the session's own probes get it; its `show` is not used (a
  // visitor's view is read through shown(), never shown to everyone).
  VisitorProbes(torch::nn::Module& model, Probes::Host host, Limits limits);

  // --- any thread ---
  // The visitor's probes, made on first use. Refusal(kConflict) when every
  // slot holds a visitor whose run is in flight.
  std::shared_ptr<Probes> of(const std::string& visitor);
  // The visitor's probes, or null when it has none (reading makes no slot:
  // anonymous viewers polling the status cost nothing). Marks it recently used.
  std::shared_ptr<Probes> find(const std::string& visitor);
  // Runs `change` on the visitor's probes (made on first use) and returns
  // them. `starts_run(settings)`, given the visitor's settings before the
  // change, says whether the change can start a run; such a change is
  // refused (Refusal(kConflict), saying so) while the other visitors hold the
  // bound of runs in flight. Changes that end a probe always pass. Changes
  // are serialised: the count and the run a change starts cannot interleave
  // with another's.
  std::shared_ptr<Probes> change(const std::string& visitor,
                                 const std::function<bool(const ProbeSettings&)>& starts_run,
                                 const std::function<void(Probes&)>& change);
  // The snapshot the visitor is shown in place of the live one `live`: its
  // probe's view while one is shown, else the live snapshot again under the
  // sequence it was re-shown with (while that is newer than `live`'s); null
  // when the visitor has nothing of its own (it sees `live`).
  std::shared_ptr<const BatchSnapshot> shown(const std::string& visitor,
                                             const std::shared_ptr<const BatchSnapshot>& live);
  // What the view of a visitor without a probe state of its own shows: an
  // inactive probe.
  const Probes& idle() const { return *idle_; }

  size_t visitors() const;
  size_t runs_in_flight() const;
  const Limits& limits() const { return limits_; }

  // The session closed: every visitor's waiters wake.
  void close();

 private:
  // What a visitor's probes last showed it (their Host::show): a probe run's
  // view, or after the probe ended (or a run failed) a copy of the live
  // snapshot under a fresh sequence, so the visitor's page moves forward to
  // it as it moves forward to every new snapshot.
  struct Shown {
    std::mutex mu;
    std::shared_ptr<const BatchSnapshot> view;
  };
  struct Slot {
    std::shared_ptr<Probes> probes;
    std::list<std::string>::iterator recency;
    std::shared_ptr<Shown> shown;
  };
  // mu_ held.
  std::shared_ptr<Probes> of_locked(const std::string& visitor);
  size_t in_flight_locked(const std::string& except) const;

  torch::nn::Module& model_;
  Probes::Host host_;
  Limits limits_;
  std::unique_ptr<Probes> idle_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> slots_;
  std::list<std::string> recency_;  // most recent first
  bool closed_ = false;
};

}  // namespace nansense::experiments
