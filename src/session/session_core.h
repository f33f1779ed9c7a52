// The engine behind a Session handle: schedule, run control, capture and the
// published snapshot. Training-thread entry points and thread-safe queries.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capture/optimizer_state.h"
#include "capture/tracer.h"
#include "experiments/engine.h"
#include "experiments/probe.h"
#include "experiments/visitor_probes.h"
#include "common/atomic_shared_ptr.h"
#include "observer/observer.h"
#include "nansense/moment.h"
#include "nansense/options.h"
#include "nansense/schedule.h"
#include "nansense/session.h"
#include "nansense/snapshot.h"
#include "numerics/monitor.h"
#include "session/run_control.h"
#include "session/session_port.h"
#include "session/stats_collector.h"
#include "state/state_file.h"
#include "time_travel/restorer.h"

namespace nansense::distributed {
class Coordinator;
}  // namespace nansense::distributed

namespace nansense::detail {

class SessionCore {
 public:
  SessionCore(std::shared_ptr<torch::nn::Module> model, const StartOptions& options);
  ~SessionCore();

  // --- training thread ---
  // `settled`: in a distributed run, the ranks met when the last batch
  // ended (meet_after_batch), not here.
  bool begin_batch(const std::string& phase, std::optional<int64_t> epoch, bool settled = false);
  void set_batch_inputs(std::vector<torch::Tensor> inputs, bool stacked);
  void record_item(std::vector<torch::Tensor> tensors);
  // True: deliver the same item again (see detail::end_batch).
  // `can_repeat`: false where the loop cannot deliver the item again (a
  // manual batch context): a batch that would be re-run traced is not.
  bool end_batch(bool can_repeat = true);
  void end_phase(const std::string& phase, int64_t count);
  void abandon_batch(bool by_exception);
  // Session::log_scalar: at the current batch position.
  void log_scalar(const std::string& name, double value);
  // Session::rerunning: the batch under way is the traced re-run.
  bool rerunning() const { return rerunning_; }
  void close();
  void mark_lost(const std::string& reason);
  // The batch's tracer while one runs (a captured or collected batch), for
  // a caller that reports module scopes (Tracer::set_module_scope).
  capture::Tracer* tracer() { return tracer_.get(); }

  // --- any thread ---
  Schedule& schedule() { return schedule_; }
  const Schedule& schedule() const { return schedule_; }
  RunControl& control() { return control_; }
  const RunControl& control() const { return control_; }
  std::shared_ptr<const BatchSnapshot> snapshot() const { return snapshot_.load(); }
  // What the UI shows: the last published snapshot, or a probe's result in
  // its place while a probe is active (experiments/probe.h).
  std::shared_ptr<const BatchSnapshot> shown_snapshot() const { return shown_.load(); }
  std::shared_ptr<const Architecture> architecture() const { return architecture_.load(); }
  std::optional<BatchPosition> live_position() const { return schedule_.current(); }
  // A trainer adapter's words for the batch under way (the Hugging Face
  // Trainer's callback: the optimizer step, its micro-batches): shown in the
  // status, stamped on snapshots and on a debug error. Set before the batch
  // begins (nullopt: none, as for a val batch); set_micro_batch as each
  // micro-batch runs (-1 after the last). Any thread may read it.
  void set_trainer_step(std::optional<TrainerStep> step) {
    std::lock_guard lock(trainer_step_mu_);
    trainer_step_ = step;
  }
  // On the training thread.
  void set_micro_batch(int64_t index) {
    {
      std::lock_guard lock(trainer_step_mu_);
      if (trainer_step_) trainer_step_->micro_batch = index;
    }
    if (index >= 0) numerics_->begin_micro_batch();
  }
  std::optional<TrainerStep> trainer_step() const {
    std::lock_guard lock(trainer_step_mu_);
    return trainer_step_;
  }
  bool closed() const { return closed_.load(); }
  // Blocks until a snapshot newer than `sequence` is published (true), or the
  // timeout passes, or the loop stops running (false).
  bool wait_for_snapshot_after(uint64_t sequence, std::chrono::milliseconds timeout) const;
  // Errors of nansense's own machinery that disabled a part (shown in status).
  std::vector<std::string> internal_errors() const;
  const ServeOptions& display_options() const { return display_; }
  // Numerical checks, root cause and flight recorder (see nansense/debug.h).
  numerics::DebugState& debug() { return numerics_->state(); }
  const numerics::DebugState& debug() const { return numerics_->state(); }
  // Statistics over time: settings from any thread, the published view.
  StatsCollector& stats() { return *stats_; }
  const StatsCollector& stats() const { return *stats_; }

  // Experiments on the paused model (experiments/engine.h).
  experiments::Engine& experiments() { return *experiments_; }
  // Probes on the paused model (experiments/probe.h).
  experiments::Probes& probes() { return *probes_; }
  // Each visitor's own probes on a locked session (experiments/visitor_probes.h).
  experiments::VisitorProbes& visitor_probes() { return *visitor_probes_; }

  // The transport's view of this session (see session_port.h).
  SessionPort& port() { return *port_; }
  void set_display_options(const ServeOptions& options) { display_ = options; }
  bool attached() const { return attachment_ != nullptr; }
  void set_no_ui_hint(std::string hint) { no_ui_hint_ = std::move(hint); }
  // Which front end runs the loop: "cpp" (a LibTorch program) unless the
  // Python package says it runs it (the server's threads read it).
  void set_python_front_end() { python_front_end_ = true; }
  std::string front_end() const { return python_front_end_ ? "python" : "cpp"; }
  // What a NaN's log line says when no UI is served (a host that stops on
  // the first NaN, as the Lightning callback does, says so).
  void set_unserved_nan_note(std::string note) { unserved_nan_note_ = std::move(note); }
  // What a traced re-run repeats, as the front end running the loop body
  // says it (the Lightning callback: training_step, not a loop body).
  void set_rerun_note(numerics::RerunNote note) {
    std::lock_guard<std::mutex> lock(rerun_note_mutex_);
    rerun_note_ = std::move(note);
  }
  numerics::RerunNote rerun_note() const {
    std::lock_guard<std::mutex> lock(rerun_note_mutex_);
    return rerun_note_;
  }
  void attach(std::unique_ptr<Attachment> transport) { attachment_ = std::move(transport); }
  std::string url() const;

  // --- distributed runs (session/session_distributed.cpp) ---
  // start(): joins the run StartOptions::distributed() names (of 2+ ranks):
  // meets every rank's start (DistributedError after NANSENSE_DDP_TIMEOUT
  // when one is missing); a follower (rank > 0) is detached and serves nothing.
  void join_run(const DistributedRun& run);
  // This process's rank in a coordinated run; nullopt outside one.
  std::optional<int> rank() const { return rank_; }
  // The Python package's nansense.start() in a torch.distributed process
  // group of 2+ ranks: joins it over the group's TCPStore at host:port as
  // join_run does. Every rank checks its gradients once averaged too (DDP
  // averages them inside backward), so the ranks hold a tripped batch's
  // update before the optimizer step.
  void join_python_run(const std::string& host, int port, int rank, int world);
  // This process is rank `rank`, so its check settings, from any source (the
  // UI and MCP too), and its checkpoints are the rank's own.
  void set_rank(int rank);
  // Whether this session coordinates a distributed run (joined, not ended).
  bool in_run() const { return coordinator_ != nullptr; }
  // The loop left by an exception: the other ranks stop at their next
  // boundary instead of waiting for this one.
  void leave_run(const std::string& why);
  // A driver whose loop runs collectives of its own between batches
  // (Lightning): the ranks meet right after each batch ends (may throw
  // TimeTravelJump, DistributedError); the next begin_batch is `settled`.
  void meet_after_batch();
  // Rank 0: every rank's halted() turns true at one boundary, the next
  // whose decision is sent (Lightning stops every rank's trainer there).
  void request_halt();
  bool halted() const;
  // The run's gradients are averaged inside backward (a DDP wrapper), so
  // rank 0's own clean check speaks for every rank.
  void set_gradients_averaged(bool averaged);
  // What the distributed tests count (distributed::Coordinator::Counts):
  // boundaries, waited, cleans, sent_clean; zeros outside a run.
  std::array<int64_t, 4> run_counts() const;
  // Why this session serves no UI (a follower's), empty when it can.
  const std::string& unserved_reason() const { return unserved_reason_; }
  // A rank's own numerical-check settings: its rank_<r> capsule folder, and
  // no traced re-run (one more forward and backward on one rank would pair
  // the wrong batches in the ranks' collectives). As given outside a run.
  DebugSettings settings_for_rank(DebugSettings settings) const;
  // A rank's own epoch checkpoints: cache_dir's rank_<r> folder.
  EpochOptions options_for_rank(EpochOptions options) const;
  // The statistics settings the followers mirror, so that their shards add
  // up to the global batch (rank 0's, sent with a decision: {"scope",
  // "watched", "performance": {"channel_limit_enabled", "channel_limit",
  // "histogram_sample"}}), and a follower's applying them from this batch
  // on (Min/Max patches stay rank 0's: a follower collects none). What
  // fails to apply is printed; training goes on.
  nlohmann::json stats_settings_for_followers() const;
  void apply_stats_settings(const nlohmann::json& settings);
  // This rank's standing numerical error as a trip of the rank protocol
  // (docs/guide/distributed.md): {"position", "at", "reasons",
  // "checks_used", "capsule", "own"} ("own": found in this rank's own
  // values, not only in the averaged gradients); null when none, or on rank
  // 0 when it stands only for a follower's trip (note_rank_trip). Any thread.
  nlohmann::json standing_trip() const;
  // Training thread: standing_trip() when it was not told before (since it
  // last changed), else null; from here on it counts as told.
  nlohmann::json trip_news();
  // Rank 0 (any thread): names in its debug report the ranks whose checks
  // tripped (note_rank_trip). `trips`: each rank's first trip, `fresh`: the
  // ones just learnt, whose lowest rank's (its own values', else the
  // averaged gradients') reasons, checks, capsule and batch stand; a trip
  // is the protocol's (docs/guide/distributed.md, "The rank protocol").
  void note_rank_trips(const std::map<int, nlohmann::json>& trips, const std::map<int, nlohmann::json>& fresh,
                       int world);
  // Pauses between two batches, at the boundary of the batch that just
  // ended (a peer rank's NaN): the loop stands where the UI shows it until a
  // command resumes it, as at a batch's own pause. Training thread.
  void hold_at_boundary();
  // Names the ranks whose checks tripped in the standing error's root cause
  // (`note` replaces an earlier such note); with no standing error (only a
  // peer tripped), records one at `at` (the peer's tripped batch; the live
  // position when not given) carrying the peer's reasons and capsule (a
  // standing error without a capsule, found only in the averaged
  // gradients, takes the peer's). Any
  // thread.
  void note_rank_trip(const std::string& note, const std::vector<std::string>& reasons,
                      const std::vector<std::string>& checks, const std::string& capsule,
                      const std::optional<BatchPosition>& at = std::nullopt);

  // --- time travel (session/epoch_loop.cpp) ---
  // Training thread: Session::epochs().
  void run_epochs(int64_t n, const std::function<void(int64_t)>& body, const EpochOptions& options);
  // Any thread: arms a jump (TimeTravelError when refused).
  void request_time_travel(int64_t epoch);
  // Distributed runs (rank 0), any thread: the epochs follower `rank` has a
  // checkpoint of (in its folder `where`), as it last reported them. A jump
  // to an epoch some follower lacks is refused for every rank.
  void set_peer_checkpoints(int rank, std::vector<int64_t> epochs, std::string where);
  // Distributed runs (rank 0), training thread, once begin_batch() returned:
  // whether nothing can stop the loop before the next batch begins — no
  // pause after this batch, no check that can pause inside it, no jump
  // armed, not the last epoch of an epochs() loop. Rank 0 then lets the
  // followers past the next boundary a batch ahead.
  bool runs_through_next_boundary() const;
  // While held, an armed jump is not raised at a batch boundary (it stays
  // armed): rank 0 has let the followers past the next boundary.
  void hold_jumps(bool held) { jumps_held_ = held; }
  // Distributed runs, every rank: called when the batch under way settles —
  // its one backward checked clean, so the checks can no longer stop it
  // and runs_through_next_boundary() may turn true before the batch ends
  // (a follower says so; rank 0, once every rank has, lets the followers
  // past the next boundary while they make their optimizer step). Runs where the backward's final callback runs,
  // with the training thread inside backward(); must not throw. Set before
  // the loop.
  void set_on_settled(std::function<void()> settled) { on_settled_ = std::move(settled); }
  // Mixed precision: the scale of the loss scaler in use, nullopt when none
  // (Monitor::Host::loss_scale). Set before the loop.
  void set_loss_scale_reader(std::function<std::optional<double>()> read) { loss_scale_reader_ = std::move(read); }
  // torch.compile: whether the batches that capture nothing run compiled code.
  void set_compiled(bool compiled) { compiled_ = compiled; }
  // Monitor::note_backward_roots: the loss a backward of this batch starts from.
  void note_backward_roots(std::vector<torch::Tensor> roots) { numerics_->note_backward_roots(std::move(roots)); }
  // Distributed runs that average gradients inside backward (DDP), every
  // rank: check them once averaged as well (Monitor::check_after_reduction),
  // so every rank stops before its optimizer step. Set before the loop.
  void check_after_reduction(bool on) {
    after_reduction_ = on;
    numerics_->check_after_reduction(on);
  }
  // Monitor::check_gradients_first: DDP's first static-graph backward
  // averages the gradients from a final callback its first node queues.
  bool check_gradients_first() { return numerics_->check_gradients_first(); }
  // A follower, set before the loop: where its batch tripped before the
  // optimizer step, the batch waits in `await_leader()` for rank 0's
  // choice (true: skip the update; nullopt: the run is lost, go on).
  // Rank 0: `decided(skipped)` runs once its batch's update is decided
  // before the step (Monitor::Host::update_decided): where its own pause
  // there ends, or its checks are over without one. Both run where the
  // backward's final callback runs; must not throw.
  void set_on_await_leader(std::function<std::optional<bool>()> await) { on_await_leader_ = std::move(await); }
  void set_on_update_decided(std::function<void(bool skipped)> decided) { on_update_decided_ = std::move(decided); }
  // Whether the standing error was found only in the averaged gradients.
  bool standing_found_in_average() const { return numerics_->standing_found_in_average(); }
  // Distributed runs (rank 0), training thread: whether the checks can
  // pause a batch before it settles (they are on and a UI is served), so
  // the followers' word of their batches checked clean is wanted.
  bool checks_can_pause() const;
  // Distributed runs, a follower told of rank 0's jump where its loop
  // cannot wait for its next batch to begin (a collective of the loop's own
  // comes first): raises the armed jump now, as that batch's start would.
  // Training thread.
  void raise_armed_jump();
  // The same loop as steps, for a caller that cannot hand over a body
  // (Python's `for epoch in session.epochs(n)` generator): open_epochs
  // returns the first epoch; start_epoch runs before each body; end_epoch
  // after it, with the target of a jump that unwound it, and returns the
  // next epoch to run (nullopt: the loop is done); abort_epochs when the
  // loop is left otherwise. run_epochs is these steps around `body`.
  int64_t open_epochs(int64_t n, const EpochOptions& options);
  void start_epoch(int64_t epoch);
  std::optional<int64_t> end_epoch(int64_t epoch, std::optional<int64_t> jumped_to);
  void abort_epochs();
  time_travel::TrainingRestorer& restorer() { return *restorer_; }
  const time_travel::TrainingRestorer& restorer() const { return *restorer_; }
  // --- frozen moments, lock and park (session/moment.cpp) ---
  // Any thread: arms the one-shot freeze (Session::freeze_moment).
  void arm_moment(const std::string& path, const BatchPosition& at);
  // Any thread (Session::lock): one way.
  void lock();
  bool locked() const { return locked_.load(); }
  // The model's thread: the pause loop until close() (Session::park).
  void park();
  // The model's thread, on a session no batch ran on: load_moment's work.
  void restore_moment(const std::string& path, const ReplayFn& replay);
  // The same in two steps, for a caller that runs the replay itself (Python,
  // with its module hooks): begin returns the batch item (on the model's
  // device) with the batch open and traced, the model at the batch's start;
  // the caller runs forward and backward; end publishes. `set_inputs`: the
  // stored model inputs are handed to the tracer (else the caller does).
  std::vector<torch::Tensor> begin_moment_replay(const std::string& path, bool set_inputs);
  void end_moment_replay();
  void abandon_moment_replay();

  // An optimizer the session cannot read itself (a Python one): its state
  // in every snapshot from now on. Training thread.
  void set_optimizer_reader(capture::OptimizerReader reader) { optimizer_reader_ = std::move(reader); }

 private:
  mutable std::mutex trainer_step_mu_;
  std::optional<TrainerStep> trainer_step_;

  void report_internal_error(const std::string& what);
  // Reported like an internal error, without turning capture off.
  void report_numerics_error(const std::string& what);
  // Reports a part that gave up, leaving capture on.
  void report_part_error(const std::string& what);
  bool finish_batch(bool can_repeat);
  // Finishes the batch's trace: publishes it as the snapshot when the batch
  // is captured, folds its statistics when collected.
  void publish_capture();
  // Keeps the first (or a newer) architecture a traced batch discovered.
  void adopt_architecture(std::shared_ptr<const Architecture> architecture);
  void publish_snapshot(capture::TraceResult& trace);
  // Shows `view` in the live snapshot's place; null: the live snapshot again
  // (a copy under a new sequence, so sequences only grow).
  void show(std::shared_ptr<const BatchSnapshot> view);
  // Whether the armed moment's position is `pos` (then it is taken).
  bool moment_target_ready(const BatchPosition& pos);
  // The moment's batch item (its ItemTensors), stored as the replay seed.
  void record_moment_item(const std::vector<torch::Tensor>& tensors);
  void record_moment_inputs(const std::vector<torch::Tensor>& inputs, bool stacked);
  // close(): an armed moment the run never reached is reported.
  void report_unreached_moment();
  // The armed moment is due at pos_: saves what the batch began with.
  void begin_moment();
  // At the end of the moment's batch, after its snapshot: writes the file.
  void finish_moment();
  std::unique_ptr<numerics::Monitor> make_monitor(const DebugSettings& settings);
  std::unique_ptr<time_travel::TrainingRestorer> make_restorer(torch::optim::LRScheduler* scheduler);
  // close(): every rank meets the last boundary (DistributedError when a
  // rank was lost).
  void close_run();
  // ~SessionCore: the exchange ends (a rank not closed says it left).
  void end_run();
  // join_run, join_python_run: the coordinator over the store at host:port.
  void start_coordinator(const std::string& host, int port, int rank, int world, bool python);
  // begin_batch's work once the ranks have met at the boundary.
  bool open_batch(const std::string& phase, std::optional<int64_t> epoch);
  // Pauses the loop at `pos`; queued experiments run first in the pause.
  void pause_here(const BatchPosition& pos);
  // At a batch boundary: unwinds with the requested jump, if any.
  void throw_if_jump_due();
  // After the unwinding: restores `epoch`, rewinds the schedule, pauses next.
  void jump_to(int64_t epoch);

  std::shared_ptr<torch::nn::Module> model_;
  std::vector<torch::optim::Optimizer*> optimizers_;
  capture::OptimizerReader optimizer_reader_;
  ServeOptions display_;
  Schedule schedule_;
  RunControl control_{schedule_};

  // Training-thread state of the batch in progress.
  BatchPosition pos_;
  BoundaryDecision decision_;
  // The batch's op observer; declared first of the two, it outlives the tracer.
  std::unique_ptr<observer::Observer> observer_;
  std::unique_ptr<capture::Tracer> tracer_;
  // The model's index for the tracers of batches only collected (a capture
  // builds it anew: its module descriptions are shown).
  std::shared_ptr<const capture::ModelIndex> model_index_;
  // Snapshot sequence numbers, shared by captures and probe views.
  std::atomic<uint64_t> sequence_{0};
  // StartOptions::snapshot_budget, and the samples the last capture found to
  // fit it: the next capture starts there instead of trimming again.
  int64_t snapshot_budget_ = 0;
  double snapshot_share_ = 0;  // StartOptions::snapshot_share
  int64_t samples_that_fit_ = 0;
  // The memory captures copy into, recycled once the snapshots that held it
  // are gone (capture/host_buffers.h).
  std::shared_ptr<capture::HostBuffers> host_buffers_ = std::make_shared<capture::HostBuffers>();
  bool capture_disabled_ = false;
  bool warned_no_ui_ = false;
  // What the warning of a pause with no UI suggests, in the caller's
  // language (the Python package sets its own).
  std::atomic<bool> python_front_end_{false};
  std::string no_ui_hint_ =
      "nansense::serve(session) or StartOptions().port(...) serves one, and session.detach() trains without pausing";
  std::string unserved_nan_note_ = "training continues";
  mutable std::mutex rerun_note_mutex_;  // read by the server's threads
  numerics::RerunNote rerun_note_;
  bool repeat_batch_ = false;                                 // the next begin_batch delivers the same batch again
  bool rerunning_ = false;                                    // the batch under way is that second delivery
  std::optional<int64_t> loop_epoch_;                         // the epoch epochs() runs, for batches() without one
  int64_t loop_epochs_ = 0;                                   // epochs()'s n
  bool jumps_held_ = false;                                   // hold_jumps()
  std::function<void()> on_settled_;                          // set_on_settled()
  bool after_reduction_ = false;                              // check_after_reduction()
  std::function<std::optional<double>()> loss_scale_reader_;  // set_loss_scale_reader()
  std::atomic<bool> compiled_{false};                         // set_compiled()
  std::function<std::optional<bool>()> on_await_leader_;      // set_on_await_leader()
  std::function<void(bool)> on_update_decided_;               // set_on_update_decided()
  std::unique_ptr<time_travel::TrainingRestorer> restorer_;

  // The armed freeze (moment_mu_), and the file of the batch it is being
  // written at (training thread).
  struct MomentTarget {
    std::string path;
    BatchPosition at;
  };
  std::mutex peers_mu_;
  std::map<int, std::pair<std::vector<int64_t>, std::string>> peer_checkpoints_;
  mutable std::mutex moment_mu_;
  std::optional<MomentTarget> moment_target_;
  std::optional<MomentTarget> moment_now_;
  std::unique_ptr<state::StateFile> moment_file_;
  std::atomic<bool> locked_{false};
  // restore_moment's replay batch: captured, never paused or collected.
  bool replaying_ = false;
  struct MomentReplay {
    state::StateFile file;
    std::vector<std::string> layers;  // the architecture frozen
  };
  std::unique_ptr<MomentReplay> moment_replay_;

  common::AtomicSharedPtr<const BatchSnapshot> snapshot_;
  common::AtomicSharedPtr<const BatchSnapshot> shown_;
  // Orders the stores of snapshot_ and shown_ (a capture against a probe
  // ending on another thread).
  std::mutex shown_mu_;
  bool probe_shown_ = false;  // shown_ holds a probe's view (shown_mu_)
  common::AtomicSharedPtr<const Architecture> architecture_;
  std::atomic<bool> closed_{false};
  // Paused inside the batch by a numerical check (see Engine::Host).
  std::atomic<bool> in_batch_pause_{false};
  mutable std::mutex publish_mu_;
  mutable std::condition_variable published_;
  mutable std::mutex errors_mu_;
  std::vector<std::string> internal_errors_;

  // Training thread apart from its settings and published view.
  std::unique_ptr<StatsCollector> stats_;

  std::unique_ptr<experiments::Engine> experiments_;
  std::unique_ptr<experiments::Probes> probes_;
  std::unique_ptr<experiments::VisitorProbes> visitor_probes_;

  // A distributed run's boundary exchange (null outside one), its rank and,
  // on a follower, why it serves nothing. Destroyed first of all
  // (~SessionCore): its heartbeat thread calls into the parts below.
  std::shared_ptr<distributed::Coordinator> coordinator_;
  std::optional<std::string> trip_told_;  // trip_news(): the trip told last (its key)
  std::optional<int> rank_;
  std::string unserved_reason_;

  std::unique_ptr<SessionPort> port_;
  // The web server; destroyed first (~SessionCore), while port_ still stands.
  std::unique_ptr<Attachment> attachment_;
  // Declared last: destroyed first, its hooks leave the model before the rest goes.
  std::unique_ptr<numerics::Monitor> numerics_;
};

}  // namespace nansense::detail
