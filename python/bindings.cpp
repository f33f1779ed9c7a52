// nansense._nansense: the engine behind the Python package (nansense/*.py
// holds the Python API; this module is its narrow native layer).
//
// Threads: the Python training thread is the only one that calls the batch
// entry points; they release the GIL whenever the engine may block (the
// pause loop), so the server and other Python threads keep running. The
// server threads never touch a Python object: the engine sees the model only
// through the mirror (mirror.h), whose tensors are the model's own.
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <variant>
#include <optional>

#include "common/json_values.h"
#include "mirror.h"
#include "values.h"
#include "numerics/capsule.h"
#include "nansense/nansense.h"
#include "numerics/debug_json.h"
#include "server/controller/controller.h"
#include "session/session_access.h"
#include "session/session_port.h"
#include "session/stats_collector.h"
#include "stats/histogram.h"

namespace py = pybind11;

namespace nansense::python {
namespace {

using MeanStd = std::variant<std::vector<double>, std::map<std::string, std::vector<double>>>;

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// A Python object held by C++ code that outlives any one call (a function
// the engine calls from its own threads): released with the GIL, and leaked
// when the interpreter is already gone.
std::shared_ptr<py::object> hold(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* o) {
    if (python_finalizing()) return;
    py::gil_scoped_acquire gil;
    delete o;
  });
}

// Calls a Python instrument from the training thread (which runs the
// engine with the GIL released); a Python error becomes the C++ error the
// engine reports and disables the instrument with.
template <class F>
auto with_python(const char* what, F&& f) {
  if (python_finalizing()) throw std::runtime_error("Python is shutting down");
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(std::string(what) + " raised " + e.what());
  } catch (const py::cast_error& e) {
    throw std::runtime_error(std::string(what) + " returned a value of the wrong type: " + e.what());
  }
}

// input_transform: the user's Python function, called by the server's
// threads (and experiments' pictures) with the GIL taken for the call. A
// Python error becomes a C++ one, so the GIL is never needed to report it.
InputTransform python_transform(py::object function) {
  auto held = hold(std::move(function));
  return [held](const torch::Tensor& sample) -> torch::Tensor {
    if (python_finalizing()) throw std::runtime_error("Python is shutting down");
    py::gil_scoped_acquire gil;
    try {
      py::object out = (*held)(sample);
      if (!THPVariable_Check(out.ptr())) {
        throw std::invalid_argument("the input transform must return a torch.Tensor, got " +
                                    std::string(py::str(py::type::of(out).attr("__name__"))));
      }
      return out.cast<torch::Tensor>().detach().to(torch::kCPU);
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
  };
}

// Time travel's view of the Python optimizer and LR scheduler: their
// state_dict()s, serialised by torch.save on the Python side, ride in every
// checkpoint as one byte tensor (the SchedulerAdapter interface the C++
// schedulers use too). Called on the training thread only; it takes the GIL
// itself, as the engine may call it with the GIL released.
class PythonStateAdapter : public SchedulerAdapter {
 public:
  PythonStateAdapter(std::string kind, py::object save, py::object load)
      : kind_(std::move(kind)), save_(new py::object(std::move(save))), load_(new py::object(std::move(load))) {}
  ~PythonStateAdapter() override {
    if (!Py_IsInitialized()) return;  // at exit: leaked with the interpreter
    py::gil_scoped_acquire gil;
    delete save_;
    delete load_;
  }
  std::string kind() const override { return kind_; }
  void save(torch::serialize::OutputArchive& archive) const override {
    py::gil_scoped_acquire gil;
    std::string bytes = py::bytes((*save_)());
    auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    archive.write("python_state", t);
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor t;
    archive.read("python_state", t);
    t = t.contiguous();
    py::gil_scoped_acquire gil;
    (*load_)(py::bytes(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel())));
  }

 private:
  std::string kind_;
  py::object* save_;
  py::object* load_;
};

// The Python session's engine: a nansense::Session over the mirror of the
// Python model. A disabled session never makes one (the Python side is then
// a pass-through), so every method here may assume a live session.
class Engine {
 public:
  Engine(const std::vector<ModuleSpec>& modules, std::optional<int64_t> epochs, std::optional<PhaseCounts> phases)
      : mirror_(build_mirror(modules)) {
    StartOptions options;
    options.epochs(epochs).phases(std::move(phases));
    session_ = std::make_unique<Session>(start(mirror_, options));
    core_ = detail::core_of(*session_);
    core_->set_python_front_end();
    controller_ = std::make_unique<server::Controller>(*detail::port_of(*session_));
    core_->set_no_ui_hint(
        "nansense.serve(session) or nansense.start(..., port=8080) serves one, and session.detach() trains on "
        "without pausing (Ctrl-C stops the script)");
    // Ctrl-C while paused: the pause wakes every 50 ms to let Python run its
    // signal handlers, which run on the main thread only (a loop on another
    // thread skips the GIL). An exception they raise leaves every pause
    // until a binding call returns to Python and raises it (raise_pending).
    const auto main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    core_->control().set_pause_check(
        [this, main_thread] {
          if (pending_) return true;
          if (PyThread_get_thread_ident() != main_thread || python_finalizing()) return false;
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() == 0) return false;
          pending_ = std::make_unique<py::error_already_set>();
          return true;
        },
        std::chrono::milliseconds(50));
  }
  // Called by Python's garbage collector, with the GIL: the server stops
  // without it, as its threads may be waiting for it (an input transform).
  ~Engine() {
    pending_.reset();
    py::gil_scoped_release release;
    controller_.reset();
    session_.reset();
  }

  // The Python model's forward, for experiments on the paused model: it
  // runs on the training thread, which waits in the pause with the GIL
  // released, so the call takes the GIL back.
  void set_model(py::object model) {
    auto held = hold(std::move(model));
    session_->set_forward([held](const std::vector<torch::Tensor>& inputs) -> torch::Tensor {
      if (python_finalizing()) throw std::runtime_error("Python is shutting down");
      py::gil_scoped_acquire gil;
      try {
        py::tuple args(inputs.size());
        for (size_t i = 0; i < inputs.size(); ++i) args[i] = py::cast(inputs[i]);
        py::object out = (*held)(*args);
        if (!THPVariable_Check(out.ptr())) {
          throw std::invalid_argument("experiments need a model whose forward returns one tensor; it returned " +
                                      std::string(py::str(py::type::of(out).attr("__name__"))));
        }
        return out.cast<torch::Tensor>();
      } catch (py::error_already_set& e) {
        throw std::runtime_error(std::string("the model's forward raised ") + e.what());
      }
    });
  }

  // The Python optimizer's per-parameter state and hyperparameters in every
  // snapshot: `read` returns ({name: {key: tensor}}, {name: {key: float}}),
  // the shape of capture::OptimizerView. The engine calls it on the training
  // thread, which may have released the GIL.
  void set_optimizer_reader(py::object read) {
    auto held = hold(std::move(read));
    core_->set_optimizer_reader([held]() -> capture::OptimizerView {
      capture::OptimizerView view;
      if (python_finalizing()) return view;
      py::gil_scoped_acquire gil;
      try {
        py::tuple both = (*held)();
        view.state = both[0].cast<std::map<std::string, std::map<std::string, torch::Tensor>>>();
        view.hyperparams = both[1].cast<std::map<std::string, std::map<std::string, double>>>();
      } catch (py::error_already_set& e) {
        throw std::runtime_error(std::string("reading the optimizer's state raised ") + e.what());
      }
      return view;
    });
  }

  // The Python optimizer's and scheduler's state_dict(), in every
  // checkpoint and NaN capsule from now on.
  void set_state_adapter(const std::string& kind, py::object save, py::object load) {
    core_->restorer().set_default_adapter(std::make_shared<PythonStateAdapter>(kind, std::move(save), std::move(load)));
  }

  // transform: None, a callable, or a dict of input name -> callable
  // (checked on the Python side).
  bool serve(int port, const std::string& host, bool open_browser, bool mcp, bool print_banner,
             std::optional<MeanStd> mean, std::optional<MeanStd> std, py::object transform) {
    ServeOptions options;
    options.port(port).host(host).open_browser(open_browser).mcp(mcp).print_banner(print_banner);
    if (mean) std::visit([&](auto& v) { options.input_mean(v); }, *mean);
    if (std) std::visit([&](auto& v) { options.input_std(v); }, *std);
    if (py::isinstance<py::dict>(transform)) {
      std::map<std::string, InputTransform> per_input;
      for (auto [name, f] : transform.cast<py::dict>()) {
        per_input[name.cast<std::string>()] = python_transform(py::reinterpret_borrow<py::object>(f));
      }
      options.input_transform(std::move(per_input));
    } else if (!transform.is_none()) {
      options.input_transform(python_transform(std::move(transform)));
    }
    py::gil_scoped_release release;
    return nansense::serve(*session_, options);
  }

  // --- the training thread ---
  // `settled`: the ranks of a distributed run met when the last batch
  // ended (meet_after_batch).
  bool begin_batch(const std::string& phase, std::optional<int64_t> epoch, bool training, bool settled) {
    // The engine saves and restores the train/eval flag with the weights.
    if (mirror_->is_training() != training) mirror_->train(training);
    bool capture;
    {
      py::gil_scoped_release release;
      capture = core_->begin_batch(phase, epoch, settled);
      if (pending_) core_->abandon_batch(/*by_exception=*/true);
    }
    raise_pending();
    return capture;
  }
  void set_module_scope(std::string path) {
    if (auto* tracer = core_->tracer()) tracer->set_module_scope(std::move(path));
  }
  void set_inputs(std::vector<torch::Tensor> inputs) { core_->set_batch_inputs(std::move(inputs), false); }
  void record_item(std::vector<torch::Tensor> tensors) { core_->record_item(std::move(tensors)); }
  bool rerunning() const { return core_->rerunning(); }
  bool end_batch(bool can_repeat) {
    bool repeat;
    {
      py::gil_scoped_release release;
      repeat = core_->end_batch(can_repeat);
    }
    raise_pending();
    return repeat;
  }
  void abandon_batch(bool by_exception) {
    {
      py::gil_scoped_release release;
      core_->abandon_batch(by_exception);
    }
    raise_pending();
  }
  void end_phase(const std::string& phase, int64_t count) { core_->end_phase(phase, count); }
  void close() {
    py::gil_scoped_release release;
    session_->close();
  }
  void mark_lost(const std::string& reason) { core_->mark_lost(reason); }
  void set_unserved_nan_note(std::string note) { core_->set_unserved_nan_note(std::move(note)); }
  // A trainer adapter's words for the batch about to begin (NansenseCallback
  // for the Hugging Face Trainer): the optimizer step's number and its
  // micro-batches; cleared for batches that are no optimizer step.
  void set_trainer_step(int64_t global_step, int64_t micro_batches) {
    if (global_step < 0 || micro_batches < 1) {
      throw py::value_error("set_trainer_step needs global_step >= 0 and micro_batches >= 1");
    }
    core_->set_trainer_step(TrainerStep{global_step, micro_batches, -1});
  }
  void clear_trainer_step() { core_->set_trainer_step(std::nullopt); }
  void set_micro_batch(int64_t index) { core_->set_micro_batch(index); }
  // What a traced re-run repeats, in the front end's words (NansenseCallback's).
  void set_rerun_note(std::string ran_twice, std::vector<std::string> restored, std::vector<std::string> seen_twice,
                      std::string detect) {
    core_->set_rerun_note({std::move(ran_twice), std::move(restored), std::move(seen_twice), std::move(detect)});
  }

  // --- distributed runs (nansense/_distributed.py): the engine's
  // coordinator (src/distributed/coordinator.h) speaks the rank protocol ---
  // Joins the process group's run over its TCPStore at host:port
  // (SessionCore::join_python_run; DistributedError when a rank did not start).
  void join_run(const std::string& host, int port, int rank, int world) {
    py::gil_scoped_release release;
    core_->join_python_run(host, port, rank, world);
  }
  bool in_run() const { return core_->in_run(); }
  // Lightning: the ranks meet right after a batch ended (may pause rank 0;
  // may raise TimeTravelJump or DistributedError).
  void meet_after_batch() {
    {
      py::gil_scoped_release release;
      core_->meet_after_batch();
    }
    raise_pending();
  }
  // The loop left by an exception: the other ranks stop at their next boundary.
  void leave_run(const std::string& why) {
    py::gil_scoped_release release;
    core_->leave_run(why);
  }
  void request_halt() { core_->request_halt(); }
  bool halted() const { return core_->halted(); }
  void set_gradients_averaged(bool averaged) { core_->set_gradients_averaged(averaged); }
  // (boundaries, waited, cleans, sent_clean): SessionCore::run_counts.
  std::array<int64_t, 4> run_counts() const { return core_->run_counts(); }
  // Mixed precision: `read()` returns the loss scaler's scale (a float), or
  // None when no enabled scaler is in use (SessionCore::set_loss_scale_reader);
  // called with the GIL released around it. What it raises turns scaler
  // awareness off, said once. None clears it.
  void set_loss_scale_reader(py::object read) {
    if (read.is_none()) {
      core_->set_loss_scale_reader(nullptr);
      return;
    }
    auto held = hold(std::move(read));
    core_->set_loss_scale_reader([held]() -> std::optional<double> {
      if (python_finalizing()) return std::nullopt;
      py::gil_scoped_acquire gil;
      try {
        py::object scale = (*held)();
        if (scale.is_none()) return std::nullopt;
        return scale.cast<double>();
      } catch (py::error_already_set& e) {
        throw std::runtime_error(std::string("the scaler's get_scale() raised ") + e.what());
      } catch (const py::cast_error& e) {
        throw std::runtime_error(std::string("the scaler's get_scale() returned no number: ") + e.what());
      }
    });
  }
  // torch.compile: the batches that capture nothing run compiled code.
  void set_compiled(bool compiled) { core_->set_compiled(compiled); }
  // The tensors a backward of the batch under way starts from (the loss).
  void note_backward_roots(std::vector<torch::Tensor> roots) { core_->note_backward_roots(std::move(roots)); }
  void set_rank(int rank) { core_->set_rank(rank); }
  // Every rank of a DDP run: the gradients are checked once averaged too
  // (SessionCore::check_after_reduction).
  void check_after_reduction(bool on) { core_->check_after_reduction(on); }
  // From a tensor hook that runs in a backward ahead of every parameter's
  // (SessionCore::check_gradients_first): True when the check was queued.
  bool check_gradients_first() { return core_->check_gradients_first(); }
  // `decided(skipped)` runs once the batch's update is decided before the
  // optimizer step (SessionCore::set_on_update_decided; GIL released
  // there); None clears it. It replaces the coordinator's (a distributed
  // rank 0's answer to the followers holding their update).
  void set_update_decided_callback(py::object decided) {
    if (decided.is_none()) {
      core_->set_on_update_decided(nullptr);
      return;
    }
    auto held = hold(std::move(decided));
    core_->set_on_update_decided([held](bool skipped) {
      if (python_finalizing()) return;
      py::gil_scoped_acquire gil;
      try {
        (*held)(skipped);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("nansense's update-decided callback");
      }
    });
  }

  // --- any thread ---
  std::string url() const { return session_->url(); }
  std::string state() const { return std::string(to_string(session_->state())); }
  std::string mode() const { return std::string(to_string(session_->mode())); }
  std::string wait_until_stopped(double timeout_s) const {
    RunState state;
    {
      py::gil_scoped_release release;
      state = session_->wait_until_stopped(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    }
    return std::string(to_string(state));
  }
  std::optional<BatchPosition> live_position() const { return session_->live_position(); }
  // The published snapshot: immutable, held while Python reads it; every
  // tensor it hands out is a clone (values.cpp).
  std::shared_ptr<BatchSnapshot> snapshot() const {
    return std::const_pointer_cast<BatchSnapshot>(session_->snapshot());
  }
  std::vector<std::string> layer_names() const {
    std::vector<std::string> names;
    if (auto arch = session_->architecture()) {
      for (const auto& l : arch->layers) names.push_back(l.name);
    }
    return names;
  }
  std::vector<std::string> internal_errors() const { return core_->internal_errors(); }
  ScheduleRead schedule() const {
    const auto& s = session_->schedule();
    return {s.epochs(), s.phases(), s.phase_order()};
  }
  void set_schedule(std::optional<int64_t> epochs, std::optional<PhaseCounts> phases) {
    session_->set_schedule(epochs, std::move(phases));
  }

  // --- time travel (the training thread) ---
  int64_t open_epochs(int64_t n, const std::string& cache_dir, int64_t start_epoch, const std::string& state_kind,
                      py::object save_state, py::object load_state) {
    EpochOptions options;
    options.cache_dir(cache_dir).start_epoch(start_epoch);
    if (!save_state.is_none()) {
      options.scheduler(std::make_shared<PythonStateAdapter>(state_kind, std::move(save_state), std::move(load_state)));
    }
    py::gil_scoped_release release;
    return core_->open_epochs(n, options);
  }
  void start_epoch(int64_t epoch) {
    {
      py::gil_scoped_release release;
      core_->start_epoch(epoch);
    }
    raise_pending();
  }
  std::optional<int64_t> end_epoch(int64_t epoch, std::optional<int64_t> jumped_to) {
    std::optional<int64_t> next;
    {
      py::gil_scoped_release release;
      next = core_->end_epoch(epoch, jumped_to);
    }
    raise_pending();
    return next;
  }
  // Both block (waiting for checkpoint writes; reading a checkpoint file):
  // other Python threads run meanwhile.
  void abort_epochs() {
    py::gil_scoped_release release;
    core_->abort_epochs();
  }
  void request_time_travel(int64_t epoch) {
    py::gil_scoped_release release;
    session_->request_time_travel(epoch);
  }
  TimeTravelStatus time_travel_status() const { return session_->time_travel_status(); }

  // --- frozen moments, lock and park (nansense/_session.py) ---
  void freeze_moment(const std::string& path, const std::string& phase, int64_t epoch, int64_t batch_idx) {
    session_->freeze_moment(path, phase, epoch, batch_idx);
  }
  void lock() { session_->lock(); }
  bool locked() const { return session_->locked(); }
  void park() {
    {
      py::gil_scoped_release release;
      session_->park();
    }
    raise_pending();
  }
  // load_moment's replay, run by Python between the two (its module hooks
  // name the layers as a training batch's do).
  std::vector<torch::Tensor> begin_moment_replay(const std::string& path) {
    py::gil_scoped_release release;
    return core_->begin_moment_replay(path, /*set_inputs=*/false);
  }
  // The train/eval flag the frozen batch ran with, as begin_moment_replay
  // restored it onto the mirror: the Python model must follow it itself.
  bool model_training() const { return mirror_->is_training(); }
  void end_moment_replay() {
    py::gil_scoped_release release;
    core_->end_moment_replay();
  }
  void abandon_moment_replay() {
    py::gil_scoped_release release;
    core_->abandon_moment_replay();
  }

  void step_batch() { session_->step_batch(); }
  void step_phase() { session_->step_phase(); }
  void step_epoch() { session_->step_epoch(); }
  void run_until(const std::string& phase, int64_t epoch, int64_t batch_idx) {
    BatchPosition target;
    target.phase = phase;
    target.epoch = epoch;
    target.batch_idx = batch_idx;
    session_->run_until(target);
  }
  void run() { session_->run(); }
  void detach() { session_->detach(); }
  void pause() { session_->pause(); }
  void refresh() { session_->refresh(); }

  // --- the numerical checks: the standing error, the settings and the
  // loss scaler in their wire form (numerics/debug_json.cpp, which HTTP and
  // MCP send too): the package's DebugError, DebugSettings and
  // LossScaleStatus read those keys, and DebugError.root_cause is that dict.
  py::object debug_error() const {
    auto e = session_->debug_error();
    return e ? to_python(numerics::to_json(*e)) : py::none();
  }
  py::object debug_settings() const { return to_python(numerics::to_json(session_->debug_settings())); }
  // A partial update in DebugSettings' own names (the REST route's body).
  void set_debug_settings(py::dict update) {
    auto merged = numerics::to_json(session_->debug_settings());
    merged.update(json_of(update));
    session_->set_debug_settings(numerics::settings_from_json(merged));
  }
  void disable_debug_check(const std::string& category) { session_->disable_debug_check(category); }
  void clear_debug_error() { session_->clear_debug_error(); }
  py::object loss_scale() const { return to_python(numerics::to_json(session_->loss_scale())); }

  // --- statistics and instruments (any thread; instruments run on the
  // training thread). Settings go through the controller, the one
  // vocabulary the UI and MCP use, its replies as their JSON; the package
  // checks arguments first.
  py::object settings() const { return to_python(server::to_json(controller_->stats().get_settings())); }
  py::object set_update_frequency(const std::string& unit, double n, std::optional<std::string> phase) {
    return to_python(server::to_json(controller_->stats().set_update_frequency(unit, n, phase)));
  }
  py::object set_stats_scope(const std::string& scope) {
    return to_python(server::to_json(controller_->stats().set_stats_scope(scope)));
  }
  py::object watch_layers(const std::vector<std::string>& layers) {
    return to_python(server::to_json(controller_->stats().watch_layers(layers)));
  }
  py::object unwatch_layers(const std::vector<std::string>& layers) {
    return to_python(server::to_json(controller_->stats().unwatch_layers(layers)));
  }
  py::object set_watch_performance(std::optional<bool> channel_limit_enabled, std::optional<int64_t> channel_limit,
                                   std::optional<int64_t> histogram_sample, std::optional<int64_t> samples_per_channel,
                                   std::optional<bool> average_patches) {
    server::StatsArea::PerformanceChange change;
    change.channel_limit_enabled = channel_limit_enabled;
    change.channel_limit = channel_limit;
    change.histogram_sample = histogram_sample;
    change.samples_per_channel = samples_per_channel;
    change.average_patches = average_patches;
    return to_python(server::to_json(controller_->stats().set_watch_performance(change)));
  }
  py::object set_patch_layers(const std::optional<std::vector<std::string>>& layers) {
    return to_python(server::to_json(controller_->stats().set_patch_layers(layers)));
  }
  void log_scalar(const std::string& name, double value) { session_->log_scalar(name, value); }

  // `adapter(context)` returns [(key, value), ...] or None (the
  // package's wrapper around the user's function); `reduce`, when not None,
  // maps an epoch's list of values to one.
  void watch_metric(const std::string& name, py::object adapter, const std::string& on, const std::string& reduce,
                    py::object custom_reduce) {
    auto held = hold(std::move(adapter));
    detail::StatsCollector::CustomReduce reducer;
    if (!custom_reduce.is_none()) {
      auto held_reduce = hold(std::move(custom_reduce));
      reducer = [held_reduce, name](const std::vector<double>& values) -> double {
        return with_python(("the reduce of metric \"" + name + "\"").c_str(),
                           [&] { return (*held_reduce)(values).cast<double>(); });
      };
    }
    static const std::map<std::string, MetricReduce> reduces = {{"mean", MetricReduce::kMean},
                                                                {"sum", MetricReduce::kSum},
                                                                {"min", MetricReduce::kMin},
                                                                {"max", MetricReduce::kMax},
                                                                {"last", MetricReduce::kLast}};
    core_->stats().add_metric(
        name,
        [held, name](const LayerContext& ctx) -> detail::StatsCollector::NamedValues {
          return with_python(("metric \"" + name + "\"").c_str(), [&]() -> detail::StatsCollector::NamedValues {
            py::object out = (*held)(ctx);
            if (out.is_none()) return {};
            return out.cast<detail::StatsCollector::NamedValues>();
          });
        },
        on == "epoch" ? MetricOn::kEpoch : MetricOn::kBatch, reduces.at(reduce), std::move(reducer));
  }
  // `adapter(context)` (a LayerContext) returns a tensor or None.
  void watch_layer_tensor(const std::string& name, py::object adapter) {
    auto held = hold(std::move(adapter));
    session_->watch_layer_tensor(name, [held, name](const LayerContext& ctx) -> torch::Tensor {
      return with_python(("layer-tensor instrument \"" + name + "\"").c_str(), [&]() -> torch::Tensor {
        py::object out = (*held)(ctx);
        return out.is_none() ? torch::Tensor() : out.cast<torch::Tensor>();
      });
    });
  }
  void watch_weight_tensor(const std::string& name, py::object adapter) {
    auto held = hold(std::move(adapter));
    session_->watch_weight_tensor(name, [held, name](const WeightContext& ctx) -> torch::Tensor {
      return with_python(("weight-tensor instrument \"" + name + "\"").c_str(), [&]() -> torch::Tensor {
        py::object out = (*held)(ctx);
        return out.is_none() ? torch::Tensor() : out.cast<torch::Tensor>();
      });
    });
  }
  std::vector<std::pair<std::string, std::string>> instrument_errors() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& f : session_->instrument_errors()) out.emplace_back(f.name, f.error);
    return out;
  }
  // The published view itself (immutable; values.cpp hands out clones).
  std::shared_ptr<WatchSnapshot> watch_snapshot() const {
    return std::const_pointer_cast<WatchSnapshot>(session_->watch_snapshot());
  }

  // --- probes and experiment settings (the controller's; any thread but
  // the training one, as the UI calls them) ---
  py::object probe_status() const { return to_python(server::to_json(controller_->probes().get_probe_status())); }
  py::object pin_batch(double wait_s) {
    py::gil_scoped_release release;
    return call_json([&] { return controller_->probes().pin_batch(wait(wait_s)); });
  }
  py::object unpin_batch(double wait_s) {
    py::gil_scoped_release release;
    return call_json([&] { return controller_->probes().unpin_batch(wait(wait_s)); });
  }
  py::object set_probe_mode(const std::string& mode, double wait_s) {
    py::gil_scoped_release release;
    return call_json([&] { return controller_->probes().set_probe_mode(mode, wait(wait_s)); });
  }
  py::object add_perturbation(const std::vector<int64_t>& index, const std::vector<double>& values, int64_t sample,
                              std::optional<std::string> input, double wait_s) {
    py::gil_scoped_release release;
    return call_json(
        [&] { return controller_->probes().add_perturbation(index, values, sample, input, wait(wait_s)); });
  }
  py::object clear_perturbations(double wait_s) {
    py::gil_scoped_release release;
    return call_json([&] { return controller_->probes().clear_perturbations(wait(wait_s)); });
  }
  py::object set_auto_run_experiments(bool enabled) {
    return to_python(server::to_json(controller_->experiments().set_auto_run_experiments(enabled)));
  }
  py::object set_experiment_defaults(const std::string& kind, py::dict params) {
    return to_python(server::to_json(controller_->experiments().set_experiment_defaults(kind, json_of(params))));
  }
  py::object list_experiments() const {
    return to_python(server::to_json(controller_->experiments().list_experiments()));
  }

  // --- experiments under the reference API's names (any thread but the
  // training one; they run on the training thread in its pause) ---
  experiments::Engine::Submitted request_experiment(const std::string& kind, const std::string& layer,
                                                    py::dict params) {
    return core_->experiments().submit(kind, layer, json_of(params), /*until_pause=*/true);
  }
  // A published result: immutable, held while Python reads it (values.cpp).
  std::shared_ptr<experiments::Result> experiment_result(uint64_t seq) const {
    return std::const_pointer_cast<experiments::Result>(core_->experiments().result(seq));
  }
  uint64_t latest_experiment_seq() const { return core_->experiments().latest_seq(); }
  bool experiment_pending() const { return core_->experiments().pending(); }
  int cancel_experiment(std::optional<uint64_t> seq) { return core_->experiments().cancel(seq); }
  // Waits for request `seq` to finish: true once it has (or it left the
  // kept results), false when `timeout_s` passed first (nullopt: no limit).
  bool wait_for_experiment(uint64_t seq, std::optional<double> timeout_s) const {
    py::gil_scoped_release release;
    auto& engine = core_->experiments();
    const auto finished = [&](std::chrono::milliseconds slice) {
      auto r = engine.wait(seq, slice);
      return !r || r->finished();
    };
    if (timeout_s) return finished(std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000)));
    while (!finished(std::chrono::hours(1))) {
    }
    return true;
  }
  // The probe's last completed run (the reference's probe_result), and a
  // wait for a run newer than `after` (its wait_for_probe).
  std::shared_ptr<experiments::ProbeResult> probe_result() const {
    return std::const_pointer_cast<experiments::ProbeResult>(shared_probes().result());
  }
  bool wait_for_probe(uint64_t after, std::optional<double> timeout_s) const {
    py::gil_scoped_release release;
    const auto& probes = shared_probes();
    const auto newer = [&](std::chrono::milliseconds slice) {
      probes.wait_for_run_after(after, slice);
      return probes.runs_completed() > after || session_->state() == RunState::kFinished ||
             session_->state() == RunState::kLost;
    };
    if (timeout_s) return newer(std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000)));
    while (!newer(std::chrono::hours(1))) {
    }
    return true;
  }
  // The probe state the Python API reads: the session's one shared state
  // (a locked session's belongs to its visitors: a script sees none).
  const experiments::Probes& shared_probes() const {
    return core_->locked() ? core_->visitor_probes().idle() : core_->probes();
  }
  int64_t pause_count() const { return session_->pause_count(); }
  bool wait_until_paused(int64_t after, std::optional<double> timeout_s) const {
    py::gil_scoped_release release;
    std::optional<std::chrono::milliseconds> timeout;
    if (timeout_s) timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000));
    return session_->wait_until_paused(after, timeout);
  }

 private:
  // The exception a signal handler raised while the loop was paused, raised
  // now that the call returns to Python (the GIL is held again).
  void raise_pending() {
    if (!pending_) return;
    py::error_already_set error = std::move(*pending_);
    pending_.reset();
    throw error;
  }

  static server::Controller::Wait wait(double seconds) {
    return server::Controller::Wait(static_cast<int64_t>(seconds * 1000));
  }
  // A controller call made with the GIL released: its JSON reply converted
  // once the GIL is back (its refusal passes through as a Refusal).
  template <class F>
  py::object call_json(F&& f) {
    auto value = f();
    nlohmann::json reply;
    if constexpr (server::is_reply<decltype(value)>::value) {
      reply = server::to_json(value);
    } else {
      reply = std::move(value);
    }
    py::gil_scoped_acquire gil;
    return to_python(reply);
  }

  std::shared_ptr<torch::nn::Module> mirror_;
  std::unique_ptr<Session> session_;
  detail::SessionCore* core_ = nullptr;
  // Over the session's port; reset before the session it refers to.
  std::unique_ptr<server::Controller> controller_;
  // Training thread only.
  std::unique_ptr<py::error_already_set> pending_;
};

// A NaN capsule restored into a Python model (through its mirror, whose
// tensors are the model's own).
struct ReplayedCapsule {
  Capsule capsule;
  std::shared_ptr<torch::nn::Module> mirror;

  py::tuple gradients_match() const {
    std::string difference;
    const bool match = capsule.gradients_match(*mirror, &difference);
    return py::make_tuple(match, difference);
  }
};

// load_state: None, or the function that loads the Python optimizer's (and
// scheduler's) state_dict() from a capsule's bytes; state_kind must name them
// as the recording session did (checked against the capsule).
ReplayedCapsule replay(const std::string& path, const std::vector<ModuleSpec>& modules, const std::string& state_kind,
                       py::object load_state) {
  auto mirror = build_mirror(modules);
  std::shared_ptr<PythonStateAdapter> adapter;
  if (!load_state.is_none()) adapter = std::make_shared<PythonStateAdapter>(state_kind, py::none(), load_state);
  state::Parts parts;
  parts.optimizers = false;  // a Python session has no C++ optimizers
  parts.scheduler = adapter != nullptr;
  Capsule capsule = numerics::replay_into(path, {mirror.get(), {}, adapter.get()}, parts);
  return ReplayedCapsule{std::move(capsule), std::move(mirror)};
}

// The engine's errors as Python exceptions of the matching built-in kinds,
// one line each; `throwers` learns how to throw each (for _throw_error).
using Thrower = void (*)(const std::string&);
template <class E>
py::exception<E>& bind_error(py::module_& m, std::map<std::string, Thrower>& throwers, const char* name,
                             PyObject* base) {
  throwers[name] = [](const std::string& message) { throw E(message); };
  return py::register_exception<E>(m, name, base);
}

// Leaked on purpose: a Python object must not be released after the
// interpreter is gone.
py::object* jump_type() {
  static auto* type = new py::object(py::none());
  return type;
}

void bind_errors(py::module_& m) {
  static std::map<std::string, Thrower> throwers;
  bind_error<ScheduleError>(m, throwers, "ScheduleError", PyExc_ValueError);
  static auto& control_error = bind_error<ControlError>(m, throwers, "ControlError", PyExc_RuntimeError);
  bind_error<UsageError>(m, throwers, "UsageError", PyExc_RuntimeError);
  static auto& argument_error = bind_error<ArgumentError>(m, throwers, "ArgumentError", PyExc_ValueError);
  bind_error<TimeTravelError>(m, throwers, "TimeTravelError", PyExc_RuntimeError);
  bind_error<CapsuleError>(m, throwers, "CapsuleError", PyExc_RuntimeError);
  bind_error<MomentError>(m, throwers, "MomentError", PyExc_RuntimeError);
  // What the engine's coordinator raises when a distributed run is lost.
  bind_error<DistributedError>(m, throwers, "DistributedError", PyExc_RuntimeError);
  m.attr("DistributedError").attr("__doc__") =
      "A distributed run cannot go on together: a rank was lost (died, hung, left its loop) or the ranks "
      "disagree (nansense started on only some ranks). The message names the rank.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const common::Refusal& e) {
      // A refused request: a wrong or unknown argument is an ArgumentError
      // (a ValueError), the others (not paused, nothing pinned) a ControlError.
      if (e.kind() == common::Refusal::Kind::kConflict) {
        py::set_error(control_error, e.what());
      } else {
        py::set_error(argument_error, e.what());
      }
    } catch (const TimeTravelJump& jump) {
      // nansense.TimeTravelJump (a BaseException, defined in Python).
      auto* type = jump_type();
      if (!type->is_none()) {
        PyErr_SetObject(type->ptr(), py::make_tuple(jump.epoch()).ptr());
      } else {
        PyErr_SetString(PyExc_SystemError, "a time-travel jump with no TimeTravelJump type registered");
      }
    }
  });
  m.def("_set_jump_type", [](py::object type) { *jump_type() = std::move(type); });
  // The engine's error `name` thrown as the engine throws it, for the test
  // that every C++ error type arrives as its Python exception
  // (tests/python/test_errors.py); KeyError for a type with no binding.
  m.def("_throw_error", [](const std::string& name, const std::string& message) {
    const auto it = throwers.find(name);
    if (it == throwers.end()) throw py::key_error(name);
    it->second(message);
  });
}

// NaN capsules replayed into a Python model.
void bind_capsules(py::module_& m) {
  py::class_<ModuleSpec>(m, "ModuleSpec")
      .def(py::init([](std::string path, std::string kind, std::string description,
                       std::vector<std::pair<std::string, torch::Tensor>> parameters,
                       std::vector<std::pair<std::string, torch::Tensor>> buffers) {
             return ModuleSpec{std::move(path), std::move(kind), std::move(description), std::move(parameters),
                               std::move(buffers)};
           }),
           py::arg("path"), py::arg("kind"), py::arg("description"), py::arg("parameters"), py::arg("buffers"));
  py::class_<ReplayedCapsule>(m, "ReplayedCapsule")
      .def_property_readonly("position", [](const ReplayedCapsule& c) { return c.capsule.position; })
      .def_property_readonly("batch", [](const ReplayedCapsule& c) { return clones(c.capsule.batch); })
      .def_property_readonly("gradients", [](const ReplayedCapsule& c) { return clones(c.capsule.gradients); })
      .def_property_readonly("reasons", [](const ReplayedCapsule& c) { return c.capsule.reasons; })
      .def_property_readonly("notes", [](const ReplayedCapsule& c) { return c.capsule.notes; })
      .def_property_readonly("num_threads", [](const ReplayedCapsule& c) { return c.capsule.num_threads; })
      .def_property_readonly("settings",
                             [](const ReplayedCapsule& c) { return to_python(numerics::to_json(c.capsule.settings)); })
      .def("gradients_match", &ReplayedCapsule::gradients_match);
  m.def("replay_capsule", &replay, py::arg("path"), py::arg("modules"), py::arg("state_kind"), py::arg("load_state"));
}

// The Python session's engine, its methods by area.
using EngineClass = py::class_<Engine>;

// The training thread's entry points and what the front end tells the engine about its loop.
void bind_training(EngineClass& c) {
  c.def("set_model", &Engine::set_model)
      .def("set_state_adapter", &Engine::set_state_adapter)
      .def("set_optimizer_reader", &Engine::set_optimizer_reader)
      .def("begin_batch", &Engine::begin_batch, py::arg("phase"), py::arg("epoch"), py::arg("training"),
           py::arg("settled") = false)
      .def("set_inputs", &Engine::set_inputs)
      .def("set_module_scope", &Engine::set_module_scope)
      .def("record_item", &Engine::record_item)
      .def("end_batch", &Engine::end_batch, py::arg("can_repeat") = true)
      .def("abandon_batch", &Engine::abandon_batch)
      .def("end_phase", &Engine::end_phase)
      .def("close", &Engine::close)
      .def("mark_lost", &Engine::mark_lost)
      .def("set_unserved_nan_note", &Engine::set_unserved_nan_note)
      .def("set_trainer_step", &Engine::set_trainer_step)
      .def("clear_trainer_step", &Engine::clear_trainer_step)
      .def("set_micro_batch", &Engine::set_micro_batch)
      .def("set_rerun_note", &Engine::set_rerun_note)
      .def("set_loss_scale_reader", &Engine::set_loss_scale_reader)
      .def("set_compiled", &Engine::set_compiled)
      .def("note_backward_roots", &Engine::note_backward_roots)
      .def("rerunning", &Engine::rerunning)
      .def("model_training", &Engine::model_training);
}

// Distributed runs (nansense/_distributed.py): the engine's coordinator.
void bind_distributed(EngineClass& c) {
  c.def("join_run", &Engine::join_run, py::arg("host"), py::arg("port"), py::arg("rank"), py::arg("world"))
      .def("in_run", &Engine::in_run)
      .def("meet_after_batch", &Engine::meet_after_batch)
      .def("leave_run", &Engine::leave_run)
      .def("request_halt", &Engine::request_halt)
      .def("halted", &Engine::halted)
      .def("set_gradients_averaged", &Engine::set_gradients_averaged)
      .def("run_counts", &Engine::run_counts)
      .def("set_rank", &Engine::set_rank)
      .def("check_after_reduction", &Engine::check_after_reduction)
      .def("check_gradients_first", &Engine::check_gradients_first)
      .def("set_update_decided_callback", &Engine::set_update_decided_callback);
}

// Run control, the schedule, time travel, moments and what the session reports of them.
void bind_run_control(EngineClass& c) {
  c.def("url", &Engine::url)
      .def("state", &Engine::state)
      .def("mode", &Engine::mode)
      .def("wait_until_stopped", &Engine::wait_until_stopped)
      .def("live_position", &Engine::live_position)
      .def("snapshot", &Engine::snapshot)
      .def("layer_names", &Engine::layer_names)
      .def("internal_errors", &Engine::internal_errors)
      .def("schedule", &Engine::schedule)
      .def("set_schedule", &Engine::set_schedule)
      .def("open_epochs", &Engine::open_epochs)
      .def("start_epoch", &Engine::start_epoch)
      .def("end_epoch", &Engine::end_epoch)
      .def("abort_epochs", &Engine::abort_epochs)
      .def("request_time_travel", &Engine::request_time_travel)
      .def("time_travel_status", &Engine::time_travel_status)
      .def("freeze_moment", &Engine::freeze_moment)
      .def("lock", &Engine::lock)
      .def("locked", &Engine::locked)
      .def("park", &Engine::park)
      .def("begin_moment_replay", &Engine::begin_moment_replay)
      .def("end_moment_replay", &Engine::end_moment_replay)
      .def("abandon_moment_replay", &Engine::abandon_moment_replay)
      .def("step_batch", &Engine::step_batch)
      .def("step_phase", &Engine::step_phase)
      .def("step_epoch", &Engine::step_epoch)
      .def("run_until", &Engine::run_until)
      .def("run", &Engine::run)
      .def("detach", &Engine::detach)
      .def("pause", &Engine::pause)
      .def("refresh", &Engine::refresh)
      .def("pause_count", &Engine::pause_count)
      .def("wait_until_paused", &Engine::wait_until_paused);
}

// The numerical checks: their settings, the standing error and the loss scaler.
void bind_debug(EngineClass& c) {
  c.def("debug_error", &Engine::debug_error)
      .def("debug_settings", &Engine::debug_settings)
      .def("set_debug_settings", &Engine::set_debug_settings)
      .def("disable_debug_check", &Engine::disable_debug_check)
      .def("clear_debug_error", &Engine::clear_debug_error)
      .def("loss_scale", &Engine::loss_scale);
}

// Statistics settings, the statistics view and the instruments.
void bind_watching(EngineClass& c) {
  c.def("settings", &Engine::settings)
      .def("set_update_frequency", &Engine::set_update_frequency)
      .def("set_stats_scope", &Engine::set_stats_scope)
      .def("watch_layers", &Engine::watch_layers)
      .def("unwatch_layers", &Engine::unwatch_layers)
      .def("set_watch_performance", &Engine::set_watch_performance)
      .def("set_patch_layers", &Engine::set_patch_layers)
      .def("log_scalar", &Engine::log_scalar)
      .def("watch_metric", &Engine::watch_metric)
      .def("watch_layer_tensor", &Engine::watch_layer_tensor)
      .def("watch_weight_tensor", &Engine::watch_weight_tensor)
      .def("instrument_errors", &Engine::instrument_errors)
      .def("watch_snapshot", &Engine::watch_snapshot);
}

// Probes and experiments on the paused model.
void bind_experiments(EngineClass& c) {
  c.def("probe_status", &Engine::probe_status)
      .def("pin_batch", &Engine::pin_batch)
      .def("unpin_batch", &Engine::unpin_batch)
      .def("set_probe_mode", &Engine::set_probe_mode)
      .def("add_perturbation", &Engine::add_perturbation)
      .def("clear_perturbations", &Engine::clear_perturbations)
      .def("set_auto_run_experiments", &Engine::set_auto_run_experiments)
      .def("set_experiment_defaults", &Engine::set_experiment_defaults)
      .def("list_experiments", &Engine::list_experiments)
      .def("request_experiment", &Engine::request_experiment)
      .def("experiment_result", &Engine::experiment_result)
      .def("latest_experiment_seq", &Engine::latest_experiment_seq)
      .def("experiment_pending", &Engine::experiment_pending)
      .def("cancel_experiment", &Engine::cancel_experiment)
      .def("wait_for_experiment", &Engine::wait_for_experiment)
      .def("probe_result", &Engine::probe_result)
      .def("wait_for_probe", &Engine::wait_for_probe);
}

void bind_engine(py::module_& m) {
  EngineClass c(m, "Engine");
  c.def(py::init<const std::vector<ModuleSpec>&, std::optional<int64_t>, std::optional<PhaseCounts>>(),
        py::arg("modules"), py::arg("epochs"), py::arg("phases"))
      .def("serve", &Engine::serve, py::arg("port"), py::arg("host"), py::arg("open_browser"), py::arg("mcp"),
           py::arg("print_banner"), py::arg("input_mean"), py::arg("input_std"), py::arg("input_transform"));
  bind_training(c);
  bind_distributed(c);
  bind_run_control(c);
  bind_debug(c);
  bind_watching(c);
  bind_experiments(c);
}

}  // namespace
}  // namespace nansense::python

PYBIND11_MODULE(_nansense, m) {
  namespace python = nansense::python;
  m.doc() = "The native engine of the nansense Python package; use the nansense module.";
  m.attr("TORCH_VERSION") = NANSENSE_TORCH_VERSION;
  python::bind_errors(m);
  python::bind_positions(m);
  python::bind_stats(m);
  python::bind_runs(m);
  python::bind_capsules(m);
  python::bind_engine(m);
  m.def("histogram_edges", [] { return nansense::stats::bin_edges(); });
}
