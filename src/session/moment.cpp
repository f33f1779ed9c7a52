// Frozen moments (freeze_moment, load_moment), lock() and park(): sharing a
// paused debugger view. A moment is a state file of kind "moment" (state/
// state_file.h: atomic, checksummed): the state layer's sections for the
// state the batch ended with, the same for the state it began with
// ("model_before", "rng_before"), the batch item and model inputs, the
// snapshot's optimizer view, and the statistics view (stats/stats_codec.h).
#include <ATen/record_function.h>

#include <chrono>
#include <iostream>

#include "common/json_values.h"
#include "common/own_ops.h"
#include "nansense/errors.h"
#include "nansense/moment.h"
#include "session/session_access.h"
#include "session/session_core.h"
#include "state/training_state.h"
#include "stats/stats_codec.h"

namespace nansense {

namespace detail {

namespace {

using json = nlohmann::json;

void write_tensors(const std::vector<torch::Tensor>& tensors, const std::string& prefix, std::string& out) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.write(prefix + std::to_string(i), tensors[i].detach().cpu(), /*is_buffer=*/true);
  }
  archive.save_to([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
}

std::vector<torch::Tensor> read_tensors(const state::StateFile& file, const std::string& section,
                                        const std::string& prefix, size_t count) {
  const auto& bytes = file.at(section);
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
  std::vector<torch::Tensor> out(count);
  for (size_t i = 0; i < count; ++i) archive.read(prefix + std::to_string(i), out[i], /*is_buffer=*/true);
  return out;
}

// The snapshot's optimizer view: "param\x1fkey" -> tensor, hyperparameters in meta.
void write_optimizer_view(const BatchSnapshot& snap, state::StateFile& file) {
  torch::serialize::OutputArchive archive;
  json names = json::array();
  size_t i = 0;
  for (const auto& [param, entries] : snap.optimizer_state) {
    for (const auto& [key, t] : entries) {
      names.push_back({param, key});
      archive.write("s" + std::to_string(i++), t.detach().cpu(), /*is_buffer=*/true);
    }
  }
  std::string& out = file.add("optimizer_view");
  archive.save_to([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  file.meta["optimizer_state"] = std::move(names);
  file.meta["optimizer_hyperparams"] = snap.optimizer_hyperparams;
}

capture::OptimizerView read_optimizer_view(const state::StateFile& file) {
  capture::OptimizerView view;
  const auto& names = file.meta.at("optimizer_state");
  const auto tensors = read_tensors(file, "optimizer_view", "s", names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    view.state[names[i].at(0).get<std::string>()][names[i].at(1).get<std::string>()] = tensors[i];
  }
  view.hyperparams = file.meta.at("optimizer_hyperparams").get<std::map<std::string, std::map<std::string, double>>>();
  return view;
}

BatchPosition position_of(const json& j) {
  BatchPosition pos;
  pos.phase = j.at("phase").get<std::string>();
  pos.epoch = j.at("epoch").get<int64_t>();
  pos.batch_idx = j.at("batch_idx").get<int64_t>();
  return pos;
}

std::vector<std::string> layer_names(const Architecture& architecture) {
  std::vector<std::string> names;
  for (const auto& layer : architecture.layers) names.push_back(layer.name);
  return names;
}

}  // namespace

void SessionCore::arm_moment(const std::string& path, const BatchPosition& at) {
  if (locked()) return;
  std::lock_guard lock(moment_mu_);
  moment_target_ = MomentTarget{path, at};
}

bool SessionCore::moment_target_ready(const BatchPosition& pos) {
  std::lock_guard lock(moment_mu_);
  if (!moment_target_ || !moment_target_->at.same_batch(pos)) return false;
  moment_now_ = std::move(moment_target_);
  moment_target_.reset();
  return true;
}

void SessionCore::begin_moment() {
  try {
    common::OwnOps own_ops;
    torch::NoGradGuard no_grad;
    // What the batch begins with: the replay's starting weights.
    state::StateFile before{std::string(state::kMomentKind)};
    state::save_state(restorer_->live(), before);
    moment_file_ = std::make_unique<state::StateFile>(std::string(state::kMomentKind));
    moment_file_->add("model_before") = before.at("model");
    moment_file_->add("rng_before") = before.at("rng");
  } catch (const std::exception& e) {
    moment_file_.reset();
    report_part_error("the moment at " + moment_now_->at.to_string() + " was not frozen: " + e.what());
    moment_now_.reset();
  }
}

void SessionCore::record_moment_item(const std::vector<torch::Tensor>& tensors) {
  if (moment_file_->find("item")) return;
  try {
    write_tensors(tensors, "t", moment_file_->add("item"));
    moment_file_->meta["item_tensors"] = tensors.size();
  } catch (const std::exception& e) {
    report_part_error(std::string("the moment's batch item was not stored: ") + e.what());
  }
}

void SessionCore::record_moment_inputs(const std::vector<torch::Tensor>& inputs, bool stacked) {
  if (moment_file_->find("inputs")) return;
  try {
    write_tensors(inputs, "i", moment_file_->add("inputs"));
    moment_file_->meta["input_tensors"] = inputs.size();
    moment_file_->meta["inputs_stacked"] = stacked;
  } catch (const std::exception& e) {
    report_part_error(std::string("the moment's inputs were not stored: ") + e.what());
  }
}

void SessionCore::finish_moment() {
  const MomentTarget target = *moment_now_;
  moment_now_.reset();
  auto file = std::move(moment_file_);
  if (!file) return;
  try {
    if (!file->find("item")) {
      throw std::runtime_error(
          "the batch handed over no loader item (drive the loop with batches(), which records it)");
    }
    auto snap = snapshot_.load();
    if (!snap || !snap->position.same_batch(target.at)) {
      throw std::runtime_error("the batch was not captured (" +
                               (internal_errors().empty() ? std::string("capture is off") : internal_errors().back()) +
                               ")");
    }
    common::OwnOps own_ops;
    torch::NoGradGuard no_grad;
    // What the batch ended with: the weights its snapshot shows.
    state::save_state(restorer_->live(), *file);
    write_optimizer_view(*snap, *file);
    auto stats = stats_->snapshot();
    stats::write_stats(stats ? *stats : WatchSnapshot{}, *file);
    json order = json::array(), counts = json::object();
    for (const auto& phase : schedule_.phase_order()) {
      order.push_back(phase);
      if (auto n = schedule_.phase_count(phase)) counts[phase] = *n;
    }
    const auto epochs = schedule_.epochs();
    file->meta.update({{"position", common::to_json(target.at)},
                       {"schedule",
                        {{"epochs", epochs ? json(*epochs) : json()},
                         {"order", order},
                         {"counts", counts},
                         {"declared", schedule_.declared()}}},
                       {"watched", stats_->watched()},
                       {"layers", layer_names(*snap->architecture)},
                       {"created_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count()}});
    state::write_state_file(target.path, *file);
    std::cerr << "[nansense] froze the moment at " << target.at.to_string() << " to " << target.path << " ("
              << file->encoded_size() << " bytes)\n";
  } catch (const std::exception& e) {
    report_part_error("the moment at " + target.at.to_string() + " was not frozen to " + target.path + ": " + e.what());
  }
}

void SessionCore::report_unreached_moment() {
  std::lock_guard lock(moment_mu_);
  if (!moment_target_) return;
  const auto target = std::move(*moment_target_);
  moment_target_.reset();
  const std::string what =
      "freeze_moment: training never reached " + target.at.to_string() + " (nothing written to " + target.path + ")";
  std::cerr << "[nansense] " << what << "\n";
  std::lock_guard errors(errors_mu_);
  internal_errors_.push_back(what);
}

void SessionCore::restore_moment(const std::string& path, const ReplayFn& replay) {
  if (!replay) throw UsageError("load_moment(\"" + path + "\") needs a replay function, got an empty one");
  std::vector<torch::Tensor> item = begin_moment_replay(path, /*set_inputs=*/true);
  try {
    torch::Tensor loss = replay(*model_, item);
    if (!loss.defined() || loss.numel() != 1) {
      throw UsageError("load_moment: the replay function must return the batch's loss (one value)");
    }
    loss.backward();
  } catch (...) {
    abandon_moment_replay();
    throw;
  }
  end_moment_replay();
}

std::vector<torch::Tensor> SessionCore::begin_moment_replay(const std::string& path, bool set_inputs) {
  state::StateFile file;
  try {
    file = state::read_state_file(path);
  } catch (const state::StateError& e) {
    throw MomentError(e.what());
  }
  if (file.kind() != state::kMomentKind) {
    throw MomentError(path + " is " + state::describe_kind(file.kind()) + ", not a frozen moment");
  }
  const state::Parts model_only{.optimizers = false, .scheduler = false};
  const auto live = restorer_->live();
  if (auto why = state::check_state(file, live, "the moment", model_only); !why.empty()) {
    throw MomentError(path + " was frozen from another model: " + why);
  }
  BatchPosition at;
  std::vector<torch::Tensor> item, inputs;
  bool stacked = false;
  std::shared_ptr<const WatchSnapshot> stats;
  capture::OptimizerView optimizer;
  std::vector<std::string> order, frozen_layers, watched;
  std::map<std::string, int64_t> counts;
  std::optional<int64_t> epochs;
  bool declared = false;
  state::StateFile before{std::string(state::kMomentKind)};
  try {
    at = position_of(file.meta.at("position"));
    item = read_tensors(file, "item", "t", file.meta.at("item_tensors").get<size_t>());
    if (file.find("inputs")) {
      inputs = read_tensors(file, "inputs", "i", file.meta.at("input_tensors").get<size_t>());
      stacked = file.meta.at("inputs_stacked").get<bool>();
    }
    const auto& schedule = file.meta.at("schedule");
    if (!schedule.at("epochs").is_null()) epochs = schedule.at("epochs").get<int64_t>();
    order = schedule.at("order").get<std::vector<std::string>>();
    counts = schedule.at("counts").get<std::map<std::string, int64_t>>();
    declared = schedule.value("declared", false);
    frozen_layers = file.meta.at("layers").get<std::vector<std::string>>();
    watched = file.meta.at("watched").get<std::vector<std::string>>();
    optimizer = read_optimizer_view(file);
    stats = stats::read_stats(file);
    before.meta = file.meta;
    before.add("model") = file.at("model_before");
    before.add("rng") = file.at("rng_before");
  } catch (const state::StateError& e) {
    throw MomentError(e.what());
  } catch (const std::exception& e) {
    throw MomentError(path + " has a malformed description: " + e.what());
  }
  if (item.empty()) throw MomentError(path + " holds no batch item to replay");
  // The model's device: the frozen tensors follow it.
  torch::Device device(torch::kCPU);
  if (auto params = model_->parameters(); !params.empty()) device = params.front().device();
  for (auto& t : item) t = t.to(device);
  for (auto& t : inputs) t = t.to(device);
  try {
    // The weights, buffers, train/eval mode and RNG the batch began with.
    state::restore_state(before, live, model_only);
  } catch (const state::StateError& e) {
    throw MomentError(e.what());
  }
  stats_->adopt_frozen(stats);
  stats_->set_scope(StatsScope::kNone);
  stats_->watch(watched, nullptr);
  set_optimizer_reader([optimizer] { return optimizer; });
  if (declared) {
    PhaseCounts phases;
    for (const auto& phase : order) phases.emplace_back(phase, counts.count(phase) ? counts.at(phase) : 0);
    schedule_.set(epochs, phases);
  }
  schedule_.restore(epochs, order, counts, at);
  replaying_ = true;
  begin_batch(at.phase, at.epoch);
  record_item(item);
  if (set_inputs) set_batch_inputs(inputs.empty() ? std::vector<torch::Tensor>{item.front()} : inputs, stacked);
  for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
  moment_replay_ = std::make_unique<MomentReplay>(MomentReplay{std::move(file), std::move(frozen_layers)});
  return item;
}

void SessionCore::abandon_moment_replay() {
  moment_replay_.reset();
  replaying_ = false;
  abandon_batch(/*by_exception=*/false);
}

void SessionCore::end_moment_replay() {
  if (!moment_replay_) throw UsageError("end_moment_replay without begin_moment_replay");
  auto replay = std::move(moment_replay_);
  const std::string& path = replay->file.origin;
  try {
    // The snapshot shows the weights the batch ended with, as the live one did.
    common::OwnOps own_ops;
    state::restore_state(replay->file, restorer_->live(), {.optimizers = false, .scheduler = false});
  } catch (const state::StateError& e) {
    abandon_moment_replay();
    throw MomentError(e.what());
  }
  finish_batch(/*can_repeat=*/false);
  replaying_ = false;
  control_.pause();
  auto arch = architecture_.load();
  if (!arch) {
    throw MomentError(path + ": replaying its batch captured nothing (" +
                      (internal_errors().empty() ? std::string("no trace") : internal_errors().back()) + ")");
  }
  if (layer_names(*arch) != replay->layers) {
    throw MomentError(path + " was frozen from a model with other layers: replaying it found " +
                      std::to_string(arch->layers.size()) + " layers, the moment has " +
                      std::to_string(replay->layers.size()) +
                      " (the replay function must call the model as the training step did)");
  }
}

void SessionCore::lock() {
  if (locked_.exchange(true)) return;
  // Every layer collects: a page's show/hide never changes shared state.
  stats_->set_scope(StatsScope::kAll);
  experiments_->lock();
  control_.notify_changed();
}

void SessionCore::park() {
  while (!closed_) {
    const auto pos = schedule_.current();
    control_.pause();
    pause_here(pos ? *pos : BatchPosition{});
    if (control_.state() == RunState::kLost) return;
  }
}

Session load_moment_with(std::shared_ptr<torch::nn::Module> model, const std::string& path, ReplayFn replay,
                         std::optional<ServeOptions> serve_options, Session::ForwardFn forward) {
  StartOptions options;
  options.stats_scope(StatsScope::kNone).snapshot_budget(0);
  Session session = start(std::move(model), options);
  if (forward) session.set_forward(std::move(forward));
  core_of(session)->restore_moment(path, replay);
  if (serve_options) serve(session, *serve_options);
  return session;
}

}  // namespace detail

Session load_moment(std::shared_ptr<torch::nn::Module> model, const std::string& path, ReplayFn replay,
                    std::optional<ServeOptions> serve) {
  return detail::load_moment_with(std::move(model), path, std::move(replay), std::move(serve), nullptr);
}

void Session::freeze_moment(const std::string& path, const std::string& phase, int64_t epoch, int64_t batch_idx) {
  if (!core_ || core_->locked()) return;
  if (path.empty()) throw UsageError("freeze_moment needs a file path, got an empty one");
  if (phase.empty()) throw UsageError("freeze_moment needs a phase (\"train\"), got an empty one");
  if (epoch < 0 || batch_idx < 0) {
    throw UsageError("freeze_moment: epoch and batch_idx count from 0, got epoch " + std::to_string(epoch) +
                     ", batch " + std::to_string(batch_idx));
  }
  BatchPosition at;
  at.phase = phase;
  at.epoch = epoch;
  at.batch_idx = batch_idx;
  core_->arm_moment(path, at);
}

void Session::lock() {
  if (core_) core_->lock();
}
bool Session::locked() const { return core_ && core_->locked(); }
void Session::park() {
  if (core_) core_->park();
}

}  // namespace nansense
