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

#include <chrono>
#include <cstring>
#include <map>
#include <variant>
#include <optional>

#include "common/json_values.h"
#include "mirror.h"
#include "numerics/capsule.h"
#include "nansense/nansense.h"
#include "numerics/debug_json.h"
#include "session/session_access.h"

namespace py = pybind11;

namespace nansense::python {
namespace {

using MeanStd = std::variant<std::vector<double>, std::map<std::string, std::vector<double>>>;

py::object from_json(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

py::dict position_dict(const BatchPosition& p) { return from_json(common::to_json(p)); }

// Copies for Python: a snapshot's (or capsule's) tensors are the engine's
// own, shared by every reader; a user's in-place edit must not change them.
std::map<std::string, torch::Tensor> clones(const std::map<std::string, torch::Tensor>& in) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : in) out.emplace(name, t.defined() ? t.clone() : t);
  return out;
}
template <class Inner>
std::map<std::string, Inner> clones_nested(const std::map<std::string, Inner>& in) {
  std::map<std::string, Inner> out;
  for (const auto& [name, inner] : in) out.emplace(name, clones(inner));
  return out;
}
std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& in) {
  std::vector<torch::Tensor> out;
  out.reserve(in.size());
  for (const auto& t : in) out.push_back(t.defined() ? t.clone() : t);
  return out;
}

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
    core_->restorer().set_default_adapter(
        std::make_shared<PythonStateAdapter>(kind, std::move(save), std::move(load)));
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
  bool begin_batch(const std::string& phase, std::optional<int64_t> epoch, bool training) {
    // The engine saves and restores the train/eval flag with the weights.
    if (mirror_->is_training() != training) mirror_->train(training);
    bool capture;
    {
      py::gil_scoped_release release;
      capture = core_->begin_batch(phase, epoch);
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
  bool end_batch() {
    bool repeat;
    {
      py::gil_scoped_release release;
      repeat = core_->end_batch();
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
  py::object live_position() const {
    auto p = session_->live_position();
    return p ? py::object(position_dict(*p)) : py::none();
  }
  py::object snapshot() const {
    auto snap = session_->snapshot();
    if (!snap) return py::none();
    py::dict d;
    d["position"] = position_dict(snap->position);
    d["sequence"] = snap->sequence;
    d["activations"] = clones(snap->activations);
    d["activation_gradients"] = clones(snap->activation_gradients);
    d["weights"] = clones(snap->weights);
    d["weight_gradients"] = clones(snap->weight_gradients);
    d["optimizer_state"] = clones_nested(snap->optimizer_state);
    d["optimizer_hyperparams"] = snap->optimizer_hyperparams;
    d["inputs"] = clones(snap->inputs);
    py::list layers;
    if (snap->architecture) {
      for (const auto& l : snap->architecture->layers) layers.append(l.name);
    }
    d["layer_names"] = layers;
    return d;
  }
  std::vector<std::string> layer_names() const {
    std::vector<std::string> names;
    if (auto arch = session_->architecture()) {
      for (const auto& l : arch->layers) names.push_back(l.name);
    }
    return names;
  }
  std::vector<std::string> internal_errors() const { return core_->internal_errors(); }
  py::object schedule() const {
    const auto& s = session_->schedule();
    py::dict d;
    d["epochs"] = s.epochs() ? py::object(py::int_(*s.epochs())) : py::none();
    py::dict phases;
    for (const auto& [name, count] : s.phases()) phases[py::str(name)] = count;
    d["phases"] = phases;
    d["phase_order"] = s.phase_order();
    return d;
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
  py::dict time_travel_status() const {
    const auto s = session_->time_travel_status();
    py::dict d;
    d["available"] = s.available;
    d["reason"] = s.reason;
    d["cached_epochs"] = s.cached_epochs;
    d["total_epochs"] = s.total_epochs;
    d["current_epoch"] = s.current_epoch;
    d["pending_epoch"] = s.pending_epoch;
    d["cache_dir"] = s.cache_dir;
    return d;
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

  py::object debug_error() const {
    auto e = session_->debug_error();
    return e ? from_json(numerics::to_json(*e)) : py::none();
  }
  py::object debug_settings() const { return from_json(numerics::to_json(session_->debug_settings())); }
  // A partial update in DebugSettings' own names (the REST route's body).
  void set_debug_settings(const std::string& json) {
    auto merged = numerics::to_json(session_->debug_settings());
    merged.update(nlohmann::json::parse(json));
    session_->set_debug_settings(numerics::settings_from_json(merged));
  }
  void silence_debug_check(const std::string& category) { session_->silence_debug_check(category); }
  void clear_debug_error() { session_->clear_debug_error(); }

 private:
  // The exception a signal handler raised while the loop was paused, raised
  // now that the call returns to Python (the GIL is held again).
  void raise_pending() {
    if (!pending_) return;
    py::error_already_set error = std::move(*pending_);
    pending_.reset();
    throw error;
  }

  std::shared_ptr<torch::nn::Module> mirror_;
  std::unique_ptr<Session> session_;
  detail::SessionCore* core_ = nullptr;
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

}  // namespace
}  // namespace nansense::python

namespace {
// Leaked on purpose: a Python object must not be released after the
// interpreter is gone.
py::object* jump_type() {
  static auto* type = new py::object(py::none());
  return type;
}
}  // namespace

PYBIND11_MODULE(_nansense, m) {
  using nansense::python::Engine;
  using nansense::python::ModuleSpec;
  m.doc() = "The native engine of the nansense Python package; use the nansense module.";
  m.attr("TORCH_VERSION") = NANSENSE_TORCH_VERSION;

  // The engine's errors as Python exceptions of the matching built-in kinds.
  static py::exception<nansense::ScheduleError> schedule_error(m, "ScheduleError", PyExc_ValueError);
  static py::exception<nansense::ControlError> control_error(m, "ControlError", PyExc_RuntimeError);
  static py::exception<nansense::UsageError> usage_error(m, "UsageError", PyExc_RuntimeError);
  static py::exception<nansense::TimeTravelError> time_travel_error(m, "TimeTravelError", PyExc_RuntimeError);
  static py::exception<nansense::CapsuleError> capsule_error(m, "CapsuleError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nansense::ScheduleError& e) {
      schedule_error(e.what());
    } catch (const nansense::ControlError& e) {
      control_error(e.what());
    } catch (const nansense::UsageError& e) {
      usage_error(e.what());
    } catch (const nansense::TimeTravelError& e) {
      time_travel_error(e.what());
    } catch (const nansense::CapsuleError& e) {
      capsule_error(e.what());
    } catch (const nansense::TimeTravelJump& jump) {
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

  py::class_<ModuleSpec>(m, "ModuleSpec")
      .def(py::init([](std::string path, std::string kind, std::string description,
                       std::vector<std::pair<std::string, torch::Tensor>> parameters,
                       std::vector<std::pair<std::string, torch::Tensor>> buffers) {
             return ModuleSpec{std::move(path), std::move(kind), std::move(description), std::move(parameters),
                               std::move(buffers)};
           }),
           py::arg("path"), py::arg("kind"), py::arg("description"), py::arg("parameters"), py::arg("buffers"));

  using nansense::python::ReplayedCapsule;
  py::class_<ReplayedCapsule>(m, "ReplayedCapsule")
      .def_property_readonly("position",
                             [](const ReplayedCapsule& c) { return nansense::python::position_dict(c.capsule.position); })
      .def_property_readonly("batch", [](const ReplayedCapsule& c) { return nansense::python::clones(c.capsule.batch); })
      .def_property_readonly("gradients", [](const ReplayedCapsule& c) { return nansense::python::clones(c.capsule.gradients); })
      .def_property_readonly("reasons", [](const ReplayedCapsule& c) { return c.capsule.reasons; })
      .def_property_readonly("notes", [](const ReplayedCapsule& c) { return c.capsule.notes; })
      .def_property_readonly("num_threads", [](const ReplayedCapsule& c) { return c.capsule.num_threads; })
      .def_property_readonly("settings",
                             [](const ReplayedCapsule& c) {
                               return nansense::python::from_json(nansense::numerics::to_json(c.capsule.settings));
                             })
      .def("gradients_match", &ReplayedCapsule::gradients_match);
  m.def("replay_capsule", &nansense::python::replay, py::arg("path"), py::arg("modules"), py::arg("state_kind"),
        py::arg("load_state"));

  py::class_<Engine>(m, "Engine")
      .def(py::init<const std::vector<ModuleSpec>&, std::optional<int64_t>, std::optional<nansense::PhaseCounts>>(),
           py::arg("modules"), py::arg("epochs"), py::arg("phases"))
      .def("serve", &Engine::serve, py::arg("port"), py::arg("host"), py::arg("open_browser"), py::arg("mcp"),
           py::arg("print_banner"), py::arg("input_mean"), py::arg("input_std"), py::arg("input_transform"))
      .def("set_model", &Engine::set_model)
      .def("set_state_adapter", &Engine::set_state_adapter)
      .def("set_optimizer_reader", &Engine::set_optimizer_reader)
      .def("begin_batch", &Engine::begin_batch)
      .def("set_inputs", &Engine::set_inputs)
      .def("set_module_scope", &Engine::set_module_scope)
      .def("record_item", &Engine::record_item)
      .def("end_batch", &Engine::end_batch)
      .def("abandon_batch", &Engine::abandon_batch)
      .def("end_phase", &Engine::end_phase)
      .def("close", &Engine::close)
      .def("mark_lost", &Engine::mark_lost)
      .def("url", &Engine::url)
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
      .def("step_batch", &Engine::step_batch)
      .def("step_phase", &Engine::step_phase)
      .def("step_epoch", &Engine::step_epoch)
      .def("run_until", &Engine::run_until)
      .def("run", &Engine::run)
      .def("detach", &Engine::detach)
      .def("pause", &Engine::pause)
      .def("refresh", &Engine::refresh)
      .def("debug_error", &Engine::debug_error)
      .def("debug_settings", &Engine::debug_settings)
      .def("set_debug_settings", &Engine::set_debug_settings)
      .def("silence_debug_check", &Engine::silence_debug_check)
      .def("clear_debug_error", &Engine::clear_debug_error);
}
