#include "experiments/probe.h"

#include <cmath>
#include <sstream>

#include "capture/tracer.h"
#include "observer/observer.h"
#include "state/isolation.h"
#include "state/rng_state.h"

namespace nansense::experiments {

namespace {

using Kind = common::Refusal::Kind;

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t d = 0; d < t.dim(); ++d) out << (d ? ", " : "") << t.size(d);
  out << "]";
  return out.str();
}

std::string index_text(const std::vector<int64_t>& index) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < index.size(); ++i) out << (i ? ", " : "") << index[i];
  out << "]";
  return out.str();
}

// Two perturbations of the same input value.
bool same_place(const Perturbation& a, const Perturbation& b) {
  return a.input == b.input && a.sample == b.sample && a.index == b.index;
}

struct Traced {
  std::shared_ptr<const Architecture> architecture;
  std::map<std::string, torch::Tensor> activations;  // CPU copies
};

// One traced forward of `inputs` (the model's mode and grad mode as set).
Traced trace_forward(torch::nn::Module& model, const ForwardFn& forward, const std::vector<torch::Tensor>& inputs) {
  observer::Observer observer;
  capture::Tracer tracer(model, observer,
                         capture::Tracer::Keep{.cpu = true, .device = false, .device_layer = nullptr, .take = nullptr});
  tracer.set_inputs(inputs, /*stacked=*/false);
  torch::Tensor out = forward(inputs);
  if (!out.defined()) throw std::runtime_error("the model's forward returned no tensor");
  auto result = tracer.finish();
  if (!result->error.empty()) throw std::runtime_error(result->error);
  Traced traced;
  traced.architecture = result->architecture;
  std::lock_guard lock(result->grad_mu);
  traced.activations = result->activations;
  return traced;
}

}  // namespace

const char* probe_mode_name(ProbeMode mode) {
  switch (mode) {
    case ProbeMode::kUnchanged:
      return "unchanged";
    case ProbeMode::kEval:
      return "eval";
    case ProbeMode::kTrain:
      return "train";
  }
  return "unchanged";
}

std::optional<ProbeMode> parse_probe_mode(std::string_view name) {
  if (name == "unchanged") return ProbeMode::kUnchanged;
  if (name == "eval") return ProbeMode::kEval;
  if (name == "train") return ProbeMode::kTrain;
  return std::nullopt;
}

void check_perturbation(const Perturbation& p, const std::vector<torch::Tensor>& inputs) {
  const auto refuse = [](const std::string& why, const char* argument) {
    return Refusal(Kind::kInvalidArgument, why, argument);
  };
  const auto n = static_cast<int64_t>(inputs.size());
  if (n == 0) throw refuse("the batch has no tensor input to perturb", "input_name");
  if (p.input < 0 || p.input >= n) {
    throw refuse("input " + std::to_string(p.input) + " does not exist: the model has " + std::to_string(n) + " input" +
                     (n == 1 ? "" : "s") + " (0.." + std::to_string(n - 1) + ")",
                 "input_name");
  }
  const torch::Tensor& t = inputs[static_cast<size_t>(p.input)];
  const std::string which = "input " + std::to_string(p.input) + " (shape " + shape_text(t) + ")";
  if (!t.defined() || !t.is_floating_point()) {
    throw refuse(which + " is not floating point: only float inputs can be perturbed", "input_name");
  }
  if (t.dim() < 2 || t.dim() > 4) {
    throw refuse(which +
                     ": perturbations apply to images [N,C,H,W] or [N,H,W] and to flat inputs "
                     "[N,F]",
                 "input_name");
  }
  if (p.sample < 0 || p.sample >= t.size(0)) {
    throw refuse("sample " + std::to_string(p.sample) + " is out of range for " + which +
                     ": the batch holds samples 0.." + std::to_string(t.size(0) - 1),
                 "sample");
  }
  const size_t want_index = t.dim() == 2 ? 1 : 2;
  const std::string index_form = t.dim() == 2 ? "[feature]" : "[y, x]";
  if (p.index.size() != want_index) {
    throw refuse("index " + index_text(p.index) + " does not fit " + which + ": it takes " + index_form, "index");
  }
  for (size_t i = 0; i < p.index.size(); ++i) {
    const int64_t size = t.size(static_cast<int64_t>(t.dim() - p.index.size() + i));
    if (p.index[i] < 0 || p.index[i] >= size) {
      throw refuse("index " + index_text(p.index) + " is out of range for " + which + ": " + index_form + " with " +
                       (t.dim() == 2 ? "feature" : (i == 0 ? "y" : "x")) + " in 0.." + std::to_string(size - 1),
                   "index");
    }
  }
  const int64_t channels = t.dim() == 4 ? t.size(1) : 1;
  const auto count = static_cast<int64_t>(p.values.size());
  if (count != 1 && count != channels) {
    throw refuse(std::to_string(count) + " values do not fit " + which + ": give " +
                     (channels == 1 ? std::string("1 value")
                                    : "1 value (every channel) or " + std::to_string(channels) + " (one per channel)"),
                 "values");
  }
  for (double v : p.values) {
    if (!std::isfinite(v)) throw refuse("perturbation values must be finite numbers", "values");
  }
}

std::vector<torch::Tensor> perturbed(const std::vector<torch::Tensor>& inputs,
                                     const std::vector<Perturbation>& perturbations, int64_t* applied) {
  std::vector<torch::Tensor> out = inputs;
  std::vector<bool> copied(inputs.size(), false);
  torch::NoGradGuard no_grad;
  if (applied) *applied = 0;
  for (const auto& p : perturbations) {
    try {
      check_perturbation(p, out);
    } catch (const Refusal&) {
      continue;
    }
    if (applied) ++*applied;
    auto i = static_cast<size_t>(p.input);
    if (!copied[i]) {
      out[i] = out[i].clone();
      copied[i] = true;
    }
    torch::Tensor sample = out[i][p.sample];
    if (out[i].dim() == 2) {
      sample[p.index[0]].fill_(p.values[0]);
    } else if (out[i].dim() == 3) {
      sample[p.index[0]][p.index[1]].fill_(p.values[0]);
    } else {
      const int64_t channels = sample.size(0);
      for (int64_t c = 0; c < channels; ++c) {
        const double v = p.values.size() == 1 ? p.values[0] : p.values[static_cast<size_t>(c)];
        sample[c][p.index[0]][p.index[1]].fill_(v);
      }
    }
  }
  return out;
}

Probes::Probes(torch::nn::Module& model, Host host) : model_(model), host_(std::move(host)) {}

void Probes::require_pause(const char* what) const {
  if (host_.ended) {
    if (auto why = host_.ended(); !why.empty()) throw Refusal(Kind::kConflict, std::string(what) + ": " + why);
  }
  if (!host_.paused || !host_.paused()) {
    throw Refusal(Kind::kConflict, std::string(what) + ": probes run on the paused model; pause the loop first");
  }
  if (host_.in_batch_pause && host_.in_batch_pause()) {
    throw Refusal(Kind::kConflict, std::string(what) +
                                       ": the loop is paused inside a traced batch (a numerical check stopped it "
                                       "before the optimizer step); step once, then probe");
  }
}

BatchPosition Probes::pin() {
  require_pause("cannot pin the batch");
  auto snap = host_.snapshot ? host_.snapshot() : nullptr;
  if (!snap || snap->inputs.empty()) throw Refusal(Kind::kConflict, "nothing to pin yet: no batch was captured");
  std::lock_guard lock(mu_);
  settings_.pinned = true;
  settings_.pinned_position = snap->position;
  pinned_inputs_ = snap->inputs;
  pinned_sequence_ = snap->sequence;
  // Perturbations were checked against the inputs they change: those the
  // pinned batch cannot hold (a sample past a smaller batch's end) go.
  std::vector<Perturbation> kept;
  for (const auto& p : settings_.perturbations) {
    try {
      check_perturbation(p, pinned_inputs_);
      kept.push_back(p);
    } catch (const Refusal&) {
    }
  }
  settings_.perturbations = std::move(kept);
  mark_changed_locked();
  request_run_locked();
  return snap->position;
}

bool Probes::unpin() {
  std::lock_guard lock(mu_);
  if (!settings_.pinned) return false;
  settings_.pinned = false;
  settings_.pinned_position.reset();
  pinned_inputs_.clear();
  mark_changed_locked();
  if (!settings_.active()) {
    deactivated_locked();
  } else if (host_.paused && host_.paused()) {
    request_run_locked();
  }
  return true;
}

void Probes::set_mode(ProbeMode mode) {
  {
    std::lock_guard lock(mu_);
    if (settings_.mode == mode) return;
  }
  if (mode != ProbeMode::kUnchanged) require_pause("cannot change the forward mode");
  std::lock_guard lock(mu_);
  settings_.mode = mode;
  mark_changed_locked();
  if (!settings_.active()) {
    deactivated_locked();
  } else if (host_.paused && host_.paused()) {
    request_run_locked();
  }
}

void Probes::add_perturbation(const Perturbation& p) {
  require_pause("cannot perturb the input");
  auto snap = host_.snapshot ? host_.snapshot() : nullptr;
  std::lock_guard lock(mu_);
  if (!settings_.pinned && (!snap || snap->inputs.empty())) {
    throw Refusal(Kind::kConflict, "nothing to perturb yet: no batch was captured");
  }
  check_perturbation(p, base_inputs_locked(snap.get()));
  auto& list = settings_.perturbations;
  bool replaced = false;
  for (auto& q : list) {
    if (same_place(q, p)) {
      q = p;
      replaced = true;
    }
  }
  if (!replaced) list.push_back(p);
  mark_changed_locked();
  request_run_locked();
}

int64_t Probes::clear_perturbations() {
  std::lock_guard lock(mu_);
  const auto n = static_cast<int64_t>(settings_.perturbations.size());
  if (n == 0) return 0;
  settings_.perturbations.clear();
  mark_changed_locked();
  if (!settings_.active()) {
    deactivated_locked();
  } else if (host_.paused && host_.paused()) {
    request_run_locked();
  }
  return n;
}

ProbeSettings Probes::settings() const {
  std::lock_guard lock(mu_);
  return settings_;
}

std::shared_ptr<const ProbeResult> Probes::result() const {
  std::lock_guard lock(mu_);
  return result_;
}

uint64_t Probes::runs_completed() const {
  std::lock_guard lock(mu_);
  return runs_;
}

bool Probes::pending() const {
  std::lock_guard lock(mu_);
  return queued_ || running_;
}

uint64_t Probes::settings_generation() const {
  std::lock_guard lock(mu_);
  return settings_generation_;
}

std::shared_ptr<const ProbeResult> Probes::wait_for_settings(uint64_t generation,
                                                             std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_generation_ >= generation || !settings_.active() || closed_; });
  return result_;
}

uint64_t Probes::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::shared_ptr<const ProbeResult> Probes::wait_for_run_after(uint64_t run, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return runs_ > run || closed_; });
  return result_;
}

std::vector<torch::Tensor> Probes::base_inputs_locked(const BatchSnapshot* snap) const {
  if (settings_.pinned) return pinned_inputs_;
  if (!snap) return {};
  return snap->inputs;
}

void Probes::deactivated_locked() {
  result_.reset();
  if (showing_ && host_.show) host_.show(nullptr);
  showing_ = false;
}

void Probes::mark_changed_locked() {
  ++version_;
  cv_.notify_all();
}

void Probes::request_run_locked() {
  ++settings_generation_;
  if (queued_ || !host_.post) return;
  queued_ = true;
  try {
    host_.post([this] { run_now(); });
  } catch (const std::exception&) {
    // The run ended: nothing will run it.
    queued_ = false;
  }
}

void Probes::snapshot_published() {
  {
    std::lock_guard lock(mu_);
    if (!settings_.active()) return;
  }
  run_now();
}

void Probes::run_now() {
  ProbeSettings settings;
  std::vector<torch::Tensor> base;
  std::shared_ptr<const BatchSnapshot> snap = host_.snapshot ? host_.snapshot() : nullptr;
  uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    queued_ = false;
    if (!settings_.active() || closed_) return;
    settings = settings_;
    generation = settings_generation_;
    running_ = true;
    base = base_inputs_locked(snap.get());
  }
  auto r = std::make_shared<ProbeResult>();
  r->settings = settings;
  r->snapshot_sequence = snap ? snap->sequence : 0;
  r->position = settings.pinned && settings.pinned_position ? *settings.pinned_position
                                                            : (snap ? snap->position : BatchPosition{});
  try {
    if (base.empty()) throw std::runtime_error("no captured batch to re-run");
    ForwardFn forward = host_.forward ? host_.forward() : ForwardFn{};
    if (!forward) {
      throw std::runtime_error(
          "probes need the model's forward: start() sets it for a TORCH_MODULE whose forward "
          "takes one tensor or two; otherwise call session.set_forward(...)");
    }
    if (observer::Observer::active()) {
      throw std::runtime_error("a batch is being traced: probes run between batches");
    }
    const torch::Device device = state::device_of(model_);
    std::vector<torch::Tensor> inputs;
    for (const auto& t : base) inputs.push_back(t.to(device));
    std::vector<torch::Tensor> changed;
    int64_t applied = 0;
    if (!settings.perturbations.empty()) {
      changed = perturbed(inputs, settings.perturbations, &applied);
      if (applied == 0) changed.clear();  // none fits this batch: the plain run
    }

    Traced plain;
    Traced probed;
    {
      state::ModelIsolation isolation(model_);  // eval mode now
      if (settings.mode == ProbeMode::kUnchanged) isolation.reapply_training_flags();
      if (settings.mode == ProbeMode::kTrain) model_.train(true);
      torch::NoGradGuard no_grad;
      // Both forwards start from the same RNG state (dropout draws the same
      // masks): the difference is the perturbation's alone.
      const state::RngState rng = state::RngState::capture();
      plain = trace_forward(model_, forward, inputs);
      if (!changed.empty()) {
        rng.apply();
        probed = trace_forward(model_, forward, changed);
      }
    }

    auto view = std::make_shared<BatchSnapshot>();
    // Shown in the live snapshot's place: its position, a sequence of its own.
    view->position = snap ? snap->position : r->position;
    view->sequence = host_.next_sequence ? host_.next_sequence() : r->snapshot_sequence;
    // The live layers (a layer the probe's forward skipped has no activation).
    view->architecture = snap && snap->architecture ? snap->architecture : plain.architecture;
    view->probe = BatchSnapshot::Probe{0, r->position, probe_mode_name(settings.mode), !changed.empty()};
    if (snap) {
      view->weights = snap->weights;
      view->weight_gradients = snap->weight_gradients;
      view->optimizer_state = snap->optimizer_state;
      view->optimizer_hyperparams = snap->optimizer_hyperparams;
    }
    const std::vector<torch::Tensor>& shown = changed.empty() ? inputs : changed;
    for (const auto& t : shown) view->inputs.push_back(t.to(torch::kCPU));
    if (changed.empty()) {
      view->activations = std::move(plain.activations);
    } else {
      r->diff = true;
      r->perturbations_applied = applied;
      for (auto& [name, after] : probed.activations) {
        auto it = plain.activations.find(name);
        if (it == plain.activations.end() || !it->second.sizes().equals(after.sizes()) || !after.is_floating_point()) {
          continue;
        }
        view->activations[name] = after - it->second;
      }
      // Input layers show what the model saw: the perturbed input itself.
      if (plain.architecture) {
        size_t i = 0;
        for (const auto& l : plain.architecture->layers) {
          if (l.role != LayerInfo::Role::kInput) continue;
          if (i < view->inputs.size()) view->activations[l.name] = view->inputs[i];
          ++i;
        }
      }
    }
    view->batch_size = view->inputs.empty() || view->inputs.front().dim() == 0 ? 0 : view->inputs.front().size(0);
    view->samples_kept = view->batch_size;
    r->view = std::move(view);
  } catch (const std::exception& e) {
    r->error = e.what();
  } catch (...) {
    r->error = "the probe failed";
  }
  publish(std::move(r), generation);
}

void Probes::publish(std::shared_ptr<const ProbeResult> result, uint64_t generation) {
  {
    std::lock_guard lock(mu_);
    const uint64_t run = ++runs_;
    running_ = false;
    done_generation_ = std::max(done_generation_, generation);
    // Settings changed to inactive while it ran: nothing to show.
    if (settings_.active()) {
      auto r = std::make_shared<ProbeResult>(*result);
      r->run = run;
      if (r->view) {
        auto view = std::make_shared<BatchSnapshot>(*r->view);
        view->probe->run = run;
        r->view = std::move(view);
      }
      // A failed run shows the live snapshot (its error is in the status).
      if (host_.show && (r->view || showing_)) host_.show(r->view);
      showing_ = r->view != nullptr;
      result_ = std::move(r);
    }
    mark_changed_locked();
  }
  if (host_.changed) host_.changed();
}

void Probes::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

}  // namespace nansense::experiments
