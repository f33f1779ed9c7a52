// The one command/query layer every UI and MCP action goes through, named like
// the MCP tools of the original NaNsense 0.4.0 (Python, on PyPI). Arguments arrive checked against their
// declarations (commands.h); transports only parse and format.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "server/controller/controller_debug.h"
#include "server/controller/controller_experiments.h"
#include "server/controller/controller_history.h"
#include "server/controller/controller_patches.h"
#include "server/controller/controller_probes.h"
#include "server/controller/controller_recordings.h"
#include "server/controller/controller_run.h"
#include "server/controller/controller_views.h"
#include "server/controller/controller_weights.h"
#include "server/controller/json_views.h"
#include "server/controller/pictures.h"
#include "server/controller/refusal.h"
#include "server/controller/status.h"

namespace nansense::detail {
class SessionPort;
}

namespace nansense::server {

// Who the calls on this thread are made for, while it stands: a visitor of a
// locked session (Session::lock), named by the transport (the web server's
// nansense_visitor cookie, an MCP session). On a locked session each visitor
// has probes of its own (experiments/visitor_probes.h): its probe commands
// change them alone, and the snapshot its queries and pictures read is its
// own probe's result while one is active, else the shared snapshot every
// visitor sees. Without a scope ("" visitor) calls read the shared view and a
// locked session refuses probe changes. An unlocked session ignores it (one
// probe state, shared). dispatch() opens one per call; the push channel one
// per page it serves.
class VisitorScope {
 public:
  explicit VisitorScope(std::string visitor);
  ~VisitorScope();
  VisitorScope(const VisitorScope&) = delete;
  VisitorScope& operator=(const VisitorScope&) = delete;
  // The innermost scope's visitor on this thread; "" outside any.
  static const std::string& current();

 private:
  std::string visitor_;
  const std::string* previous_;
};

// The one owner of the command/query layer: one area object per part of
// the run (the headers beside this one), each a handful of commands, and
// what they share: the snapshot the caller is shown. The command table
// (commands.h) calls the areas through it.
class Controller {
 public:
  explicit Controller(detail::SessionPort& session);
  ~Controller();  // finishes every recording

  // How long a command waits for the loop to pause; zero returns at once.
  using Wait = std::chrono::milliseconds;

  RunArea& run_control() { return run_; }
  ViewArea& views() { return views_; }
  WeightArea& weights() { return weights_; }
  StatsArea& stats() { return stats_; }
  PatchArea& patches() { return patches_; }
  ExperimentArea& experiments() { return experiments_; }
  ProbeArea& probes() { return probes_; }
  DebugArea& debug() { return debug_; }
  RecordingArea& recordings() { return recordings_; }

  // Session::lock() was called (commands.h's dispatch refuses accordingly).
  bool locked() const;
  // The snapshot the caller is shown: on a locked session the visitor's own
  // probe result while one is active, else the last published snapshot
  // (null before the first). Every query and picture reads this one.
  std::shared_ptr<const BatchSnapshot> shown_snapshot() const;
  // shown_snapshot(); kNotFound before the first capture.
  std::shared_ptr<const BatchSnapshot> require_snapshot() const;
  // The published statistics; an empty view before the first.
  std::shared_ptr<const WatchSnapshot> require_stats() const;
  // The shown snapshot's sequence number; 0 before the first.
  uint64_t snapshot_sequence() const;
  // Whether `visitor` is shown a view of its own: the session is locked and
  // the visitor has probe state (VisitorScope). The push channel then makes
  // its status and strips apart from the shared ones.
  bool has_own_view(const std::string& visitor) const;

 private:
  detail::SessionPort& session_;
  RunArea run_;
  ViewArea views_;
  WeightArea weights_;
  StatsArea stats_;
  PatchArea patches_;
  ExperimentArea experiments_;
  ProbeArea probes_;
  DebugArea debug_;
  // Last: its recorder's thread draws through the areas above, so it stops first.
  RecordingArea recordings_;
};

}  // namespace nansense::server
