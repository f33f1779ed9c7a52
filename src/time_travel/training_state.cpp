#include "time_travel/training_state.h"

#include <c10/util/Type.h>

#include <sstream>
#include <typeinfo>

#include "time_travel/rng_state.h"

namespace nansense::time_travel {

namespace {

std::string kind_of(const torch::optim::Optimizer& optimizer) { return c10::demangle(typeid(optimizer).name()); }

json tensor_list(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  json out = json::array();
  for (const auto& [name, t] : named) {
    out.push_back({name, t.sizes().vec(), std::string(c10::toString(t.scalar_type()))});
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> named_buffers(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

std::string shape_text(const json& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i].get<int64_t>();
  os << "]";
  return os.str();
}

std::string compare_tensors(const std::string& what, const json& cached, const json& live) {
  const size_t n = std::min(cached.size(), live.size());
  for (size_t i = 0; i < n; ++i) {
    const auto name = cached[i][0].get<std::string>();
    const auto live_name = live[i][0].get<std::string>();
    if (name != live_name) {
      return what + " #" + std::to_string(i) + " is '" + name + "' in the cache but '" + live_name +
             "' in the live model";
    }
    if (cached[i][1] != live[i][1]) {
      return what + " '" + name + "' has shape " + shape_text(cached[i][1]) + " in the cache but " +
             shape_text(live[i][1]) + " in the live model";
    }
    if (cached[i][2] != live[i][2]) {
      return what + " '" + name + "' has dtype " + cached[i][2].get<std::string>() + " in the cache but " +
             live[i][2].get<std::string>() + " in the live model";
    }
  }
  if (cached.size() > n) {
    return "the cache has " + what + " '" + cached[n][0].get<std::string>() + "' that the live model lacks";
  }
  if (live.size() > n) {
    return "the live model has " + what + " '" + live[n][0].get<std::string>() + "' that the cache lacks";
  }
  return {};
}

std::string kind_text(const json& part) { return part.is_null() ? "none" : part["kind"].get<std::string>(); }

}  // namespace

json fingerprint(const LiveState& live) {
  json out = {{"parameters", tensor_list(named_parameters(*live.model))},
              {"buffers", tensor_list(named_buffers(*live.model))},
              {"optimizer", nullptr},
              {"scheduler", nullptr},
              {"cuda_generators", cuda_generator_count()}};
  if (live.optimizer) {
    json groups = json::array();
    for (const auto& g : live.optimizer->param_groups()) groups.push_back(g.params().size());
    out["optimizer"] = {{"kind", kind_of(*live.optimizer)}, {"groups", groups}};
  }
  if (live.scheduler) out["scheduler"] = {{"kind", live.scheduler->kind()}};
  return out;
}

std::string first_mismatch(const json& cached, const json& live) {
  try {
    if (auto why = compare_tensors("parameter", cached.at("parameters"), live.at("parameters")); !why.empty()) {
      return why;
    }
    if (auto why = compare_tensors("buffer", cached.at("buffers"), live.at("buffers")); !why.empty()) return why;
    const json& co = cached.at("optimizer");
    const json& lo = live.at("optimizer");
    if (kind_text(co) != kind_text(lo)) {
      return "the optimizer is " + kind_text(co) + " in the cache but " + kind_text(lo) + " in the live session";
    }
    if (!co.is_null() && co.at("groups") != lo.at("groups")) {
      return "the optimizer's param groups hold " + co.at("groups").dump() + " parameters in the cache but " +
             lo.at("groups").dump() + " in the live session";
    }
    const json& cs = cached.at("scheduler");
    const json& ls = live.at("scheduler");
    if (kind_text(cs) != kind_text(ls)) {
      return "the scheduler is " + kind_text(cs) + " in the cache but " + kind_text(ls) + " in the live session";
    }
    if (cached.at("cuda_generators") != live.at("cuda_generators")) {
      return "the cache was written with " + cached.at("cuda_generators").dump() + " CUDA devices, this process has " +
             live.at("cuda_generators").dump();
    }
  } catch (const json::exception& e) {
    return std::string("the checkpoint's description is malformed (") + e.what() + ")";
  }
  return {};
}

void save_state(const LiveState& live, torch::serialize::OutputArchive& archive) {
  auto cu = archive.compilation_unit();
  torch::serialize::OutputArchive model(cu);
  auto params = named_parameters(*live.model);
  for (size_t i = 0; i < params.size(); ++i) model.write("p" + std::to_string(i), params[i].second.detach());
  auto buffers = named_buffers(*live.model);
  for (size_t i = 0; i < buffers.size(); ++i) model.write("b" + std::to_string(i), buffers[i].second, true);
  model.write("training", c10::IValue(live.model->is_training()));
  archive.write("model", model);
  if (live.optimizer) {
    torch::serialize::OutputArchive optimizer(cu);
    live.optimizer->save(optimizer);
    archive.write("optimizer", optimizer);
    // LibTorch's Optimizer::load restores the state only; the options (the
    // learning rate a scheduler changed) are saved per group here.
    torch::serialize::OutputArchive groups(cu);
    const auto& pg = live.optimizer->param_groups();
    for (size_t i = 0; i < pg.size(); ++i) {
      torch::serialize::OutputArchive options(cu);
      pg[i].options().serialize(options);
      groups.write("group_" + std::to_string(i), options);
    }
    archive.write("optimizer_groups", groups);
  }
  if (live.scheduler) {
    torch::serialize::OutputArchive scheduler(cu);
    live.scheduler->save(scheduler);
    archive.write("scheduler", scheduler);
  }
  torch::serialize::OutputArchive rng(cu);
  save_rng(rng);
  archive.write("rng", rng);
}

void restore_state(const LiveState& live, torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive model;
  archive.read("model", model);
  auto params = named_parameters(*live.model);
  auto buffers = named_buffers(*live.model);
  auto read_all = [&](const std::vector<std::pair<std::string, torch::Tensor>>& live_tensors, const char* prefix,
                      bool is_buffer) {
    std::vector<torch::Tensor> out(live_tensors.size());
    for (size_t i = 0; i < live_tensors.size(); ++i) {
      model.read(prefix + std::to_string(i), out[i], is_buffer);
      const auto& target = live_tensors[i].second;
      if (out[i].sizes() != target.sizes() || out[i].scalar_type() != target.scalar_type()) {
        throw std::runtime_error("the checkpoint's tensor for '" + live_tensors[i].first +
                                 "' does not fit the live one");
      }
    }
    return out;
  };
  auto saved_params = read_all(params, "p", false);
  auto saved_buffers = read_all(buffers, "b", true);
  c10::IValue training;
  model.read("training", training);
  torch::serialize::InputArchive rng;
  archive.read("rng", rng);
  torch::serialize::InputArchive optimizer, groups, scheduler;
  if (live.optimizer) {
    archive.read("optimizer", optimizer);
    archive.read("optimizer_groups", groups);
  }
  if (live.scheduler) archive.read("scheduler", scheduler);

  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].second.copy_(saved_params[i]);
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_(saved_buffers[i]);
  }
  live.model->train(training.toBool());
  if (live.optimizer) {
    // Optimizer::load adds the saved state but keeps entries it does not
    // replace: clear first, so a jump to epoch 0 leaves no momentum behind.
    live.optimizer->state().clear();
    live.optimizer->load(optimizer);
    auto& pg = live.optimizer->param_groups();
    for (size_t i = 0; i < pg.size(); ++i) {
      torch::serialize::InputArchive options;
      groups.read("group_" + std::to_string(i), options);
      pg[i].options().serialize(options);
    }
  }
  if (live.scheduler) live.scheduler->load(scheduler);
  restore_rng(rng);
}

}  // namespace nansense::time_travel
