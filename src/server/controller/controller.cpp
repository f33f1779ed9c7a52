#include "server/controller/controller.h"

#include <algorithm>

#include "common/dtype.h"
#include "common/tensor_stats.h"
#include "nansense/errors.h"
#include "render/input_image.h"
#include "session/session_port.h"

namespace nansense::server {

namespace {

json summary(const torch::Tensor& t) { return common::to_json(common::tensor_stats(t)); }

// render_strip's kind for a layer-tensor instrument's output: "instrument:<name>".
const std::string kInstrumentKind = "instrument:";

// A layer's tensor summarised over the whole batch: the statistics taken
// before the snapshot budget trimmed it, else its copy (which is whole).
json summary(const std::map<std::string, torch::Tensor>& tensors, const std::map<std::string, TensorStats>& whole,
             const std::string& name) {
  if (auto s = whole.find(name); s != whole.end()) return common::to_json(s->second);
  auto t = tensors.find(name);
  return t != tensors.end() ? summary(t->second) : json(nullptr);
}

int64_t batch_size_of(const BatchSnapshot& snap) {
  if (snap.batch_size > 0) return snap.batch_size;
  return !snap.inputs.empty() && snap.inputs[0].dim() > 0 ? snap.inputs[0].size(0) : 0;
}

// Refuses a sample the snapshot budget left out, saying how to keep it.
void require_kept(const BatchSnapshot& snap, int64_t sample) {
  if (!snap.trimmed() || sample < snap.samples_kept || sample >= snap.batch_size) return;
  throw Refusal(Refusal::Kind::kInvalidArgument,
                "sample " + std::to_string(sample) + " was not kept: the snapshot at " + snap.position.to_string() +
                    " holds samples 0.." + std::to_string(snap.samples_kept - 1) + " of " +
                    std::to_string(snap.batch_size) + " (snapshot budget " + mib(snap.budget_bytes) + "; all " +
                    std::to_string(snap.batch_size) + " would take " + mib(snap.full_bytes) +
                    "). StartOptions().snapshot_budget(bytes) raises the budget, 0 keeps every sample",
                "sample");
}

// Draws a picture of `snap`; a refusal of it when the caller shows another
// snapshot (`shown`) is about a snapshot the caller has not seen yet.
template <class Draw>
auto drawn_for(const BatchSnapshot& snap, std::optional<uint64_t> shown, Draw&& draw) {
  try {
    return draw();
  } catch (const Refusal& e) {
    if (shown && *shown != snap.sequence) throw SnapshotReplaced(*shown, snap.sequence, e.what());
    throw;
  }
}

}  // namespace

namespace {
thread_local const std::string* current_visitor = nullptr;
const std::string kNoVisitor;
}  // namespace

VisitorScope::VisitorScope(std::string visitor) : visitor_(std::move(visitor)), previous_(current_visitor) {
  current_visitor = &visitor_;
}

VisitorScope::~VisitorScope() { current_visitor = previous_; }

const std::string& VisitorScope::current() { return current_visitor ? *current_visitor : kNoVisitor; }

Controller::Controller(detail::SessionPort& session)
    : session_(session),
      run_(*this, session),
      views_(*this, session),
      weights_(*this),
      stats_(*this, session),
      patches_(*this, session),
      experiments_(*this, session),
      probes_(session),
      debug_(session),
      recordings_(*this, session) {}

Controller::~Controller() = default;

RunArea::RunArea(Controller& owner, detail::SessionPort& session) : owner_(owner), session_(session) {}

ViewArea::ViewArea(Controller& owner, detail::SessionPort& session) : owner_(owner), session_(session) {}

bool Controller::locked() const { return session_.locked(); }

std::shared_ptr<const BatchSnapshot> Controller::shown_snapshot() const {
  if (session_.locked()) {
    const std::string& visitor = VisitorScope::current();
    if (!visitor.empty()) {
      auto live = session_.snapshot();
      if (auto own = session_.visitor_snapshot(visitor, live)) return own;
      return live;
    }
  }
  return session_.snapshot();
}

bool Controller::has_own_view(const std::string& visitor) const {
  return !visitor.empty() && session_.locked() && session_.probe_view(visitor).has_value();
}

Status RunArea::get_status() const {
  Status status;
  status.state = session_.state();
  status.mode = session_.mode();
  status.live_position = session_.live_position();
  status.live_trainer_step = session_.trainer_step();
  if (auto snap = owner_.shown_snapshot()) {
    status.snapshot_trainer_step = snap->trainer_step;
    status.snapshot_position = snap->position;
    status.snapshot_sequence = snap->sequence;
    status.snapshot_batch_size = batch_size_of(*snap);
    status.snapshot_samples_kept = snap->trimmed() ? snap->samples_kept : status.snapshot_batch_size;
  }
  status.schedule = schedule_summary(session_.schedule());
  if (auto since = session_.paused_since()) {
    status.paused_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(since->time_since_epoch()).count();
  }
  status.time_travel = time_travel_summary();
  if (status.state == RunState::kLost) status.lost_reason = session_.lost_reason();
  if (auto errors = session_.internal_errors(); !errors.empty()) status.internal_errors = std::move(errors);
  status.debug = owner_.debug().summary();
  status.stats = owner_.stats().summary();
  status.probe = owner_.probes().get_probe_status();
  status.locked = session_.locked();
  status.hint = status_hint(status.state, status.locked);
  status.front_end = session_.front_end();
  status.recordings = owner_.recordings().recording_keys();
  status.fixed = owner_.recordings().fixed_settings();
  return status;
}

ArchitectureView ViewArea::get_architecture() const {
  auto arch = session_.architecture();
  if (!arch) {
    ArchitectureView none;
    none.reason = "no batch has been captured yet: the graph appears once the first batch pauses";
    none.edges.emplace();
    return none;
  }
  return architecture_view(*arch);
}

std::shared_ptr<const BatchSnapshot> Controller::require_snapshot() const {
  auto snap = shown_snapshot();
  if (!snap) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "no snapshot yet: the first captured batch publishes one (the run pauses there)");
  }
  return snap;
}

SnapshotSummary ViewArea::get_snapshot() const {
  auto snap = owner_.require_snapshot();
  {
    std::lock_guard lock(cache_mu_);
    if (cached_snapshot_ && cached_sequence_ == snap->sequence) return *cached_snapshot_;
  }
  auto out = std::make_shared<SnapshotSummary>();
  for (const auto& layer : snap->architecture->layers) {
    SnapshotLayer& entry = out->layers.emplace_back();
    entry.name = layer.name;
    entry.kind = layer.kind;
    entry.activation = summary(snap->activations, snap->activation_stats, layer.name);
    entry.gradient = summary(snap->activation_gradients, snap->activation_gradient_stats, layer.name);
    if (auto in = snap->custom_activations.find(layer.name); in != snap->custom_activations.end()) {
      auto& instruments = entry.instruments.emplace();
      for (const auto& [name, t] : in->second) instruments[name] = summary(t);
    }
  }
  for (const auto& [name, w] : snap->weights) {
    SnapshotParameter& entry = out->parameters.emplace_back();
    entry.name = name;
    entry.weight = summary(w);
    if (auto g = snap->weight_gradients.find(name); g != snap->weight_gradients.end())
      entry.gradient = summary(g->second);
    if (auto st = snap->optimizer_state.find(name); st != snap->optimizer_state.end()) {
      auto& state = entry.optimizer_state.emplace();
      for (const auto& [key, t] : st->second) state[key] = t.dim() == 0 ? number(t.item<double>()) : summary(t);
    }
    if (auto hp = snap->optimizer_hyperparams.find(name); hp != snap->optimizer_hyperparams.end()) {
      auto& hyper = entry.hyperparameters.emplace();
      for (const auto& [key, v] : hp->second) hyper[key] = number(v);
    }
  }
  const auto& names = snap->architecture->inputs;
  for (size_t i = 0; i < snap->inputs.size(); ++i) {
    const auto& t = snap->inputs[i];
    out->inputs.push_back({static_cast<int64_t>(i), i < names.size() ? names[i] : "input_" + std::to_string(i),
                           t.sizes().vec(), common::dtype_name(t.scalar_type())});
  }
  out->position = to_json(snap->position);
  out->sequence = snap->sequence;
  out->batch_size = batch_size_of(*snap);
  out->samples_kept = snap->trimmed() ? snap->samples_kept : out->batch_size;
  out->budget = budget_of(*snap);
  if (snap->probe) {
    out->probe = SnapshotProbe{snap->probe->run, to_json(snap->probe->position), snap->probe->mode, snap->probe->diff};
  }
  std::lock_guard lock(cache_mu_);
  cached_sequence_ = snap->sequence;
  cached_snapshot_ = out;
  return *out;
}

std::shared_ptr<const StripPicture> ViewArea::render_strip(const std::string& layer, const std::string& kind,
                                                           const render::StripOptions& options,
                                                           std::optional<uint64_t> shown) const {
  auto snap = owner_.require_snapshot();
  return drawn_for(*snap, shown, [&] { return draw_strip(snap, layer, kind, options); });
}

std::shared_ptr<const StripPicture> ViewArea::draw_strip(const std::shared_ptr<const BatchSnapshot>& snap,
                                                         const std::string& layer, const std::string& kind,
                                                         const render::StripOptions& options) const {
  if (!snap->architecture->find(layer)) {
    std::string known;
    for (const auto& l : snap->architecture->layers) known += (known.empty() ? "" : ", ") + l.name;
    throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + layer + "\"; layers: " + known, "layer");
  }
  const std::string key = std::to_string(snap->sequence) + "|" + layer + "|" + kind + "|" +
                          std::to_string(options.sample) + "|" + (options.average ? "avg" : "all") + "|" +
                          std::string(render::to_string(options.values));
  return strip_cache_.get_or_compute(key, [&]() -> std::shared_ptr<const StripPicture> {
    const torch::Tensor* tensor = nullptr;
    if (kind.rfind(kInstrumentKind, 0) == 0) {
      const std::string name = kind.substr(kInstrumentKind.size());
      auto outputs = snap->custom_activations.find(layer);
      if (outputs != snap->custom_activations.end()) {
        if (auto t = outputs->second.find(name); t != outputs->second.end()) tensor = &t->second;
      }
      if (!tensor) {
        throw Refusal(Refusal::Kind::kNotFound,
                      "layer \"" + layer + "\" has no output of the layer-tensor instrument \"" + name +
                          "\" in the batch at " + snap->position.to_string() +
                          " (instruments run for the layers the statistics collect, on captured batches)",
                      "instrument");
      }
    } else {
      const auto& tensors = kind == "gradient" ? snap->activation_gradients : snap->activations;
      auto it = tensors.find(layer);
      if (it == tensors.end()) {
        if (snap->probe) {
          throw Refusal(Refusal::Kind::kNotFound, kind == "gradient"
                                                      ? "no gradients on probe runs: a probe runs the forward only"
                                                      : "layer \"" + layer + "\" did not run in the probe's forward (" +
                                                            snap->probe->mode + " mode)");
        }
        throw Refusal(Refusal::Kind::kNotFound, "layer \"" + layer + "\" has no " + kind + " in the batch at " +
                                                    snap->position.to_string() +
                                                    (kind == "gradient" ? " (no backward ran through it)" : ""));
      }
      tensor = &it->second;
    }
    require_kept(*snap, options.sample);
    render::Strip strip;
    try {
      strip = render::render_strip(*tensor, options);
    } catch (const std::invalid_argument& e) {
      throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
    }
    auto out = std::make_shared<StripPicture>();
    out->png = render::encode_png(strip.image);
    out->layer = layer;
    out->kind = kind;
    out->position = snap->position;
    out->sequence = snap->sequence;
    out->options = options;
    out->drawn = strip.info;
    // The batch's size, not the samples the budget kept of it.
    if (snap->trimmed() && strip.info.batch_size == snap->samples_kept) out->drawn.batch_size = snap->batch_size;
    out->width = strip.image.width;
    out->height = strip.image.height;
    return out;
  });
}

uint64_t Controller::snapshot_sequence() const {
  auto snap = shown_snapshot();
  return snap ? snap->sequence : 0;
}

std::shared_ptr<const InputPicture> ViewArea::render_input(int64_t input, int64_t sample,
                                                           std::optional<uint64_t> shown) const {
  auto snap = owner_.require_snapshot();
  return drawn_for(*snap, shown, [&] { return draw_input(snap, input, sample); });
}

std::shared_ptr<const InputPicture> ViewArea::draw_input(const std::shared_ptr<const BatchSnapshot>& snap,
                                                         int64_t input, int64_t sample) const {
  const auto count = static_cast<int64_t>(snap->inputs.size());
  if (count == 0) {
    throw Refusal(Refusal::Kind::kNotFound, "the batch at " + snap->position.to_string() + " recorded no tensor input");
  }
  if (input < 0 || input >= count) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "input " + std::to_string(input) + " is out of range: the model has " + std::to_string(count) +
                      " input" + (count == 1 ? "" : "s") + " (0.." + std::to_string(count - 1) + ")",
                  "input");
  }
  const auto& names = snap->architecture->inputs;
  const std::string name =
      static_cast<size_t>(input) < names.size() ? names[static_cast<size_t>(input)] : "input_" + std::to_string(input);
  const std::string key =
      std::to_string(snap->sequence) + "|input|" + std::to_string(input) + "|" + std::to_string(sample);
  if (auto hit = input_cache_.find(key)) return hit;
  const auto& display = session_.display_options();
  render::InputImageOptions options;
  options.sample = sample;
  options.mean = display.input_mean().for_input(name);
  options.std = display.input_std().for_input(name);
  options.transform = display.input_transform().for_input(name);
  require_kept(*snap, sample);
  render::InputImage image;
  try {
    image = render::render_input(snap->inputs[static_cast<size_t>(input)], options);
  } catch (const std::invalid_argument& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    // The user's transform threw: say so instead of failing the request.
    throw Refusal(Refusal::Kind::kInvalidArgument, "the input transform for \"" + name + "\" failed: " + e.what());
  }
  auto out = std::make_shared<InputPicture>();
  out->png = render::encode_png(image.image);
  out->input = input;
  out->name = name;
  out->position = snap->position;
  out->sequence = snap->sequence;
  out->sample = sample;
  out->batch_size = snap->trimmed() ? snap->batch_size : image.batch_size;
  out->layout = image.layout;
  out->mean = options.mean;
  out->std = options.std;
  out->width = image.image.width;
  out->height = image.image.height;
  out->hint = image.hint;
  out->dtype = image.dtype;
  out->value_min = image.value_min;
  out->value_max = image.value_max;
  out->true_count = image.true_count;
  input_cache_.put(key, out);
  return out;
}

uint64_t RunArea::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  return session_.wait_for_change(seen, timeout);
}

void RunArea::wake_watchers() { session_.notify_changed(); }

template <class F>
Status RunArea::command(F&& apply, Wait wait) {
  const auto state = session_.state();
  if (state == RunState::kFinished || state == RunState::kLost) {
    throw Refusal(Refusal::Kind::kConflict,
                  state == RunState::kFinished
                      ? "training has finished: nothing left to run; the last captured batch stays available"
                      : "the training loop was lost (" + session_.lost_reason() + "): nothing left to control");
  }
  try {
    apply();
  } catch (const ControlError& e) {
    throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
  }
  if (wait.count() > 0) session_.wait_until_stopped(wait);
  return get_status();
}

Status RunArea::step(const std::string& unit, Wait wait) {
  if (unit == "batch") return command([&] { session_.step_batch(); }, wait);
  if (unit == "phase") return command([&] { session_.step_phase(); }, wait);
  if (unit == "epoch") return command([&] { session_.step_epoch(); }, wait);
  throw std::logic_error("step: undeclared unit \"" + unit + "\"");  // the declaration admits no other
}

Status RunArea::run(bool detach, Wait wait) {
  // A detached run never pauses again: there is nothing to wait for.
  if (detach) return command([&] { session_.detach(); }, Wait(0));
  return command([&] { session_.run(); }, wait);
}

Status RunArea::pause(Wait wait) {
  return command([&] { session_.pause(); }, wait);
}

Status RunArea::run_until(const std::string& phase, int64_t epoch, int64_t batch, Wait wait) {
  BatchPosition target;
  target.phase = phase;
  target.epoch = epoch;
  target.batch_idx = batch;
  return command([&] { session_.run_until(target); }, wait);
}

Status RunArea::time_travel(int64_t epoch, Wait wait) {
  return command(
      [&] {
        if (const auto status = session_.time_travel_status(); !status.available) {
          throw Refusal(Refusal::Kind::kConflict, status.reason);
        }
        try {
          session_.request_time_travel(epoch);
        } catch (const TimeTravelError& e) {
          throw Refusal(Refusal::Kind::kInvalidArgument, e.what());
        }
      },
      wait);
}

Status RunArea::refresh(Wait wait) {
  const uint64_t seq = owner_.snapshot_sequence();
  Status status = command([&] { session_.refresh(); }, Wait(0));
  if (wait.count() > 0 && status.state == RunState::kRunning) {
    const bool refreshed = session_.wait_for_snapshot_after(seq, wait);
    status = get_status();
    status.refreshed = refreshed;
  } else {
    status.refreshed = false;
  }
  return status;
}

}  // namespace nansense::server
