// The experiments pages keep running by themselves ("auto experiments"): each
// open Experiment page (a tab) registers the experiment it shows, renews the
// registration with a heartbeat, and every snapshot publish re-runs each
// registered experiment while auto-run is on. A tab that goes away (closed,
// crashed, offline) stops renewing and its entry expires kTtl later. Entries
// are keyed per tab, so tabs never replace or cancel each other's runs.
//
// Time is passed in, never read here: expiry is a comparison against the
// caller's clock (the engine's steady clock; tests pass their own times).
// Not thread-safe: the engine guards it with its own mutex.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/json_values.h"

namespace nansense::experiments {

class AutoRuns {
 public:
  using Clock = std::chrono::steady_clock;
  // How long an entry outlives its last heartbeat (pages renew every second).
  static constexpr std::chrono::seconds kTtl{5};

  struct Entry {
    std::string tab;
    std::string kind;
    std::string layer;
    common::json params;  // as the tab sent them (resolved again at each run)
    Clock::time_point renewed;
    // A recording's (server/controller/recorder.h): never expires, and runs
    // at each snapshot whether or not auto-run is on, until removed.
    bool pinned = false;
  };

  // Registers or renews `tab`'s experiment at `now`. True when it is new or
  // differs from the tab's previous one (then it should run at once); a
  // heartbeat with the same experiment only renews it.
  bool put(const std::string& tab, const std::string& kind, const std::string& layer, const common::json& params,
           Clock::time_point now, bool pinned = false);
  // Forgets `tab`'s entry (the page closed or turned auto-run off); false
  // when there was none.
  bool remove(const std::string& tab);
  // Drops every entry but the pinned last renewed more than kTtl before
  // `now`; returns the tabs dropped.
  std::vector<std::string> expire(Clock::time_point now);
  const std::vector<Entry>& entries() const { return entries_; }
  bool any_pinned() const;

 private:
  std::vector<Entry> entries_;  // in registration order: re-runs queue in that order
};

}  // namespace nansense::experiments
