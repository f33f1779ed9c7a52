// The narrow interface a transport attaches to a session through: the web
// server (REST, the push channel, MCP) sees the run's state, snapshots and
// settings and gives the run-control commands, never the training thread's
// entry points or the engine's parts. src/server/ includes this header, not
// session_core.h; the session in turn knows its transport only as an
// Attachment it keeps alive.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiments/engine.h"
#include "experiments/probe.h"
#include "nansense/architecture.h"
#include "nansense/debug.h"
#include "numerics/debug_state.h"
#include "numerics/rerun_note.h"
#include "nansense/options.h"
#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/session.h"
#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "nansense/time_travel.h"

namespace nansense::detail {

// A transport attached to a session: kept alive as long as the session, and
// destroyed before the session's parts go.
class Attachment {
 public:
  virtual ~Attachment() = default;
  // Where it serves: "http://127.0.0.1:8080/" (with ?token=... on a
  // non-loopback bind).
  virtual std::string url() const = 0;
  // The session's close() (on the training thread): what the transport keeps
  // open about the run (recordings) is finished; it goes on serving.
  virtual void session_closed() {}
};

// The session as the server sees it, one interface per area; SessionPort is
// them all. A part of the server that needs one area takes that interface.
// Every method is callable from any thread except the training thread's own
// waits (wait_until_stopped, wait_for_snapshot_after).

// Where the run is, its snapshots, and run control.
class RunPort {
 public:
  virtual ~RunPort() = default;

  // --- where the run is ---
  virtual RunState state() const = 0;
  virtual Mode mode() const = 0;
  // When the current pause began (wall clock), if paused.
  virtual std::optional<std::chrono::system_clock::time_point> paused_since() const = 0;
  virtual std::string lost_reason() const = 0;
  virtual std::optional<BatchPosition> live_position() const = 0;
  // The batch under way in a trainer's words, where a trainer adapter says it.
  virtual std::optional<TrainerStep> trainer_step() const = 0;
  virtual const Schedule& schedule() const = 0;
  // Errors of nansense's own machinery that disabled a part.
  virtual std::vector<std::string> internal_errors() const = 0;
  // The last published snapshot (a probe's result in its place while a probe
  // is active: see experiments/probe.h) and architecture (null before the first).
  virtual std::shared_ptr<const BatchSnapshot> snapshot() const = 0;
  virtual std::shared_ptr<const Architecture> architecture() const = 0;
  // Session::lock() was called: the transports refuse what the command table
  // marks refused when locked (server/controller/commands.h).
  virtual bool locked() const = 0;
  // What runs the loop: "cpp" (a LibTorch program) or "python" (PyTorch
  // through the Python package), for the page to say.
  virtual std::string front_end() const = 0;

  // --- run control: as Session's methods of the same names ---
  virtual void step_batch() = 0;
  virtual void step_phase() = 0;
  virtual void step_epoch() = 0;
  virtual void run_until(const BatchPosition& target) = 0;
  virtual void run() = 0;
  virtual void detach() = 0;
  virtual void pause() = 0;
  virtual void refresh() = 0;
  // Blocks until the loop pauses, finishes or is lost, or the timeout passes.
  virtual RunState wait_until_stopped(std::chrono::milliseconds timeout) const = 0;
  // Blocks until a snapshot newer than `sequence` is published (true), or the
  // timeout passes, or the loop stops running (false).
  virtual bool wait_for_snapshot_after(uint64_t sequence, std::chrono::milliseconds timeout) const = 0;
  // The change feed: sleeps until the state, mode, settings or snapshot change
  // after `seen` (a counter), or the timeout passes; returns the counter.
  virtual uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const = 0;
  // Wakes every wait_for_change() (a transport shutting down).
  virtual void notify_changed() = 0;
};

// The numerical checks and their held error.
class NumericsPort {
 public:
  virtual ~NumericsPort() = default;

  // --- numerical checks (see nansense/debug.h and numerics/debug_state.h) ---
  virtual DebugSettings debug_settings() const = 0;
  // Throws ArgumentError naming the first bad value.
  virtual void set_debug_settings(const DebugSettings& settings) = 0;
  virtual std::optional<DebugError> debug_error() const = 0;
  virtual int64_t checked_batches() const = 0;
  // The loss scaler as the guard counts it (mixed precision).
  virtual LossScaleStatus loss_scale() const = 0;
  // Tensors whose check failed and is off for them (the rest stay checked).
  virtual std::vector<numerics::UncheckedTensor> unchecked_tensors() const = 0;
  // What a traced re-run restores and repeats (the debug report, the banner).
  virtual numerics::RerunNote rerun_note() const = 0;
  // Whether skipping the held poisoned update is chosen.
  virtual bool skip_update_chosen() const = 0;
  // Why skipping a held update is refused ("" when it is not: a
  // distributed rank's, DebugState::refuse_skip).
  virtual std::string skip_refused() const = 0;
  // Throws std::logic_error when no update is held.
  virtual void choose_update(bool skip) = 0;
  // Throws ArgumentError for an unknown category.
  virtual void disable_debug_check(const std::string& category) = 0;
  virtual void clear_debug_error() = 0;
};

// Statistics over time: the watched set, scope, cadence and the published view.
class StatsPort {
 public:
  virtual ~StatsPort() = default;

  // --- statistics over time: as Session's methods of the same names (UsageError when refused) ---
  virtual StatsScope stats_scope() const = 0;
  virtual void set_stats_scope(StatsScope scope) = 0;
  virtual std::vector<std::string> watched_layers() const = 0;
  virtual void watch(const std::vector<std::string>& layers) = 0;
  virtual void unwatch(const std::vector<std::string>& layers) = 0;
  // Whether batches are collected now (scope all, or watched with a layer).
  virtual bool stats_collecting() const = 0;
  virtual UpdateFrequency update_frequency() const = 0;
  virtual void set_update_frequency(const UpdateFrequency& frequency) = 0;
  virtual WatchPerformance watch_performance() const = 0;
  virtual bool set_watch_performance(const WatchPerformance& performance) = 0;
  virtual std::optional<std::vector<std::string>> patch_layers() const = 0;
  virtual void set_patch_layers(const std::optional<std::vector<std::string>>& layers) = 0;
  virtual std::shared_ptr<const WatchSnapshot> watch_snapshot() const = 0;
  virtual std::vector<FailedInstrument> instrument_errors() const = 0;
};

// Time travel: the checkpoint cache and jumps.
class TimeTravelPort {
 public:
  virtual ~TimeTravelPort() = default;

  // --- time travel ---
  virtual TimeTravelStatus time_travel_status() const = 0;
  // Bytes on disk per cached epoch.
  virtual std::map<int64_t, uint64_t> checkpoint_sizes() const = 0;
  // Throws TimeTravelError when refused.
  virtual void request_time_travel(int64_t epoch) = 0;
};

// Whose probes a probe call is about: nullopt, the session's one shared
// probe state (an unlocked session); a visitor's own on a locked session
// (experiments/visitor_probes.h).
using ProbeOwner = std::optional<std::string>;

// What a probe state shows, copied out of it.
struct ProbeView {
  experiments::ProbeSettings settings;
  uint64_t runs_completed = 0;
  bool pending = false;                                    // a run is queued or running
  std::shared_ptr<const experiments::ProbeResult> result;  // the newest run's; null before the first
};

// One probe command (experiments/probe.h's Probes has what each does).
struct ProbeChange {
  enum class Kind { kPin, kUnpin, kSetMode, kAddPerturbation, kClearPerturbations };
  Kind kind = Kind::kPin;
  experiments::ProbeMode mode = experiments::ProbeMode::kUnchanged;  // kSetMode
  experiments::Perturbation perturbation;                            // kAddPerturbation
};

// What a probe command did.
struct ProbeChanged {
  bool unpinned = false;  // kUnpin: a batch was pinned
  int64_t cleared = 0;    // kClearPerturbations: how many
  // The probes' settings generation after the change: wait_for_probe waits
  // for the run that answers it.
  uint64_t settings_generation = 0;
};

// Experiments and probes on the paused model, as commands and the plain
// values they return: the engine's parts stay the session's.
class LabPort {
 public:
  virtual ~LabPort() = default;

  // --- experiments on the paused model: as experiments::Engine's methods (src/experiments/engine.h) ---
  using Submitted = experiments::Engine::Submitted;
  virtual Submitted submit_experiment(const std::string& kind, const std::string& layer,
                                      const common::json& params) = 0;
  // Null when `seq` is not kept.
  virtual std::shared_ptr<const experiments::Result> experiment_result(uint64_t seq) const = 0;
  virtual std::shared_ptr<const experiments::Result> wait_for_experiment(uint64_t seq,
                                                                         std::chrono::milliseconds timeout) const = 0;
  virtual std::optional<int64_t> experiment_queued_ahead(uint64_t seq) const = 0;
  virtual std::vector<uint64_t> kept_experiments() const = 0;
  virtual std::shared_ptr<const experiments::Result> latest_finished_experiment(
      const std::function<bool(const experiments::Result&)>& which) const = 0;
  virtual int cancel_experiments(std::optional<uint64_t> seq) = 0;
  virtual bool auto_run_experiments() const = 0;
  virtual void set_auto_run_experiments(bool on) = 0;
  virtual common::json experiment_defaults() const = 0;
  virtual std::vector<std::string> set_experiment_defaults(const std::string& kind, const common::json& params) = 0;
  virtual double experiment_time_limit_seconds() const = 0;
  virtual bool experiment_forward_known() const = 0;
  // A tab's auto experiment, registered or renewed now.
  virtual Submitted set_auto_experiment(const std::string& tab, const std::string& kind, const std::string& layer,
                                        const common::json& params, bool pinned) = 0;
  virtual bool clear_auto_experiment(const std::string& tab) = 0;
  // The auto experiments still renewed now.
  virtual std::vector<experiments::AutoRuns::Entry> auto_experiments() = 0;
  virtual experiments::Engine::Changes experiment_changes_since(uint64_t version) const = 0;

  // --- probes: the paused model re-run on pinned or perturbed inputs (src/experiments/probe.h) ---
  // `owner`'s probe state; nullopt for a visitor that has none (an idle
  // probe: reading makes no slot).
  virtual std::optional<ProbeView> probe_view(const ProbeOwner& owner) const = 0;
  // Applies `change` to `owner`'s probes (a visitor's made on first use).
  // Refusal(kConflict) for a change that would start a run while the other
  // visitors hold the bound of runs in flight; the probes' own refusals pass
  // through.
  virtual ProbeChanged change_probe(const ProbeOwner& owner, const ProbeChange& change) = 0;
  // Waits until the run answering settings `generation` finished or the
  // timeout passes.
  virtual void wait_for_probe(const ProbeOwner& owner, uint64_t generation,
                              std::chrono::milliseconds timeout) const = 0;
  // The snapshot a visitor is shown in place of `live` (VisitorProbes::shown);
  // null when it has nothing of its own.
  virtual std::shared_ptr<const BatchSnapshot> visitor_snapshot(const std::string& visitor,
                                                                const std::shared_ptr<const BatchSnapshot>& live) = 0;
  // At most this many visitors' probe runs are in flight at once.
  virtual size_t probe_runs_in_flight_limit() const = 0;
};

// The attached transport and how it shows inputs.
class TransportPort {
 public:
  virtual ~TransportPort() = default;

  // --- the attached transport ---
  // How the pictures show inputs (input_mean/std, transforms): the options
  // the transport was served with.
  virtual const ServeOptions& display_options() const = 0;
  virtual void set_display_options(const ServeOptions& options) = 0;
  virtual bool attached() const = 0;
  // Keeps `transport` alive with the session; a paused loop can now be
  // resumed from outside, so the session pauses where it would.
  virtual void attach(std::unique_ptr<Attachment> transport) = 0;
  // The attached transport's address; empty without one.
  virtual std::string url() const = 0;
  // Why this session serves nothing (a distributed run's follower: rank 0
  // serves every rank's UI); empty when it can serve.
  virtual std::string unserved_reason() const = 0;
};

class SessionPort : public RunPort,
                    public NumericsPort,
                    public StatsPort,
                    public TimeTravelPort,
                    public LabPort,
                    public TransportPort {};

class SessionCore;
// The port a SessionCore hands out (session_port.cpp).
std::unique_ptr<SessionPort> make_port(SessionCore& core);
// The port of `session`'s engine; null for a disabled session.
SessionPort* port_of(const Session& session);

}  // namespace nansense::detail
