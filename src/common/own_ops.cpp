#include "common/own_ops.h"

#include <atomic>

namespace nansense::common {

namespace {
thread_local int t_depth = 0;
std::atomic<int> g_observers{0};
}  // namespace

OwnOps::OwnOps(Ops ops) {
  ++t_depth;
  const bool global = at::hasGlobalCallbacks();
  const bool thread_local_ones = at::hasThreadLocalCallbacks();
  const bool observer_in = g_observers.load(std::memory_order_relaxed) > 0;
  if (global || (thread_local_ones && (ops == kMany || !observer_in))) guard_.emplace();
}

OwnOps::~OwnOps() {
  guard_.reset();
  --t_depth;
}

bool OwnOps::active() { return t_depth > 0; }

void OwnOps::observer_installed(bool installed) { g_observers.fetch_add(installed ? 1 : -1); }

}  // namespace nansense::common
