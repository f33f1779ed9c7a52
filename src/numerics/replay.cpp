// nansense::replay_capsule: the public way back into a NaN capsule.
#include <ATen/record_function.h>

#include <cstring>

#include "common/json_read.h"
#include "common/own_ops.h"
#include "nansense/debug.h"
#include "numerics/capsule.h"
#include "numerics/debug_json.h"

namespace nansense {

namespace {

// More threads than any machine a capsule was recorded on has cores.
constexpr int64_t kMaxReplayThreads = 4096;

BatchPosition position_from(const nlohmann::json& j) {
  BatchPosition p;
  p.phase = j.value("phase", "");
  p.epoch = common::integer_value(j, "epoch", 0, 0);
  p.batch_idx = common::integer_value(j, "batch_idx", 0, 0);
  p.is_last_in_phase = j.value("is_last_in_phase", false);
  p.is_last_in_epoch = j.value("is_last_in_epoch", false);
  p.is_last_in_run = j.value("is_last_in_run", false);
  return p;
}

}  // namespace

Capsule replay_capsule(const std::string& path, torch::nn::Module& model,
                       const std::vector<torch::optim::Optimizer*>& optimizers) {
  // A replay without optimizers restores the rest; the schedule's own state
  // is the session's (the learning rates come back with the optimizers).
  state::Parts parts;
  parts.optimizers = !optimizers.empty();
  parts.scheduler = false;
  return numerics::replay_into(path, {&model, optimizers, nullptr}, parts);
}

Capsule numerics::replay_into(const std::string& path, const state::LiveState& live, state::Parts parts) {
  auto file = numerics::read_capsule(path);
  Capsule c;
  try {
    const auto& meta = file.meta;
    c.position = position_from(meta.at("position"));
    c.settings = numerics::settings_from_json(meta.at("settings"));
    if (meta.at("error").is_object()) c.reasons = meta["error"].value("reasons", std::vector<std::string>{});
    // A thread count the file may not set this process to (a crafted
    // 100000 would start that many threads at the next parallel op).
    c.num_threads = static_cast<int>(common::integer_value(meta, "num_threads", 1, 1, kMaxReplayThreads));
    c.notes = meta.value("notes", std::vector<std::string>{});
  } catch (const std::exception& e) {
    throw CapsuleError(path + " has a malformed description: " + e.what());
  }
  c.batch = numerics::capsule_batch(file);
  c.gradients = numerics::capsule_gradients(file);
  // Everything is read: only now the live objects change.
  numerics::restore_capsule(file, live, parts);
  // Reductions split work by thread count: the same count, the same bits.
  if (c.num_threads > 0 && torch::get_num_threads() != c.num_threads) torch::set_num_threads(c.num_threads);
  return c;
}

Capsule replay_capsule(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  std::vector<torch::optim::Optimizer*> optimizers;
  if (optimizer) optimizers.push_back(optimizer);
  return replay_capsule(path, model, optimizers);
}

bool Capsule::gradients_match(const torch::nn::Module& model, std::string* difference) const {
  common::OwnOps own_ops;
  auto differ = [&](const std::string& why) {
    if (difference) *difference = why;
    return false;
  };
  for (const auto& p : model.named_parameters()) {
    auto it = gradients.find(p.key());
    const auto& g = p.value().grad();
    if (it == gradients.end()) {
      if (g.defined()) return differ("'" + p.key() + "' has a gradient; the capsule recorded none");
      continue;
    }
    if (!g.defined()) return differ("'" + p.key() + "' has no gradient; the capsule recorded one");
    auto live = g.detach();
    if (live.layout() != torch::kStrided) live = live.to_dense();  // recorded dense
    live = live.to(torch::kCPU).contiguous();
    auto recorded = it->second.contiguous();
    if (live.sizes() != recorded.sizes() || live.scalar_type() != recorded.scalar_type()) {
      return differ("'" + p.key() + "' gradient differs in shape or dtype");
    }
    if (std::memcmp(live.data_ptr(), recorded.data_ptr(), live.nbytes()) != 0) {
      const auto equal = live.eq(recorded).logical_or(live.isnan().logical_and(recorded.isnan()));
      const int64_t differing = live.numel() - equal.sum().item<int64_t>();
      return differ("'" + p.key() + "' gradient differs from the recorded one in its bits (" +
                    std::to_string(differing) + " of " + std::to_string(live.numel()) + " values differ in value)");
    }
  }
  return true;
}

}  // namespace nansense
