#include "experiments/auto_runs.h"

#include <algorithm>

namespace nansense::experiments {

bool AutoRuns::put(const std::string& tab, const std::string& kind, const std::string& layer,
                   const common::json& params, Clock::time_point now, bool pinned) {
  const common::json p = params.is_null() ? common::json::object() : params;
  for (auto& e : entries_) {
    if (e.tab != tab) continue;
    const bool changed = e.kind != kind || e.layer != layer || e.params != p;
    e.kind = kind;
    e.layer = layer;
    e.params = p;
    e.renewed = now;
    e.pinned = pinned;
    return changed;
  }
  entries_.push_back(Entry{tab, kind, layer, p, now, pinned});
  return true;
}

bool AutoRuns::remove(const std::string& tab) {
  const auto before = entries_.size();
  std::erase_if(entries_, [&](const Entry& e) { return e.tab == tab; });
  return entries_.size() != before;
}

std::vector<std::string> AutoRuns::expire(Clock::time_point now) {
  std::vector<std::string> dropped;
  std::erase_if(entries_, [&](const Entry& e) {
    if (e.pinned || now - e.renewed <= kTtl) return false;
    dropped.push_back(e.tab);
    return true;
  });
  return dropped;
}

bool AutoRuns::any_pinned() const {
  return std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.pinned; });
}

}  // namespace nansense::experiments
