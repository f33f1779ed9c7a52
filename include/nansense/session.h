// The session: the bridge between a live training loop and the debugger.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <chrono>
#include <concepts>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nansense/architecture.h"
#include "nansense/batch_traits.h"
#include "nansense/debug.h"
#include "nansense/item_tensors.h"
#include "nansense/options.h"
#include "nansense/position.h"
#include "nansense/schedule.h"
#include "nansense/snapshot.h"
#include "nansense/stats.h"
#include "nansense/time_travel.h"

namespace nansense {

// Where the training side of a session stands.
enum class RunState {
  kRunning,   // the loop is between pauses (or has not reached its first batch)
  kPaused,    // the training thread waits in its pause loop
  kFinished,  // close() ran
  kLost,      // the loop threw, or ended without close()
};
std::string_view to_string(RunState state);  // "running", "paused", ...

namespace detail {
class SessionCore;
struct SessionAccess;
// Training-thread entry points used by Batches. begin_batch returns whether
// this batch is captured (then the item's inputs are handed over).
bool begin_batch(SessionCore& core, const std::string& phase, std::optional<int64_t> epoch);
void set_batch_inputs(SessionCore& core, std::vector<torch::Tensor> inputs, bool stacked);
// Every tensor of the batch item, for the flight recorder (references).
void record_item(SessionCore& core, std::vector<torch::Tensor> tensors);
// Returns true when the same item must be delivered again: the traced re-run
// of a batch whose gradients turned non-finite untraced.
bool end_batch(SessionCore& core);
void end_phase(SessionCore& core, const std::string& phase, int64_t count);
void abandon_batch(SessionCore& core, bool by_exception);
}  // namespace detail

// Iterates a loader with each item wrapped as one debugger batch. Returned by
// Session::batches(); use it in a range-for. The batch ends (and may pause)
// when the loop asks for the next item.
template <class Range>
class Batches {
  using InnerIt = decltype(std::begin(std::declval<Range&>()));
  using InnerEnd = decltype(std::end(std::declval<Range&>()));

 public:
  struct sentinel {};
  class iterator {
   public:
    decltype(auto) operator*() const { return *it_; }
    iterator& operator++() {
      owner_->next(it_);
      return *this;
    }
    friend bool operator!=(const iterator& a, sentinel) { return !a.at_end(); }
    friend bool operator==(const iterator& a, sentinel) { return a.at_end(); }

   private:
    friend class Batches;
    iterator(Batches* owner, InnerIt it) : owner_(owner), it_(std::move(it)) {}
    bool at_end() const { return it_ == owner_->end_; }
    Batches* owner_;
    // torch::data's iterators dereference only through non-const access.
    mutable InnerIt it_;
  };

  Batches(detail::SessionCore* core, Range& range, std::string phase, std::optional<int64_t> epoch)
      : core_(core), range_(range), end_(std::end(range)), phase_(std::move(phase)), epoch_(epoch) {}
  Batches(const Batches&) = delete;
  Batches& operator=(const Batches&) = delete;
  ~Batches() {
    if (core_ && open_) {
      const bool by_exception = std::uncaught_exceptions() > exceptions_;
      detail::abandon_batch(*core_, by_exception);
      // A loop left early ends its phase; 0 batches: its length stays unlearned.
      if (!by_exception) detail::end_phase(*core_, phase_, 0);
    }
  }

  // Each begin() is one pass over the loader: a Batches made once before the
  // epoch loop can be handed, as the loader, to a function that iterates it
  // every epoch.
  iterator begin() {
    if (core_ && open_) {
      // The previous pass was left early (a break): end it as ~Batches would.
      open_ = false;
      detail::abandon_batch(*core_, /*by_exception=*/false);
      detail::end_phase(*core_, phase_, 0);
    }
    count_ = 0;
    exceptions_ = std::uncaught_exceptions();
    InnerIt it = std::begin(range_);
    open_at(it);
    return iterator(this, std::move(it));
  }
  sentinel end() { return {}; }

 private:
  void open_at(InnerIt& it) {
    if (!core_) return;
    if (it == end_) {
      detail::end_phase(*core_, phase_, count_);
      return;
    }
    const bool capture = detail::begin_batch(*core_, phase_, epoch_);
    open_ = true;
    detail::record_item(*core_, ItemTensors<std::decay_t<decltype(*it)>>::all(*it));
    if (capture) {
      using Traits = BatchTraits<std::decay_t<decltype(*it)>>;
      constexpr bool stacked = requires { Traits::kStacked; };
      detail::set_batch_inputs(*core_, Traits::inputs(*it), stacked);
    }
  }
  void next(InnerIt& it) {
    if (core_ && open_) {
      open_ = false;
      if (detail::end_batch(*core_)) {
        open_at(it);  // the same item again, not the next one
        return;
      }
      ++count_;
    }
    ++it;
    open_at(it);
  }

  detail::SessionCore* core_;  // null on a disabled session: a pass-through
  Range& range_;
  InnerEnd end_;
  std::string phase_;
  std::optional<int64_t> epoch_;
  int64_t count_ = 0;
  bool open_ = false;
  int exceptions_ = 0;
};

class Session {
 public:
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  // Ending the session without close() reports the loop as lost and stops the UI.
  ~Session();

  // Whether this session captures anything (set once at start()).
  bool enabled() const;

  // Wrap one phase's loader: `for (auto& batch : session.batches(loader, "train"))`.
  // Works on torch::data loaders and any range; see BatchTraits for how the
  // model inputs are found in an item. `epoch` is inferred when omitted (a new
  // epoch starts when the first phase runs again). Throws ScheduleError when a
  // declared schedule is violated. The wrapper may be kept and iterated once
  // per epoch (made before the epoch loop, passed where the loader was); it
  // refers to the session and the loader, so declare it after both.
  template <class Range>
  Batches<Range> batches(Range& loader, std::string phase, std::optional<int64_t> epoch = std::nullopt) {
    return Batches<Range>(core_.get(), loader, std::move(phase), epoch);
  }

  // The time-travel epoch loop (see nansense/time_travel.h): runs body(epoch)
  // for epoch = options.start_epoch() .. n-1 on this thread, checkpointing
  // every epoch start to options.cache_dir() before the body runs. A jump
  // from the UI unwinds the body (a TimeTravelJump, not a std::exception),
  // restores the target epoch's state and runs the body again from there,
  // pausing on its first batch. Sets the schedule's epoch count to n; the
  // batches() inside take their epoch from the loop. Throws TimeTravelError
  // when resuming at start_epoch is impossible; the body's own exceptions pass
  // through. On a disabled session: body(0) .. body(n-1), no disk access.
  void epochs(int64_t n, std::function<void(int64_t epoch)> body, EpochOptions options = {});
  // What the UI needs for its Time Travel dialog. Callable from any thread.
  TimeTravelStatus time_travel_status() const;
  // Asks the training thread to jump back (or forward) to the start of a
  // cached epoch at its next batch boundary, paused or running. Callable from
  // any thread. Throws TimeTravelError when refused (no epochs() loop running,
  // epoch out of range or not cached, a corrupted or foreign checkpoint,
  // training finished or lost).
  void request_time_travel(int64_t epoch);

  // Re-declare the schedule mid-run (batch counters are kept); nullopt leaves
  // that part unchanged.
  void set_schedule(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases = std::nullopt);
  // Mark training finished: releases every waiter. Call it from the training
  // thread once the loop is done. The UI keeps serving the last captured state
  // for as long as the Session object lives. In a distributed run every
  // rank closes together (it waits for rank 0, which may still be paused on
  // the last batch) and throws DistributedError when a rank was lost.
  void close();

  // The batch the training thread is on (updated on every batch).
  std::optional<BatchPosition> live_position() const;
  // True while the loop body runs a batch for the second time: the traced
  // re-run of a batch that tripped untraced (DebugSettings::rerun_to_trace).
  // The weights, buffers, optimizers, the scheduler given to start() and the
  // RNG states were restored to where that batch began; what the body keeps
  // itself was not, so a counter that must count each batch once skips this
  // run: `if (!session.rerunning()) ++step;`. Training thread.
  bool rerunning() const;
  Mode mode() const;
  RunState state() const;
  // The last published snapshot (null before the first capture).
  std::shared_ptr<const BatchSnapshot> snapshot() const;
  std::shared_ptr<const Architecture> architecture() const;
  const Schedule& schedule() const;

  // Run control, callable from any thread; takes effect at the next batch
  // boundary (or resumes a paused loop). Throw ControlError when refused.
  // The names are the commands' names over HTTP and MCP (step, run_until,
  // run, pause, refresh), and each sets the Mode of the same name.
  void step_batch();  // pause after the next batch
  void step_phase();  // pause at the first batch of the next phase
  void step_epoch();  // pause at the first batch of the next epoch
  // Pause at exactly `target`, which must lie ahead in the schedule.
  void run_until(const BatchPosition& target);
  void run();     // pause at the last batch of the run
  void detach();  // never pause again (a numerical error still does)
  void pause();   // pause at the next batch boundary; nothing when paused
  // Capture and publish the next batch without pausing.
  void refresh();
  // Blocks until the loop pauses, finishes or is lost, or `timeout` passes.
  // Returns the state then. Never call it from the training thread.
  RunState wait_until_stopped(std::chrono::milliseconds timeout) const;

  // The reference API's names for run control, the same operations as
  // ours above (a program written to the reference's names works as is).
  void stop() { pause(); }
  void step_run() { run(); }
  void request_snapshot() { refresh(); }
  // Pause at batch `batch_idx` of epoch `epoch` in the phase at
  // `phase_index` of schedule().phase_order() (0 = the first phase):
  // run_until() with the phase named. Throws UsageError for an index the
  // run has not seen yet.
  void step_until_position(int64_t phase_index, int64_t epoch, int64_t batch_idx);
  // How many times the loop has paused so far (0 on a disabled session).
  int64_t pause_count() const;
  // Blocks until the loop has paused more than `after_pauses` times in all,
  // or the run finished or was lost: true then; false when `timeout` passed
  // first (nullopt: no limit). Pass pause_count() read before a command to
  // wait for the pause it leads to. Never call it from the training thread.
  // A disabled session never pauses: it returns true at once.
  bool wait_until_paused(int64_t after_pauses = 0,
                         std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;

  // Numerical debugging (see nansense/debug.h). Callable from any thread.
  // The standing error, if a check tripped since the last clear.
  std::optional<DebugError> debug_error() const;
  // The mixed-precision loss scaler as the guard counts it: its skipped
  // steps and last scale (LossScaleStatus). Any thread.
  LossScaleStatus loss_scale() const;
  DebugSettings debug_settings() const;
  // Takes effect at the next batch. Throws ArgumentError for a bad value.
  void set_debug_settings(const DebugSettings& settings);
  // Turns off a check category ("nan_inf" or "under_over"; "" = every category
  // of the standing error) and removes it from the standing error. The
  // reference API's name; the UI's button and the MCP tool say "silence"
  // (silence_debug_check), as the original's did.
  void disable_debug_check(const std::string& category = "");
  // Dismisses the standing error; the checks stay on.
  void clear_debug_error();

  // Watching training evolve (nansense/stats.h, docs/guide/stats.md). Settings are callable from any thread and take
  // effect at the next batch boundary; on a disabled session every call does nothing.
  //
  // Watch layers by name (get_architecture's names): the reference API's
  // watch/unwatch (Python's take one layer), MCP's watch_layers and
  // unwatch_layers. Once a batch has been captured, a name the architecture
  // lacks throws UsageError naming it and nothing changes; before that, names
  // are kept and checked at the first capture (unknown ones are then dropped
  // and reported in the status).
  void watch(const std::vector<std::string>& layers);
  void unwatch(const std::vector<std::string>& layers);
  std::vector<std::string> watched_layers() const;
  // Narrowing to kWatched drops what the other layers collected.
  void set_stats_scope(StatsScope scope);
  StatsScope stats_scope() const;
  // Throws UsageError for n out of range, a phase with a non-batch unit, or
  // a phase the schedule does not have.
  void set_update_frequency(const UpdateFrequency& frequency);
  UpdateFrequency update_frequency() const;
  // Returns whether the change flushed the layer statistics collected so far
  // (any effective change does; logged scalars, metrics and parameter samples
  // stay). Throws UsageError for channel_limit < 1.
  bool set_watch_performance(const WatchPerformance& performance);
  WatchPerformance watch_performance() const;
  // Which collected layers keep Min/Max patches: `layers`, or (nullopt,
  // the default) the watched ones, so scope kAll collects every layer's
  // statistics but patches only for the watched. Histograms and graphs are
  // unaffected; patches already collected stay. Once a batch has been
  // captured, an unknown name throws UsageError naming it and nothing changes.
  void set_patch_layers(const std::optional<std::vector<std::string>>& layers);
  std::optional<std::vector<std::string>> patch_layers() const;
  // Records `value` under `name` at the current batch: its phase, and
  // x = epoch + batch / batches in the phase (points of a phase whose length
  // is not known yet, in an undeclared epoch 0, are kept back until the
  // phase ends). Training thread, inside batches(); UsageError before the
  // first batch or for an empty name.
  void log_scalar(const std::string& name, double value);
  // Registers an instrument evaluated for every collected layer on every
  // collected batch (at the batch's end, on the training thread, under
  // NoGradGuard). on = kBatch keeps a point per batch; kEpoch reduces the
  // epoch's values into one point (batch null, x = epoch) when the epoch
  // ends. An instrument that throws is disabled and reported
  // (instrument_errors(), the status' internal errors); training goes on.
  // UsageError for an empty or taken name or an empty function.
  void watch_metric(const std::string& name, MetricFn fn, MetricOn on = MetricOn::kBatch,
                    MetricReduce reduce = MetricReduce::kMean);
  // Tensor instruments: on every captured batch (a pause, a step, a live
  // update), for every layer the statistics collect (the watched ones by
  // default, see set_stats_scope), on the training thread under NoGradGuard
  // at the batch's end (after your optimizer.step()). watch_layer_tensor's
  // function returns a tensor of the layer's activation shape, drawn as an
  // extra strip under the layer's card; watch_weight_tensor's is called once
  // per parameter of such a layer and returns a tensor of the parameter's
  // shape, drawn on the layer's Weights page. The results are copied to the
  // CPU into the snapshot (custom_activations, custom_weight_tensors). An
  // instrument that throws or returns a tensor of another shape is disabled
  // and reported like a metric; training goes on. Returning an undefined
  // tensor skips the layer or parameter. UsageError for an empty or taken
  // name or an empty function.
  void watch_layer_tensor(const std::string& name, LayerTensorFn fn);
  void watch_weight_tensor(const std::string& name, WeightTensorFn fn);
  // The metric and tensor instruments that failed, with their errors (the
  // reference API's instrument_errors).
  std::vector<FailedInstrument> instrument_errors() const;
  // Everything collected as of the last publish (a captured batch, an epoch
  // boundary, a pause); null before the first. Any thread. The reference
  // API's WatchSnapshot (Python's watch_snapshot() filters and converts it).
  std::shared_ptr<const WatchSnapshot> watch_snapshot() const;

  // The UI's address once served ("http://127.0.0.1:8080/"), else empty.
  std::string url() const;

  // Sharing the debugger (docs/guide/moments.md).
  //
  // Arms a one-shot freeze of the debugger's moment at exactly (phase, epoch,
  // batch_idx): when training reaches that batch it is captured whatever the
  // mode (a detached run works, and does not pause), and at its end the moment
  // is written to `path` atomically with a checksum (the state layer's format,
  // kind "moment"): the batch's loader item (the replay seed), the model's
  // parameters and buffers as the batch began and as it ended, the optimizers'
  // state and hyperparameters, the statistics collected so far (histograms,
  // Min/Max patches, series), the watched set and the schedule. Arming again
  // replaces a target not reached yet; one never reached is reported at
  // close() (stderr and the status' internal errors). Any thread. No-op on a
  // disabled or locked session. UsageError for an empty path or phase or a
  // negative epoch or batch; a failed write is reported the same way, and
  // training goes on.
  void freeze_moment(const std::string& path, const std::string& phase, int64_t epoch, int64_t batch_idx);
  // Locks the session for a shared deployment, one way: from now on every
  // transport (REST, MCP, the page) refuses run control, time travel,
  // watching, probes that change shared state and every global setting, with
  // a reason; the status says "locked": true. The statistics scope is forced
  // to kAll (so a page's show/hide never touches shared state); experiments
  // still run, with their parameters clamped to kLockedLimits (experiments/
  // engine.h) and the queue capped. Here, on the Session itself, the run
  // control and settings methods become no-ops, request_time_travel throws
  // TimeTravelError, and registering an instrument (watch_metric,
  // watch_layer_tensor, watch_weight_tensor) throws UsageError. close() is
  // not locked: it belongs to the hosting program. Any thread.
  void lock();
  bool locked() const;
  // Holds the calling thread in the pause loop, running the experiments and
  // probes the UI queues, until close() (from another thread: a signal
  // handler's, the host's). The counterpart of a training loop for a session
  // with no batches left to drive, e.g. one load_moment() rebuilt: call it on
  // the thread that owns the model. On an unlocked session a Run or Step
  // simply re-enters the pause. Returns at once on a disabled or closed one.
  void park();

  // How experiments (Grad-CAM, integrated gradients, Deep Dream... run on
  // the paused model from the Experiment page or MCP) call the model: its
  // forward on the model inputs of a batch, in input-layer order. start()
  // sets it for a TORCH_MODULE model whose forward takes one tensor or two;
  // set it for any other model. Without one, experiments are refused with a
  // reason. The function runs on the training thread, between batches.
  using ForwardFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;
  void set_forward(ForwardFn forward);

  // Our earlier names, renamed to the reference API's (docs/guide/
  // differences.md, "One name per concept"). Each calls the new name; they
  // go in the next release.
  [[deprecated("renamed disable_debug_check")]] void silence_debug_check(const std::string& category = "") {
    disable_debug_check(category);
  }
  [[deprecated("renamed watch")]] void watch_layers(const std::vector<std::string>& layers) { watch(layers); }
  [[deprecated("renamed unwatch")]] void unwatch_layers(const std::vector<std::string>& layers) { unwatch(layers); }
  [[deprecated("renamed instrument_errors")]] std::vector<FailedInstrument> failed_metrics() const {
    return instrument_errors();
  }
  [[deprecated("renamed watch_snapshot")]] std::shared_ptr<const WatchSnapshot> stats() const {
    return watch_snapshot();
  }

 private:
  friend Session start(std::shared_ptr<torch::nn::Module>, StartOptions);
  friend struct detail::SessionAccess;  // nansense's own code and tests (src/session/session_access.h)
  explicit Session(std::shared_ptr<detail::SessionCore> core);
  std::shared_ptr<detail::SessionCore> core_;
};

// Create a session for `model`; serves the UI at once when options.port is set.
Session start(std::shared_ptr<torch::nn::Module> model, StartOptions options = {});

// A model made with TORCH_MODULE (`Net model;` where Net is a ModuleHolder).
// Experiments get the model's forward when it takes one tensor or two.
template <class Impl>
Session start(const torch::nn::ModuleHolder<Impl>& model, StartOptions options = {}) {
  Session session = start(std::static_pointer_cast<torch::nn::Module>(model.ptr()), std::move(options));
  std::shared_ptr<Impl> impl = model.ptr();
  if constexpr (requires(Impl & m, const torch::Tensor& x) {
                  { m.forward(x) } -> std::convertible_to<torch::Tensor>;
                }) {
    session.set_forward([impl](const std::vector<torch::Tensor>& in) -> torch::Tensor {
      if (in.size() != 1)
        throw ArgumentError("the model's forward takes 1 input, the batch has " + std::to_string(in.size()));
      return impl->forward(in[0]);
    });
  } else if constexpr (requires(Impl & m, const torch::Tensor& x) {
                         { m.forward(x, x) } -> std::convertible_to<torch::Tensor>;
                       }) {
    session.set_forward([impl](const std::vector<torch::Tensor>& in) -> torch::Tensor {
      if (in.size() != 2)
        throw ArgumentError("the model's forward takes 2 inputs, the batch has " + std::to_string(in.size()));
      return impl->forward(in[0], in[1]);
    });
  }
  return session;
}

// A model held as a plain object (`struct Net : torch::nn::Module`, `Net model;`
// on the stack, passed around as Net&). The session does not own it: the
// model must outlive the Session object (declare the session after it).
Session start(torch::nn::Module& model, StartOptions options = {});

// Serve the UI and the HTTP API for `session`. A no-op on a disabled session.
// Returns false (after printing one line saying why) when the port cannot be
// bound; training goes on without the UI. Returns false at once on a
// distributed run's follower (rank > 0): rank 0 serves for every rank.
bool serve(Session& session, ServeOptions options = {});

}  // namespace nansense
