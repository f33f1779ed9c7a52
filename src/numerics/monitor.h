// The numerics side of a session: runs the guard on checked batches, traces
// ops on traced batches, keeps the flight recorder, records hits into the
// standing DebugError, writes the NaN capsule, pauses the loop before the
// optimizer step, and asks for a traced re-run of a batch that tripped
// untraced. Everything here runs on the training thread except DebugState.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nansense/architecture.h"
#include "nansense/debug.h"
#include "nansense/time_travel.h"
#include "numerics/checks.h"
#include "numerics/debug_state.h"
#include "numerics/flight_recorder.h"
#include "numerics/guard.h"
#include "numerics/op_tracer.h"
#include "numerics/rerun_note.h"
#include "state/live_state.h"
#include "state/state_file.h"

namespace nansense::capture {
class Tracer;
}

namespace nansense::numerics {

class Monitor {
 public:
  // What the session does for the monitor.
  struct Host {
    // Publishes the batch's capture now, before the optimizer step.
    std::function<void()> publish_capture;
    // Pauses the loop at the current batch in any mode; returns on resume.
    std::function<void()> pause;
    // Whether anything could resume a pause (a UI is served).
    std::function<bool()> can_pause;
    // What the NaN's log line says happens next when nothing can pause.
    std::function<std::string()> unserved_note;
    // What a traced re-run repeated (its ran_twice clause goes in the log line).
    std::function<RerunNote()> rerun_note;
    // A trainer adapter's words for the batch under way (the step and its
    // micro-batch), stamped on the error; may be null.
    std::function<std::optional<TrainerStep>()> trainer_step;
    // The last discovered architecture (layer names and order), may be null.
    std::function<std::shared_ptr<const Architecture>()> architecture;
    // A failure of part of the numerics machinery: one tensor's check, the
    // flight recorder, op tracing (each turned off alone), or the guard itself.
    std::function<void(const std::string&)> report_error;
    // The error or the settings changed (push a fresh status).
    std::function<void()> changed;
    // The LR schedule's adapter in use (null when none): capsules hold its
    // state, and a re-run restores it.
    std::function<SchedulerAdapter*()> scheduler;
    // The batch's checks are over and passed before its end: its backward
    // (the batch's one, as in the batch before) checked clean, so nothing
    // of numerics can stop the batch any more. Runs where the backward's
    // final callback runs (the training thread on CPU, while it is inside
    // backward()); must not throw.
    std::function<void()> settled;
    // A rank that cannot pause but follows a leader (a distributed run's
    // follower), its batch tripped before the optimizer step: waits there
    // for the leader's choice about the update and returns true to skip
    // it; nullopt when there is no leader to wait for (the loop goes on).
    // Null: nothing to wait for.
    std::function<std::optional<bool>()> await_leader;
    // The batch's update is decided, before the optimizer step: skipped
    // (true) or applied — where a pause there ends, and, in a run that
    // checks after the reduction, once that check is over without one
    // (nothing of numerics can hold the batch any more). May be null.
    std::function<void(bool skipped)> update_decided;
    // The loss scale of the mixed-precision scaler in use (LossScaleStatus),
    // read after the loop's update(); nullopt when no scaler is in use. Called
    // on the training thread (or where backward's final callback runs) when a
    // check trips and every 16 batches. May throw: scaler awareness is then
    // off, said once. May be null.
    std::function<std::optional<double>()> loss_scale;
    // Whether the batch under way runs compiled code (torch.compile): a trip
    // its eager re-run does not reproduce is reported as compiled-only
    // numerics. May be null.
    std::function<bool()> compiled;
    // A value for the Stats page's series at the batch under way ("loss_scale").
    // May be null.
    std::function<void(const std::string& name, double value)> log_scalar;
  };

  // `optimizers`: every optimizer of the session; capsules save and restore
  // all of them, in this order.
  Monitor(torch::nn::Module& model, std::vector<torch::optim::Optimizer*> optimizers, const DebugSettings& settings,
          Host host);
  ~Monitor();

  DebugState& state() { return state_; }
  const DebugState& state() const { return state_; }

  enum class Trace { kNone, kOps, kCapture };
  // Start of a batch, before any capture tracer exists: how numerics wants it
  // traced. `repeat`: the batch is the re-run end_batch() asked for.
  Trace plan_batch(const BatchPosition& position, bool repeat);
  // Once the capture tracer (null when not capturing) is installed; the
  // batch's observer is null when the batch is neither captured nor traced.
  void begin_batch(capture::Tracer* tracer, Trace trace, observer::Observer* observer);
  void set_item(std::vector<torch::Tensor> tensors);
  // The tensors a backward of this batch starts from (the loss; the scaled
  // loss under a GradScaler), detached: checked with the gradients, so a
  // non-finite loss is an error even where its gradients stay finite.
  // Training thread, before that backward runs.
  void note_backward_roots(std::vector<torch::Tensor> roots);
  // The session is about to finish the capture tracer (it publishes).
  void release_tracer() { tracer_ = nullptr; }
  // A micro-batch of the step begins (a trainer adapter's gradient
  // accumulation): the op tracer takes its ops for a forward again.
  void begin_micro_batch() {
    if (op_tracer_) op_tracer_->begin_micro_batch();
  }

  struct End {
    bool repeat = false;  // deliver the same batch item again (traced)
    bool pause = false;   // pause at the end of this batch (any mode)
  };
  // After the batch body. `can_repeat`: the loop asks for its next item (not
  // leaving the loop), so the same item can be delivered again.
  End end_batch(bool can_repeat);
  // The body threw.
  void abandon();
  // Whether the checks, as set, can pause batches (a UI is served); the
  // batch in progress may have settled.
  bool can_pause_batches() const { return !disabled_ && state_.settings().enabled() && host_.can_pause(); }
  // Whether the checks can stop the batch in progress (they run on it and a
  // pause has somewhere to be resumed from); false from the moment the
  // batch settles (Host::settled).
  bool can_stop_batch() const { return active_ && !settled_ && host_.can_pause(); }
  // Distributed runs whose gradients are averaged inside backward (DDP):
  // the gradients are checked twice, as this rank computed them (which
  // names the rank where a NaN arose, and its capsule holds them) and once
  // averaged, after DDP's own final callback, so every rank sees a NaN
  // that arose on any rank and stops before its optimizer step; a trip
  // pauses (or, on a follower, waits for the leader) only then, once
  // the averaged gradients are in .grad. Off by default.
  void check_after_reduction(bool on) { after_reduction_ = on; }
  // From a hook that runs inside a backward ahead of every parameter's
  // (GradientGuard::queue_now): the first check runs ahead of final
  // callbacks queued after this call. Any thread the backward runs on.
  bool check_gradients_first() { return guard_ && guard_->queue_now(); }
  // Whether the standing error was found only in the averaged gradients
  // (this rank's own were finite): another rank's NaN. Any thread.
  bool standing_found_in_average() const { return standing_in_average_; }
  // The standing error was just recorded from another rank's note (no
  // error stood): this rank's own finding in that batch takes its place
  // and pauses, even where the note came before the batch began here (a
  // peer may run ahead of this rank into a batch whose gradients DDP
  // averages only at its end: static_graph's first). Any thread.
  void peer_noted() { peer_noted_ = true; }

 private:
  void on_backward_end();
  // check_after_reduction: once the averaged gradients are in .grad.
  void after_reduction();
  void settle();
  std::optional<DebugError> check(bool gradients);
  // The row of a non-finite backward root ("loss"), if any.
  std::optional<LayerReport> loss_row() const;
  // A trip that is the loss scaler's own overflow (only gradients
  // non-finite, a scaler in use, its scale not collapsed): counted, and true.
  // A collapse is described in `hit` and left to handle_hit.
  bool scaler_overflow(DebugError& hit);
  // The scaler's scale (Host::loss_scale), nullopt when none is in use or
  // reading it failed (scaler awareness then off, said once).
  std::optional<double> read_scale();
  // The batch's optimizer update is not to change anything: every gradient
  // cleared, or under a loss scaler (whose step() needs gradients to
  // unscale) made NaN, so the scaler skips the step.
  void drop_update();
  // `own`: found in this rank's own values (false: only in the averaged
  // gradients; no capsule, since this rank's batch replays finite).
  void handle_hit(DebugError hit, bool in_backward, bool own = true);
  void pause_now(bool in_backward);
  void await_leader();
  void decide(bool skipped);
  void fail(const std::string& what);
  // One tensor's check failed: that check is off for that tensor from now
  // on, said in the report and through report_error; the rest keep running.
  void turn_off(UncheckedTensor failed);
  std::string write_capsule(const DebugError& hit);
  state::LiveState live_state() const;

  torch::nn::Module& model_;
  std::vector<torch::optim::Optimizer*> optimizers_;
  Host host_;
  DebugState state_;
  FlightRecorder recorder_;
  std::unique_ptr<GradientGuard> guard_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;  // named_parameters(), read once

  // The batch in progress.
  DebugSettings settings_;
  BatchPosition position_;
  std::thread::id training_thread_;
  capture::Tracer* tracer_ = nullptr;
  std::unique_ptr<OpTracer> op_tracer_;
  bool active_ = false;  // settings enabled for this batch
  bool traced_ = false;
  bool checked_in_backward_ = false;
  bool tripped_ = false;
  bool pause_at_end_ = false;
  bool settled_ = false;
  bool after_reduction_ = false;                  // check_after_reduction()
  bool deferring_ = false;                        // in the first check of such a run: a pause waits for the second
  bool deferred_pause_ = false;                   // and one is due there
  std::atomic<bool> standing_in_average_{false};  // standing_found_in_average(), read by any thread
  bool decided_ = false;                          // the batch's update_decided ran
  bool stood_at_start_ = false;                   // an error stood as the batch began
  std::atomic<bool> peer_noted_{false};           // peer_noted(): the standing error is only a peer's note
  int backwards_ = 0;                             // checked backward passes in this batch
  int last_backwards_ = 0;                        // and in the batch before
  int64_t since_check_ = 0;
  int64_t since_trace_ = 0;

  // The traced re-run of a first hit restores this capsule.
  std::optional<state::StateFile> capsule_;
  bool rerun_pending_ = false;
  bool rerun_active_ = false;
  bool rerun_tripped_ = false;
  bool disabled_ = false;
  bool recorder_off_ = false;        // the flight recorder failed: no capsules
  bool op_tracing_off_ = false;      // the op tracer failed to start: no producer
  std::set<std::string> unchecked_;  // unchecked_key()s of tensors turned off

  std::vector<torch::Tensor> roots_;  // note_backward_roots(), this batch
  bool tripped_compiled_ = false;     // the first hit of a re-run batch ran compiled
  // The loss scaler (Host::loss_scale): its state as counted, published in DebugState.
  LossScaleStatus loss_scale_;
  bool scale_off_ = false;      // reading the scale failed: no scaler awareness
  bool overflowed_ = false;     // this batch's gradients overflowed under the scaler
  bool said_overflow_ = false;  // the first overflow's line is printed
  int64_t since_scale_read_ = 16;
};

}  // namespace nansense::numerics
