// The ops nansense runs for itself (copies, statistics, checks), kept out of
// what RecordFunction's callbacks see, more cheaply than
// at::DisableRecordFunctionGuard alone: each of that guard's toggles copies
// and rebuilds LibTorch's thread-local callback state (0.35 us with no
// callback installed, 0.6 us with one), and a captured batch toggled it
// several hundred times.
//
// While an OwnOps lives on a thread, nansense's observer passes over the ops
// the thread runs (it reads the count below), as it passes over those its
// consumers run inside its callbacks. The guard is taken only where it does
// something:
// - never when no callback is installed at all (most batches: the observer
//   is installed for traced batches only);
// - kFew, for a scope that runs no op or a few (a copy into a recycled
//   buffer): not for the observer's own thread-local callback, which sees
//   those few ops for less than a toggle costs and passes over them; a
//   thread-local profiler running during a traced batch then sees them too;
// - kMany, for a scope that runs many ops (statistics): whenever a callback
//   is installed, as each op would otherwise box its arguments for it.
#pragma once

#include <ATen/record_function.h>

#include <optional>

namespace nansense::common {

class OwnOps {
 public:
  enum Ops { kFew, kMany };
  explicit OwnOps(Ops ops = kMany);
  ~OwnOps();
  OwnOps(const OwnOps&) = delete;
  OwnOps& operator=(const OwnOps&) = delete;

  // An OwnOps lives on this thread.
  static bool active();
  // nansense's observer is installed (it counts itself in and out): its
  // thread-local callback then needs no guard.
  static void observer_installed(bool installed);

 private:
  std::optional<at::DisableRecordFunctionGuard> guard_;
};

}  // namespace nansense::common
