// How nansense's own code (and its tests and benchmarks) reach the engine
// behind a Session handle. Not part of the public API.
#pragma once

#include "nansense/session.h"
#include "session/session_core.h"

namespace nansense::detail {

struct SessionAccess {
  // Null for a disabled session.
  static SessionCore* core(const Session& session) { return session.core_.get(); }
};

inline SessionCore* core_of(const Session& session) { return SessionAccess::core(session); }

}  // namespace nansense::detail
