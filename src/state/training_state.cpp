#include "state/training_state.h"

#include <ATen/record_function.h>
#include <torch/serialize/archive.h>

#include <map>
#include <optional>

#include "common/own_ops.h"
#include "state/fingerprint.h"

namespace nansense::state {

namespace {

using json = nlohmann::json;

// Serialises `archive` into `out` chunk by chunk.
void save_into(torch::serialize::OutputArchive& archive, std::string& out) {
  archive.save_to([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
}

torch::serialize::InputArchive load_section(const StateFile& file, const std::string& name) {
  const auto& bytes = file.at(name);
  torch::serialize::InputArchive archive;
  // Onto the CPU whatever device wrote it: restoring copies into the live
  // tensors wherever they are.
  archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
  return archive;
}

// "p3", "optimizer_1": archive keys by position. (Appending rather than
// "p" + std::to_string(i) keeps GCC 12 from a false stringop-overflow warning.)
std::string key(const char* prefix, size_t i) {
  std::string out(prefix);
  out += std::to_string(i);
  return out;
}

void save_optimizers(const LiveState& live, torch::serialize::OutputArchive& archive) {
  auto cu = archive.compilation_unit();
  for (size_t i = 0; i < live.optimizers.size(); ++i) {
    const auto& optimizer = *live.optimizers[i];
    torch::serialize::OutputArchive one(cu), state(cu), groups(cu);
    try {
      optimizer.save(state);
      // Optimizer::load restores the state only: the options (the learning
      // rate a scheduler changed) are saved per group here.
      const auto& pg = optimizer.param_groups();
      for (size_t g = 0; g < pg.size(); ++g) {
        torch::serialize::OutputArchive options(cu);
        pg[g].options().serialize(options);
        groups.write(key("group_", g), options);
      }
    } catch (const std::exception& e) {
      throw StateError("the state of optimizer #" + std::to_string(i) + " (" + kind_of(optimizer) +
                       ") cannot be saved: " + e.what());
    }
    one.write("state", state);
    one.write("groups", groups);
    archive.write(key("optimizer_", i), one);
  }
}

// A saved optimizer, read and not yet applied.
struct SavedOptimizer {
  torch::serialize::InputArchive state;
  std::vector<torch::serialize::InputArchive> groups;
};

}  // namespace

void save_state(const LiveState& live, StateFile& file, const Recorded& recorded) {
  // The serialisation's copies are not ops of the user's batch.
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  file.meta["fingerprint"] = fingerprint(live);
  {
    torch::serialize::OutputArchive model;
    size_t i = 0;
    for (const auto& p : live.model->named_parameters()) model.write(key("p", i++), p.value().detach());
    i = 0;
    for (const auto& b : live.model->named_buffers()) {
      const bool has_recorded = i < recorded.buffers.size() && recorded.buffers[i].defined();
      model.write(key("b", i), has_recorded ? recorded.buffers[i] : b.value(), /*is_buffer=*/true);
      ++i;
    }
    model.write("training", c10::IValue(live.model->is_training()));
    save_into(model, file.add("model"));
  }
  {
    torch::serialize::OutputArchive optimizers;
    save_optimizers(live, optimizers);
    save_into(optimizers, file.add("optimizers"));
  }
  if (live.scheduler) {
    torch::serialize::OutputArchive scheduler;
    try {
      live.scheduler->save(scheduler);
    } catch (const std::exception& e) {
      throw StateError("the scheduler's state (" + live.scheduler->kind() + ") cannot be saved: " + e.what());
    }
    save_into(scheduler, file.add("scheduler"));
  }
  torch::serialize::OutputArchive rng;
  (recorded.rng ? *recorded.rng : RngState::capture()).save(rng);
  save_into(rng, file.add("rng"));
}

std::string check_state(const StateFile& file, const LiveState& live, std::string_view saved_in, Parts parts) {
  return first_mismatch(file.meta.value("fingerprint", json()), fingerprint(live), saved_in, parts);
}

void restore_state(const StateFile& file, const LiveState& live, Parts parts) {
  const std::string origin = file.origin.empty() ? std::string("the state") : file.origin;
  if (auto why = check_state(file, live, "the file", parts); !why.empty()) {
    throw StateError(origin + " was saved for another setup: " + why);
  }
  common::OwnOps own_ops;
  auto params = live.model->named_parameters();
  auto buffers = live.model->named_buffers();
  std::vector<torch::Tensor> saved_params(params.size()), saved_buffers(buffers.size());
  c10::IValue training;
  std::vector<SavedOptimizer> optimizers;
  torch::serialize::InputArchive scheduler;
  RngState rng;
  try {
    // The saved index of each name: the fingerprint matched names, not order.
    const json& fp = file.meta["fingerprint"];
    auto model = load_section(file, "model");
    auto read_all = [&](const json& saved, const torch::OrderedDict<std::string, torch::Tensor>& targets,
                        const char* prefix, bool is_buffer, std::vector<torch::Tensor>& out) {
      std::map<std::string, size_t> index;
      for (size_t i = 0; i < saved.size(); ++i) index[saved[i][0].get<std::string>()] = i;
      size_t i = 0;
      for (const auto& t : targets) {
        model.read(key(prefix, index.at(t.key())), out[i], is_buffer);
        if (out[i].sizes() != t.value().sizes() || out[i].scalar_type() != t.value().scalar_type()) {
          throw StateError("the saved tensor of '" + t.key() + "' does not fit the live one");
        }
        ++i;
      }
    };
    read_all(fp["parameters"], params, "p", false, saved_params);
    read_all(fp["buffers"], buffers, "b", true, saved_buffers);
    model.read("training", training);
    if (parts.optimizers && !live.optimizers.empty()) {
      auto archive = load_section(file, "optimizers");
      for (size_t i = 0; i < live.optimizers.size(); ++i) {
        torch::serialize::InputArchive one, groups;
        archive.read(key("optimizer_", i), one);
        SavedOptimizer saved;
        one.read("state", saved.state);
        one.read("groups", groups);
        for (size_t g = 0; g < live.optimizers[i]->param_groups().size(); ++g) {
          saved.groups.emplace_back();
          groups.read(key("group_", g), saved.groups.back());
        }
        optimizers.push_back(std::move(saved));
      }
    }
    if (parts.scheduler && live.scheduler) scheduler = load_section(file, "scheduler");
    auto rng_archive = load_section(file, "rng");
    rng = RngState::load(rng_archive);
  } catch (const StateError& e) {
    throw StateError(origin + ": " + e.what());
  } catch (const std::exception& e) {
    throw StateError(origin + " holds a training state that cannot be read: " + e.what());
  }

  try {
    {
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (auto& p : params) p.value().copy_(saved_params[i++]);
      i = 0;
      for (auto& b : buffers) b.value().copy_(saved_buffers[i++]);
    }
    live.model->train(training.toBool());
    for (size_t i = 0; i < optimizers.size(); ++i) {
      auto& optimizer = *live.optimizers[i];
      // Optimizer::load adds the saved state but keeps entries it does not
      // replace: clear first, so a jump to epoch 0 leaves no momentum behind.
      optimizer.state().clear();
      optimizer.load(optimizers[i].state);
      auto& pg = optimizer.param_groups();
      for (size_t g = 0; g < pg.size(); ++g) pg[g].options().serialize(optimizers[i].groups[g]);
    }
    if (parts.scheduler && live.scheduler) live.scheduler->load(scheduler);
    rng.apply();
  } catch (const StateError& e) {
    throw StateError(origin + ": " + e.what());
  } catch (const std::exception& e) {
    throw StateError("restoring " + origin + " failed part way: " + e.what());
  }
}

}  // namespace nansense::state
