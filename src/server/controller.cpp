#include "server/controller.h"

#include <algorithm>

#include "nansense/errors.h"
#include "render/input_image.h"
#include "session/session_core.h"

namespace nansense::server {

namespace {

const char* hint(RunState state) {
  switch (state) {
    case RunState::kPaused: return "paused: inspect the layers, then step or run";
    case RunState::kRunning: return "running: pause to stop at the next batch";
    case RunState::kFinished: return "training finished: the last captured batch stays available";
    case RunState::kLost: return "the training loop exited without close(): see lost_reason";
  }
  return "";
}

int64_t batch_size_of(const BatchSnapshot& snap) {
  return !snap.inputs.empty() && snap.inputs[0].dim() > 0 ? snap.inputs[0].size(0) : 0;
}

}  // namespace

json Controller::get_status() const {
  const auto state = core_.control().state();
  auto snap = core_.snapshot();
  json status = {{"state", std::string(to_string(state))},
                 {"mode", std::string(to_string(core_.control().mode()))},
                 {"live_position", to_json(core_.live_position())},
                 {"snapshot_position", snap ? to_json(snap->position) : json(nullptr)},
                 {"snapshot_sequence", snap ? snap->sequence : 0},
                 {"snapshot_batch_size", snap ? batch_size_of(*snap) : 0},
                 {"schedule", to_json(core_.schedule())},
                 {"hint", hint(state)}};
  if (auto since = core_.control().paused_since()) {
    status["paused_at_ms"] =
        std::chrono::duration_cast<std::chrono::milliseconds>(since->time_since_epoch()).count();
  }
  status["time_travel"] = time_travel_summary();
  if (state == RunState::kLost) status["lost_reason"] = core_.control().lost_reason();
  auto errors = core_.internal_errors();
  if (!errors.empty()) status["internal_errors"] = errors;
  status["debug"] = debug_summary();
  return status;
}

json Controller::get_architecture() const {
  auto arch = core_.architecture();
  if (!arch) {
    return {{"captured", false},
            {"reason", "no batch has been captured yet: the graph appears once the first batch pauses"},
            {"layers", json::array()},
            {"edges", json::array()},
            {"inputs", json::array()}};
  }
  json out = to_json(*arch);
  out["captured"] = true;
  return out;
}

std::shared_ptr<const BatchSnapshot> Controller::require_snapshot() const {
  auto snap = core_.snapshot();
  if (!snap) {
    throw ControllerError(ControllerError::Kind::kNotFound,
                          "no snapshot yet: the first captured batch publishes one (the run pauses there)");
  }
  return snap;
}

json Controller::get_snapshot() const {
  auto snap = require_snapshot();
  {
    std::lock_guard lock(cache_mu_);
    if (cached_snapshot_ && cached_sequence_ == snap->sequence) return *cached_snapshot_;
  }
  json layers = json::array();
  for (const auto& layer : snap->architecture->layers) {
    json entry = {{"name", layer.name}, {"kind", layer.kind}};
    auto a = snap->activations.find(layer.name);
    entry["activation"] = a != snap->activations.end() ? tensor_summary(a->second) : json(nullptr);
    auto g = snap->activation_gradients.find(layer.name);
    entry["gradient"] = g != snap->activation_gradients.end() ? tensor_summary(g->second) : json(nullptr);
    layers.push_back(std::move(entry));
  }
  json params = json::array();
  for (const auto& [name, w] : snap->weights) {
    auto g = snap->weight_gradients.find(name);
    json entry = {{"name", name},
                  {"weight", tensor_summary(w)},
                  {"gradient", g != snap->weight_gradients.end() ? tensor_summary(g->second) : json(nullptr)}};
    if (auto st = snap->optimizer_state.find(name); st != snap->optimizer_state.end()) {
      json state = json::object();
      for (const auto& [key, t] : st->second) {
        state[key] = t.dim() == 0 ? number(t.item<double>()) : tensor_summary(t);
      }
      entry["optimizer_state"] = state;
    }
    if (auto hp = snap->optimizer_hyperparams.find(name); hp != snap->optimizer_hyperparams.end()) {
      json hyper = json::object();
      for (const auto& [key, v] : hp->second) hyper[key] = number(v);
      entry["hyperparameters"] = hyper;
    }
    params.push_back(std::move(entry));
  }
  json inputs = json::array();
  for (size_t i = 0; i < snap->inputs.size(); ++i) {
    const auto& t = snap->inputs[i];
    const auto& names = snap->architecture->inputs;
    inputs.push_back({{"index", i},
                      {"name", i < names.size() ? names[i] : "input_" + std::to_string(i)},
                      {"shape", t.sizes().vec()},
                      {"dtype", std::string(c10::toString(t.scalar_type()))}});
  }
  const int64_t batch_size = batch_size_of(*snap);
  auto out = std::make_shared<const json>(json{{"position", to_json(snap->position)},
                                               {"sequence", snap->sequence},
                                               {"batch_size", batch_size},
                                               {"inputs", inputs},
                                               {"layers", layers},
                                               {"parameters", params}});
  std::lock_guard lock(cache_mu_);
  cached_sequence_ = snap->sequence;
  cached_snapshot_ = out;
  return *out;
}

std::shared_ptr<const Controller::RenderedImage> Controller::render_layer(
    const std::string& layer, const std::string& kind, const render::StripOptions& options) const {
  if (kind != "activation" && kind != "gradient") {
    throw ControllerError(ControllerError::Kind::kInvalidArgument,
                          "kind must be \"activation\" or \"gradient\", got \"" + kind + "\"");
  }
  auto snap = require_snapshot();
  if (!snap->architecture->find(layer)) {
    std::string known;
    for (const auto& l : snap->architecture->layers) known += (known.empty() ? "" : ", ") + l.name;
    throw ControllerError(ControllerError::Kind::kNotFound, "unknown layer \"" + layer + "\"; layers: " + known);
  }
  const std::string key = std::to_string(snap->sequence) + "|" + layer + "|" + kind + "|" +
                          std::to_string(options.sample) + "|" + (options.average ? "avg" : "all") + "|" +
                          std::string(render::to_string(options.values));
  return render_cache_.get_or_compute(key, [&]() -> std::shared_ptr<const RenderedImage> {
    const auto& tensors = kind == "activation" ? snap->activations : snap->activation_gradients;
    auto it = tensors.find(layer);
    if (it == tensors.end()) {
      throw ControllerError(ControllerError::Kind::kNotFound,
                            "layer \"" + layer + "\" has no " + kind + " in the batch at " + snap->position.to_string() +
                                (kind == "gradient" ? " (no backward ran through it)" : ""));
    }
    render::Strip strip;
    try {
      strip = render::render_strip(it->second, options);
    } catch (const std::invalid_argument& e) {
      throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
    }
    const auto& i = strip.info;
    auto out = std::make_shared<RenderedImage>();
    out->png = render::encode_png(strip.image);
    out->info = {{"layer", layer},
                 {"kind", kind},
                 {"position", to_json(snap->position)},
                 {"sequence", snap->sequence},
                 {"sample", options.sample},
                 {"batch_size", i.batch_size},
                 {"average", options.average},
                 {"values", std::string(render::to_string(options.values))},
                 {"layout", i.layout},
                 {"tiles", i.tiles},
                 {"tile_width", i.tile_width},
                 {"tile_height", i.tile_height},
                 {"width", strip.image.width},
                 {"height", strip.image.height},
                 {"scale", i.diverging ? "diverging" : "sequential"},
                 {"scale_max", number(i.scale_max)},
                 {"nan", i.nan},
                 {"pos_inf", i.pos_inf},
                 {"neg_inf", i.neg_inf}};
    return out;
  });
}

uint64_t Controller::snapshot_sequence() const {
  auto snap = core_.snapshot();
  return snap ? snap->sequence : 0;
}

std::shared_ptr<const Controller::RenderedImage> Controller::render_input(int64_t input, int64_t sample) const {
  auto snap = require_snapshot();
  const auto count = static_cast<int64_t>(snap->inputs.size());
  if (count == 0) {
    throw ControllerError(ControllerError::Kind::kNotFound,
                          "the batch at " + snap->position.to_string() + " recorded no tensor input");
  }
  if (input < 0 || input >= count) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument,
                          "input " + std::to_string(input) + " is out of range: the model has " + std::to_string(count) +
                              " input" + (count == 1 ? "" : "s") + " (0.." + std::to_string(count - 1) + ")");
  }
  const auto& names = snap->architecture->inputs;
  const std::string name =
      static_cast<size_t>(input) < names.size() ? names[static_cast<size_t>(input)] : "input_" + std::to_string(input);
  const std::string key = std::to_string(snap->sequence) + "|input|" + std::to_string(input) + "|" +
                          std::to_string(sample);
  if (auto hit = render_cache_.find(key)) return hit;
  const auto& display = core_.display_options();
  render::InputImageOptions options;
  options.sample = sample;
  options.mean = display.input_mean().for_input(name);
  options.std = display.input_std().for_input(name);
  options.transform = display.input_transform().for_input(name);
  render::InputImage image;
  try {
    image = render::render_input(snap->inputs[static_cast<size_t>(input)], options);
  } catch (const std::invalid_argument& e) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
  } catch (const std::exception& e) {
    // The user's transform threw: say so instead of failing the request.
    throw ControllerError(ControllerError::Kind::kInvalidArgument,
                          "the input transform for \"" + name + "\" failed: " + e.what());
  }
  auto out = std::make_shared<RenderedImage>();
  out->png = render::encode_png(image.image);
  out->info = {{"input", input},
               {"name", name},
               {"position", to_json(snap->position)},
               {"sequence", snap->sequence},
               {"sample", sample},
               {"batch_size", image.batch_size},
               {"layout", image.layout},
               {"width", image.image.width},
               {"height", image.image.height}};
  if (!image.hint.empty()) out->info["hint"] = image.hint;
  render_cache_.put(key, out);
  return out;
}

uint64_t Controller::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  return core_.control().wait_for_change(seen, timeout);
}

void Controller::wake_watchers() { core_.control().notify_changed(); }

template <class F>
json Controller::command(F&& apply, Wait wait) {
  const auto state = core_.control().state();
  if (state == RunState::kFinished || state == RunState::kLost) {
    throw ControllerError(ControllerError::Kind::kConflict,
                          state == RunState::kFinished
                              ? "training has finished: nothing left to run; the last captured batch stays available"
                              : "the training loop was lost (" + core_.control().lost_reason() +
                                    "): nothing left to control");
  }
  try {
    apply();
  } catch (const ControlError& e) {
    throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
  }
  if (wait) core_.control().wait_until_stopped(*wait);
  return get_status();
}

json Controller::step(const std::string& unit, Wait wait) {
  auto& control = core_.control();
  if (unit == "batch") return command([&] { control.step_batch(); }, wait);
  if (unit == "phase") return command([&] { control.step_phase(); }, wait);
  if (unit == "epoch") return command([&] { control.step_epoch(); }, wait);
  throw ControllerError(ControllerError::Kind::kInvalidArgument,
                        "unit must be \"batch\", \"phase\" or \"epoch\", got \"" + unit + "\"");
}

json Controller::run(bool detach, Wait wait) {
  auto& control = core_.control();
  // A detached run never pauses again: there is nothing to wait for.
  if (detach) return command([&] { control.detach(); }, std::nullopt);
  return command([&] { control.step_run(); }, wait);
}

json Controller::pause(Wait wait) {
  return command([&] { core_.control().stop(); }, wait);
}

json Controller::run_until(const std::string& phase, int64_t epoch, int64_t batch, Wait wait) {
  BatchPosition target;
  target.phase = phase;
  target.epoch = epoch;
  target.batch_idx = batch;
  return command([&] { core_.control().step_until_position(target); }, wait);
}

json Controller::time_travel(int64_t epoch, Wait wait) {
  return command(
      [&] {
        if (!core_.restorer().active()) {
          throw ControllerError(ControllerError::Kind::kConflict, core_.restorer().status().reason);
        }
        try {
          core_.request_time_travel(epoch);
        } catch (const TimeTravelError& e) {
          throw ControllerError(ControllerError::Kind::kInvalidArgument, e.what());
        }
      },
      wait);
}

json Controller::refresh(Wait wait) {
  const auto before = core_.snapshot();
  const uint64_t seq = before ? before->sequence : 0;
  json status = command([&] { core_.control().request_snapshot(); }, std::nullopt);
  if (!wait || core_.control().state() != RunState::kRunning) {
    status["refreshed"] = false;
    return status;
  }
  bool refreshed = core_.wait_for_snapshot_after(seq, *wait);
  status = get_status();
  status["refreshed"] = refreshed;
  return status;
}

}  // namespace nansense::server
