#include <exception>
#include <iostream>
#include <utility>

#include "nansense/errors.h"
#include "nansense/session.h"
#include "capture/snapshot_builder.h"
#include "session/session_core.h"

namespace nansense {

std::string_view to_string(RunState state) {
  switch (state) {
    case RunState::kRunning:
      return "running";
    case RunState::kPaused:
      return "paused";
    case RunState::kFinished:
      return "finished";
    case RunState::kLost:
      return "lost";
  }
  return "running";
}

const std::vector<double>& InputNormalization::for_input(const std::string& input) const {
  auto it = per_input.find(input);
  return it != per_input.end() ? it->second : all;
}

const InputTransform& InputTransforms::for_input(const std::string& input) const {
  auto it = per_input.find(input);
  return it != per_input.end() ? it->second : all;
}

namespace detail {

SessionCore::SessionCore(std::shared_ptr<torch::nn::Module> model, const StartOptions& options)
    : model_(std::move(model)),
      optimizers_(options.optimizers()),
      display_(options.serve()),
      schedule_(options.epochs(), options.phases()) {
  if (!model_) throw UsageError("nansense::start needs a model, got a null module");
  if (options.snapshot_budget() < 0) {
    throw UsageError("StartOptions().snapshot_budget(" + std::to_string(options.snapshot_budget()) +
                     "): a budget is a byte count >= 0 (0 keeps every sample; default " +
                     std::to_string(StartOptions::kDefaultSnapshotBudget) + ")");
  }
  snapshot_budget_ = options.snapshot_budget();
  if (!(options.snapshot_share() >= 0 && options.snapshot_share() <= 1)) {
    throw UsageError("StartOptions().snapshot_share(" + std::to_string(options.snapshot_share()) +
                     "): a share of the step's memory between 0 and 1 (0: the byte budget alone; default " +
                     std::to_string(StartOptions::kDefaultSnapshotShare) + ")");
  }
  snapshot_share_ = options.snapshot_share();
  control_.set_update_frequency(options.update_frequency());
  StatsCollector::Host stats_host;
  stats_host.report_error = [this](const std::string& what) { report_part_error(what); };
  stats_host.changed = [this] { control_.notify_changed(); };
  stats_ = std::make_unique<StatsCollector>(*model_, schedule_, options, std::move(stats_host));
  experiments::Engine::Host experiments_host;
  experiments_host.snapshot = [this] { return snapshot_.load(); };
  experiments_host.paused = [this] { return control_.state() == RunState::kPaused; };
  experiments_host.in_batch_pause = [this] { return in_batch_pause_.load(); };
  experiments_host.ended = [this]() -> std::string {
    switch (control_.state()) {
      case RunState::kFinished:
        return "training has finished: experiments run on the paused training loop";
      case RunState::kLost:
        return "the training loop was lost (" + control_.lost_reason() + ")";
      default:
        return "";
    }
  };
  experiments_host.leave_requested = [this] { return control_.leave_requested(); };
  experiments_host.post = [this](std::function<void()> work) { control_.post(std::move(work)); };
  experiments_host.changed = [this] { control_.notify_changed(); };
  experiments_host.display = [this] { return display_; };
  experiments_ = std::make_unique<experiments::Engine>(*model_, std::move(experiments_host));
  experiments::Probes::Host probes_host;
  probes_host.snapshot = [this] { return snapshot_.load(); };
  probes_host.paused = [this] { return control_.state() == RunState::kPaused; };
  probes_host.in_batch_pause = [this] { return in_batch_pause_.load(); };
  probes_host.ended = [this]() -> std::string {
    switch (control_.state()) {
      case RunState::kFinished:
        return "training has finished: probes run on the paused training loop";
      case RunState::kLost:
        return "the training loop was lost (" + control_.lost_reason() + ")";
      default:
        return "";
    }
  };
  probes_host.post = [this](std::function<void()> work) { control_.post(std::move(work)); };
  probes_host.changed = [this] { control_.notify_changed(); };
  probes_host.forward = [this] { return experiments_->forward(); };
  probes_host.next_sequence = [this] { return ++sequence_; };
  probes_host.show = [this](std::shared_ptr<const BatchSnapshot> view) { show(std::move(view)); };
  visitor_probes_ =
      std::make_unique<experiments::VisitorProbes>(*model_, probes_host, experiments::VisitorProbes::Limits{});
  probes_ = std::make_unique<experiments::Probes>(*model_, std::move(probes_host));
  port_ = make_port(*this);
  restorer_ = make_restorer(options.scheduler());
  try {
    numerics_ = make_monitor(options.debug());
  } catch (const ArgumentError& e) {
    throw ArgumentError(std::string("StartOptions().debug(): ") + e.what());
  }
}

std::unique_ptr<numerics::Monitor> SessionCore::make_monitor(const DebugSettings& settings) {
  numerics::Monitor::Host host;
  host.publish_capture = [this] { publish_capture(); };
  host.trainer_step = [this] { return trainer_step(); };
  host.pause = [this] {
    // Any mode: a numerical error stops the run where it happened.
    control_.pause();
    in_batch_pause_ = true;
    pause_here(schedule_.with_flags(pos_));
    in_batch_pause_ = false;
    decision_.pause_after = false;  // this batch has had its pause
  };
  host.can_pause = [this] { return attachment_ != nullptr; };
  host.unserved_note = [this] { return unserved_nan_note_; };
  host.rerun_note = [this] { return rerun_note(); };
  host.architecture = [this] { return architecture_.load(); };
  host.report_error = [this](const std::string& what) { report_numerics_error(what); };
  host.changed = [this] { control_.notify_changed(); };
  host.scheduler = [this] { return restorer_->scheduler(); };
  host.settled = [this] {
    if (on_settled_) on_settled_();
  };
  host.await_leader = [this]() -> std::optional<bool> {
    if (!on_await_leader_) return std::nullopt;
    return on_await_leader_();
  };
  host.update_decided = [this](bool skipped) {
    if (on_update_decided_) on_update_decided_(skipped);
  };
  host.loss_scale = [this]() -> std::optional<double> {
    return loss_scale_reader_ ? loss_scale_reader_() : std::nullopt;
  };
  // A captured batch and the traced re-run run eagerly: only the others run compiled.
  host.compiled = [this] { return compiled_.load() && !tracer_; };
  host.log_scalar = [this](const std::string& name, double value) { stats_->log_scalar(name, value, pos_); };
  auto monitor = std::make_unique<numerics::Monitor>(*model_, optimizers_, settings, std::move(host));
  monitor->check_after_reduction(after_reduction_);
  return monitor;
}

SessionCore::~SessionCore() {
  // First: the exchange's heartbeat thread calls into the parts below.
  end_run();
  control_.close();
  attachment_.reset();
}

bool SessionCore::open_batch(const std::string& phase, std::optional<int64_t> epoch) {
  if (restorer_->jump_armed() && !jumps_held_) throw_if_jump_due();
  if (!epoch) epoch = loop_epoch_;
  // A re-run keeps the batch's position: the schedule does not advance.
  const bool repeat = std::exchange(repeat_batch_, false);
  rerunning_ = repeat;
  // The scalars the first run logged at this position give way to the re-run's.
  if (repeat) stats_->forget_scalars_at(pos_);
  if (!repeat) {
    try {
      pos_ = schedule_.advance(phase, epoch);
    } catch (const ScheduleError& e) {
      mark_lost(std::string("the loop broke its declared schedule: ") + e.what());
      throw;
    }
  }
  decision_ = control_.decide(pos_, stats_->collecting() && !capture_disabled_);
  // A frozen moment due here: captured whatever the mode, without a pause.
  if (!repeat && moment_target_ready(pos_)) begin_moment();
  if (moment_now_) decision_.capture = true;
  if (replaying_) decision_ = {.capture = true, .pause_after = false, .collect = false};
  const auto trace = numerics_->plan_batch(pos_, repeat);
  // A re-run is captured, so the UI shows the batch that went non-finite.
  if (trace == numerics::Monitor::Trace::kCapture) decision_.capture = true;
  const bool capture = decision_.capture && !capture_disabled_;
  stats_->begin_batch(pos_, decision_.collect, architecture_.load().get());
  if (capture || decision_.collect || trace != numerics::Monitor::Trace::kNone) {
    // One observer of the batch's ops feeds both the capture and root cause.
    try {
      observer_ = std::make_unique<observer::Observer>();
    } catch (const std::exception& e) {
      report_numerics_error(std::string("this batch is not traced: ") + e.what());
    }
  }
  if ((capture || decision_.collect) && observer_) {
    try {
      // A batch only collected keeps its tensors on their device: no copy.
      // Only the layers in the statistics' scope: the others' gradients are
      // not held to the batch's end.
      capture::Tracer::Keep keep;
      if (decision_.collect) keep = stats_->trace_keep();
      keep.cpu = capture;
      model_index_ = capture::ModelIndex::of(*model_, capture ? nullptr : model_index_);
      tracer_ = std::make_unique<capture::Tracer>(*model_, *observer_, std::move(keep), snapshot_budget_,
                                                  samples_that_fit_, model_index_);
      if (capture) tracer_->copy_into(host_buffers_);
      if (capture && snapshot_share_ > 0) {
        // The step's own memory: what the process holds now, less the
        // copies nansense holds of the snapshot shown.
        auto shown = shown_.load();
        tracer_->share_budget(snapshot_share_, capture::resident_bytes() - (shown ? shown->held_bytes : 0));
      }
    } catch (const std::exception& e) {
      report_internal_error(std::string("capture disabled: ") + e.what());
    }
  }
  // The checks read a captured batch's CPU copies; a batch only collected is
  // checked as an untraced one.
  numerics_->begin_batch(capture ? tracer_.get() : nullptr, observer_ ? trace : numerics::Monitor::Trace::kNone,
                         observer_.get());
  return tracer_ != nullptr;
}

void SessionCore::record_item(std::vector<torch::Tensor> tensors) {
  if (moment_file_) record_moment_item(tensors);
  numerics_->set_item(std::move(tensors));
}

void SessionCore::set_batch_inputs(std::vector<torch::Tensor> inputs, bool stacked) {
  if (moment_file_) record_moment_inputs(inputs, stacked);
  if (!tracer_) return;
  try {
    tracer_->set_inputs(inputs, stacked);
  } catch (const std::exception& e) {
    report_internal_error(std::string("input capture failed: ") + e.what());
  }
}

void SessionCore::publish_capture() {
  if (!tracer_) return;
  const bool capture = decision_.capture;
  if (capture) numerics_->release_tracer();
  std::shared_ptr<capture::TraceResult> trace;
  try {
    trace = tracer_->finish();
    tracer_.reset();
    if (!trace->error.empty()) throw std::runtime_error(trace->error);
  } catch (const std::exception& e) {
    tracer_.reset();
    report_internal_error(std::string(capture ? "snapshot failed: " : "statistics tracing failed: ") + e.what());
    return;
  }
  if (capture) {
    publish_snapshot(*trace);
    host_buffers_->end_capture();
  }
  // A batch only collected (a detached run with statistics on) names the
  // layers too.
  if (!capture && decision_.collect && !architecture_.load()) adopt_architecture(trace->architecture);
  if (decision_.collect) stats_->fold(pos_, *trace);
  if (capture) stats_->publish();
}

void SessionCore::adopt_architecture(std::shared_ptr<const Architecture> architecture) {
  if (!architecture || architecture->layers.empty()) return;
  // The first architecture settles the layers watched before it.
  if (!architecture_.load()) {
    if (auto dropped = stats_->check_watched(*architecture); !dropped.empty()) {
      std::string names;
      for (const auto& n : dropped) names += (names.empty() ? "\"" : ", \"") + n + "\"";
      report_part_error("watched layers not in the architecture were dropped: " + names);
    }
  }
  architecture_.store(std::move(architecture));
}

void SessionCore::publish_snapshot(capture::TraceResult& trace) {
  try {
    auto pos = schedule_.with_flags(pos_);
    auto snap = capture::build_snapshot(pos, ++sequence_, trace, *model_, optimizers_, optimizer_reader_);
    snap->trainer_step = trainer_step();
    stats_->run_tensor_instruments(pos, trace, *snap, [this] {
      capture::OptimizerView live;
      for (auto* optimizer : optimizers_) {
        auto view = capture::read_optimizer(*optimizer, *model_, /*copy_to_cpu=*/false);
        live.state.merge(view.state);
        live.hyperparams.merge(view.hyperparams);
      }
      if (optimizer_reader_) {
        auto view = optimizer_reader_();
        live.state.merge(view.state);
        live.hyperparams.merge(view.hyperparams);
      }
      return live;
    });
    {
      std::lock_guard lock(trace.grad_mu);
      samples_that_fit_ = capture::next_start_samples(trace);
    }
    adopt_architecture(snap->architecture);
    {
      std::lock_guard shown_lock(shown_mu_);
      // A probe shown keeps its place: it re-runs on this capture before the
      // loop goes on, and shows that (or, failing, this snapshot).
      if (!probe_shown_) shown_.store(snap);
      std::lock_guard lock(publish_mu_);
      snapshot_.store(std::move(snap));
    }
    published_.notify_all();
    control_.notify_changed();
  } catch (const std::exception& e) {
    report_internal_error(std::string("snapshot failed: ") + e.what());
  }
}

void SessionCore::show(std::shared_ptr<const BatchSnapshot> view) {
  {
    std::lock_guard lock(shown_mu_);
    probe_shown_ = view != nullptr;
    if (view) {
      shown_.store(std::move(view));
    } else if (auto live = snapshot_.load()) {
      auto copy = std::make_shared<BatchSnapshot>(*live);
      copy->sequence = ++sequence_;
      shown_.store(std::move(copy));
    }
  }
  control_.notify_changed();
}

bool SessionCore::finish_batch(bool can_repeat) {
  rerunning_ = false;
  const auto numerics = numerics_->end_batch(can_repeat);
  if (numerics.repeat) {
    // The first, untraced run of the batch is not published: its re-run is.
    tracer_.reset();
    observer_.reset();
    repeat_batch_ = true;
    return true;
  }
  publish_capture();
  observer_.reset();
  // Each page's auto experiment re-runs at every snapshot (auto-run on).
  // An active probe re-runs on every captured batch (before the pause shows it).
  if (decision_.capture) probes_->snapshot_published();
  if (decision_.capture) experiments_->snapshot_published(experiments::Engine::Clock::now());
  // Auto-run (or a recording's pinned auto experiment): queued experiments
  // run at each live update (in a pause, the pause runs them).
  if (decision_.capture && !decision_.pause_after && experiments_->runs_at_updates() && experiments_->pending()) {
    experiments_->drain();
  }
  // After the loop's optimizer step: the parameter sample's update ratio.
  stats_->end_batch(architecture_.load().get());
  if (decision_.capture) stats_->publish();
  if (moment_now_) finish_moment();
  if (numerics.pause) {
    control_.pause();
    decision_.pause_after = true;
  }
  if (decision_.pause_after) {
    if (!attachment_ && !warned_no_ui_) {
      warned_no_ui_ = true;
      std::cerr << "[nansense] paused at " << pos_.to_string() << " with no UI served: " << no_ui_hint_ << "\n";
    }
    pause_here(schedule_.with_flags(pos_));
  }
  decision_ = {};
  // Not from abandon_batch(): a destructor must not throw.
  if (can_repeat && restorer_->jump_armed() && !jumps_held_) throw_if_jump_due();
  return false;
}

void SessionCore::pause_here(const BatchPosition& pos) {
  if (experiments_->pending()) {
    try {
      control_.post([this] { experiments_->drain(); });
    } catch (const std::exception&) {
      // The run ended: close() stops what was queued.
    }
  }
  control_.pause_at(pos);
}

void SessionCore::end_phase(const std::string& phase, int64_t count) {
  schedule_.end_phase(phase, count);
  stats_->end_phase(phase, count);
  // What the phase's batches collected since the last live update is shown
  // at its end, not at the next update (up to 2 s or n batches later) or at
  // close(): a loop's end leaves nothing of its statistics unpublished.
  stats_->publish();
}

void SessionCore::log_scalar(const std::string& name, double value) {
  if (pos_.phase.empty()) {
    throw UsageError("log_scalar(\"" + name +
                     "\") needs a batch position: call it inside a batches() loop, after "
                     "its first batch began");
  }
  stats_->log_scalar(name, value, pos_);
}

void SessionCore::abandon_batch(bool by_exception) {
  if (!by_exception) {
    finish_batch(/*can_repeat=*/false);
    return;
  }
  rerunning_ = false;
  numerics_->abandon();
  tracer_.reset();
  observer_.reset();
  // A time-travel jump unwinding through the loop is no loss.
  if (restorer_->jump_in_flight()) return;
  mark_lost("the training loop threw an exception during " + pos_.to_string());
  leave_run("its training loop threw an exception during " + pos_.to_string());
}

void SessionCore::close() {
  std::exception_ptr lost;
  try {
    close_run();
  } catch (...) {
    lost = std::current_exception();  // closed all the same, then thrown
  }
  if (!closed_) report_unreached_moment();
  if (!closed_) stats_->finish();
  closed_ = true;
  control_.close();
  experiments_->close();
  probes_->close();
  visitor_probes_->close();
  if (attachment_) attachment_->session_closed();
  {
    std::lock_guard lock(publish_mu_);
    published_.notify_all();
  }
  if (lost) std::rethrow_exception(lost);
}

void SessionCore::mark_lost(const std::string& reason) {
  if (closed_) return;
  control_.mark_lost(reason);
  std::lock_guard lock(publish_mu_);
  published_.notify_all();
}

bool SessionCore::wait_for_snapshot_after(uint64_t sequence, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(publish_mu_);
  auto newer = [&] {
    auto snap = snapshot_.load();
    return snap && snap->sequence > sequence;
  };
  published_.wait_for(lock, timeout, [&] {
    return newer() || control_.state() == RunState::kFinished || control_.state() == RunState::kLost;
  });
  return newer();
}

void SessionCore::report_internal_error(const std::string& what) {
  capture_disabled_ = true;
  std::cerr << "[nansense] " << what << " (training continues without it)\n";
  std::lock_guard lock(errors_mu_);
  internal_errors_.push_back(what);
}

void SessionCore::report_numerics_error(const std::string& what) { report_part_error(what); }

void SessionCore::report_part_error(const std::string& what) {
  std::cerr << "[nansense] " << what << " (training continues)\n";
  {
    std::lock_guard lock(errors_mu_);
    internal_errors_.push_back(what);
  }
  control_.notify_changed();
}

std::vector<std::string> SessionCore::internal_errors() const {
  std::lock_guard lock(errors_mu_);
  return internal_errors_;
}

std::string SessionCore::url() const { return attachment_ ? attachment_->url() : std::string(); }

bool begin_batch(SessionCore& core, const std::string& phase, std::optional<int64_t> epoch) {
  return core.begin_batch(phase, epoch);
}
void set_batch_inputs(SessionCore& core, std::vector<torch::Tensor> inputs, bool stacked) {
  core.set_batch_inputs(std::move(inputs), stacked);
}
void record_item(SessionCore& core, std::vector<torch::Tensor> tensors) { core.record_item(std::move(tensors)); }
bool end_batch(SessionCore& core) { return core.end_batch(); }
void end_phase(SessionCore& core, const std::string& phase, int64_t count) { core.end_phase(phase, count); }
void abandon_batch(SessionCore& core, bool by_exception) { core.abandon_batch(by_exception); }

}  // namespace detail

Session::Session(std::shared_ptr<detail::SessionCore> core) : core_(std::move(core)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    if (core_ && !core_->closed()) core_->mark_lost("the session was replaced without calling close()");
    core_ = std::move(other.core_);
  }
  return *this;
}
Session::~Session() {
  if (core_ && !core_->closed()) core_->mark_lost("the training loop ended without calling session.close()");
}

namespace {
const Schedule& empty_schedule() {
  static const Schedule schedule;
  return schedule;
}
}  // namespace

bool Session::enabled() const { return core_ != nullptr; }

void Session::set_schedule(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases) {
  if (core_) core_->schedule().set(epochs, std::move(phases));
}

void Session::close() {
  if (core_) core_->close();
}

bool Session::rerunning() const { return core_ && core_->rerunning(); }

std::optional<BatchPosition> Session::live_position() const { return core_ ? core_->live_position() : std::nullopt; }
Mode Session::mode() const { return core_ ? core_->control().mode() : Mode::kDetach; }
RunState Session::state() const { return core_ ? core_->control().state() : RunState::kRunning; }
std::shared_ptr<const BatchSnapshot> Session::snapshot() const { return core_ ? core_->snapshot() : nullptr; }
std::shared_ptr<const Architecture> Session::architecture() const { return core_ ? core_->architecture() : nullptr; }
const Schedule& Session::schedule() const { return core_ ? core_->schedule() : empty_schedule(); }

void Session::step_batch() {
  if (core_ && !core_->locked()) core_->control().step_batch();
}
void Session::step_phase() {
  if (core_ && !core_->locked()) core_->control().step_phase();
}
void Session::step_epoch() {
  if (core_ && !core_->locked()) core_->control().step_epoch();
}
void Session::run_until(const BatchPosition& target) {
  if (core_ && !core_->locked()) core_->control().run_until(target);
}
void Session::run() {
  if (core_ && !core_->locked()) core_->control().run();
}
void Session::detach() {
  if (core_ && !core_->locked()) core_->control().detach();
}
void Session::pause() {
  if (core_ && !core_->locked()) core_->control().pause();
}
void Session::refresh() {
  if (core_ && !core_->locked()) core_->control().refresh();
}
RunState Session::wait_until_stopped(std::chrono::milliseconds timeout) const {
  return core_ ? core_->control().wait_until_stopped(timeout) : RunState::kRunning;
}
void Session::step_until_position(int64_t phase_index, int64_t epoch, int64_t batch_idx) {
  if (!core_ || core_->locked()) return;
  const auto order = core_->schedule().phase_order();
  if (phase_index < 0 || phase_index >= static_cast<int64_t>(order.size())) {
    std::string seen;
    for (const auto& p : order) seen += (seen.empty() ? "" : ", ") + p;
    throw UsageError("step_until_position: phase_index " + std::to_string(phase_index) +
                     " is not a phase the run has seen yet (phases so far: " + (seen.empty() ? "none" : seen) +
                     "); run_until() names the phase");
  }
  BatchPosition target;
  target.phase = order[static_cast<size_t>(phase_index)];
  target.epoch = epoch;
  target.batch_idx = batch_idx;
  core_->control().run_until(target);
}
int64_t Session::pause_count() const { return core_ ? core_->control().pause_count() : 0; }
bool Session::wait_until_paused(int64_t after_pauses, std::optional<std::chrono::milliseconds> timeout) const {
  if (!core_) return true;  // nothing will ever pause
  return core_->control().wait_for_pause(after_pauses, timeout);
}
std::string Session::url() const { return core_ ? core_->url() : std::string(); }
void Session::set_forward(ForwardFn forward) {
  if (core_) core_->experiments().set_forward(std::move(forward));
}

std::optional<DebugError> Session::debug_error() const { return core_ ? core_->debug().error() : std::nullopt; }
LossScaleStatus Session::loss_scale() const { return core_ ? core_->debug().loss_scale() : LossScaleStatus{}; }
DebugSettings Session::debug_settings() const { return core_ ? core_->debug().settings() : DebugSettings(); }
void Session::set_debug_settings(const DebugSettings& settings) {
  if (core_ && !core_->locked()) core_->debug().set_settings(core_->settings_for_rank(settings));
}
void Session::disable_debug_check(const std::string& category) {
  if (core_ && !core_->locked()) core_->debug().silence(category);
}
void Session::clear_debug_error() {
  if (core_ && !core_->locked()) core_->debug().clear();
}

Session start(std::shared_ptr<torch::nn::Module> model, StartOptions options) {
  if (!options.enabled()) return Session(nullptr);
  Session session(std::make_shared<detail::SessionCore>(std::move(model), options));
  if (options.distributed()) session.core_->join_run(*options.distributed());
  // On a distributed run's follower serve() does nothing: rank 0 serves.
  if (options.serve_at_start()) serve(session, options.serve());
  return session;
}

Session start(torch::nn::Module& model, StartOptions options) {
  // Not owned: a no-op deleter. Owning it through a shared_ptr also lets
  // LibTorch's named_modules() (which asks the root for shared_from_this)
  // work on a module that lives on the stack, while the session holds it.
  return start(std::shared_ptr<torch::nn::Module>(&model, [](torch::nn::Module*) {}), std::move(options));
}

}  // namespace nansense
