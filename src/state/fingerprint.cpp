#include "state/fingerprint.h"

#include <c10/util/Type.h>

#include <map>
#include <typeinfo>

#include "state/rng_state.h"

namespace nansense::state {

namespace {

using json = nlohmann::json;

json tensor_list(const torch::OrderedDict<std::string, torch::Tensor>& named) {
  json out = json::array();
  for (const auto& item : named) {
    out.push_back({item.key(), item.value().sizes().vec(), std::string(c10::toString(item.value().scalar_type()))});
  }
  return out;
}

std::string shape_text(const json& shape) {
  std::string s = "[";
  // As written: a saved shape may hold anything (get<int64_t> of 1e300 is undefined).
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i].dump(-1, ' ', false, json::error_handler_t::replace);
  return s + "]";
}

// Matched by name: a model whose modules were declared in another order is
// still the same model.
std::string compare_tensors(const std::string& what, const json& saved, const json& live, const std::string& in) {
  std::map<std::string, const json*> by_name;
  for (const auto& s : saved) by_name[s[0].get<std::string>()] = &s;
  for (const auto& l : live) {
    const auto name = l[0].get<std::string>();
    auto it = by_name.find(name);
    if (it == by_name.end()) return "this model has " + what + " '" + name + "' that " + in + " lacks";
    const json& s = *it->second;
    if (s[1] != l[1]) {
      return what + " '" + name + "' has shape " + shape_text(s[1]) + " in " + in + " but " + shape_text(l[1]) +
             " in this model";
    }
    if (s[2] != l[2]) {
      return what + " '" + name + "' has dtype " + s[2].get<std::string>() + " in " + in + " but " +
             l[2].get<std::string>() + " in this model";
    }
    by_name.erase(it);
  }
  for (const auto& s : saved) {
    const auto name = s[0].get<std::string>();
    if (by_name.count(name)) return in + " has " + what + " '" + name + "' that this model lacks";
  }
  return {};
}

std::string kinds_text(const json& optimizers) {
  std::string s;
  for (const auto& o : optimizers) s += (s.empty() ? "" : ", ") + o.at("kind").get<std::string>();
  return s;
}

std::string count_text(size_t n) {
  return n == 0 ? std::string("none was given") : std::to_string(n) + (n == 1 ? " was given" : " were given");
}

std::string compare_optimizers(const json& saved, const json& live, const std::string& in) {
  if (saved.size() != live.size()) {
    return in + " holds the state of " + std::to_string(saved.size()) +
           (saved.size() == 1 ? " optimizer" : " optimizers") + (saved.empty() ? "" : " (" + kinds_text(saved) + ")") +
           " but " + count_text(live.size()) + (live.empty() ? "" : " (" + kinds_text(live) + ")");
  }
  for (size_t i = 0; i < saved.size(); ++i) {
    const std::string which = saved.size() == 1 ? "the optimizer" : "optimizer #" + std::to_string(i);
    const std::string order = saved.size() == 1 ? "" : " (optimizers are matched in the order given)";
    const auto saved_kind = saved[i].at("kind").get<std::string>();
    const auto live_kind = live[i].at("kind").get<std::string>();
    if (saved_kind != live_kind) {
      return which + " is " + saved_kind + " in " + in + " but " + live_kind + " was given" + order;
    }
    if (saved[i].at("groups") != live[i].at("groups")) {
      return which + "'s param groups hold " + saved[i]["groups"].dump() + " parameters in " + in + " but " +
             live[i]["groups"].dump() + " in the one given";
    }
  }
  return {};
}

std::string scheduler_text(const json& scheduler) {
  return scheduler.is_null() ? "none" : scheduler.at("kind").get<std::string>();
}

}  // namespace

std::string kind_of(const torch::optim::Optimizer& optimizer) { return c10::demangle(typeid(optimizer).name()); }

json fingerprint(const LiveState& live) {
  json optimizers = json::array();
  for (const auto* optimizer : live.optimizers) {
    json groups = json::array();
    for (const auto& g : optimizer->param_groups()) groups.push_back(g.params().size());
    optimizers.push_back({{"kind", kind_of(*optimizer)}, {"groups", groups}});
  }
  return {{"parameters", tensor_list(live.model->named_parameters())},
          {"buffers", tensor_list(live.model->named_buffers())},
          {"optimizers", optimizers},
          {"scheduler", live.scheduler ? json{{"kind", live.scheduler->kind()}} : json(nullptr)},
          {"cuda_generators", cuda_generator_count()}};
}

std::string first_mismatch(const json& saved, const json& live, std::string_view saved_in, Parts parts) {
  const std::string in(saved_in);
  if (!saved.is_object()) return in + " holds no description of its training state";
  try {
    if (auto why = compare_tensors("parameter", saved.at("parameters"), live.at("parameters"), in); !why.empty()) {
      return why;
    }
    if (auto why = compare_tensors("buffer", saved.at("buffers"), live.at("buffers"), in); !why.empty()) return why;
    if (parts.optimizers) {
      if (auto why = compare_optimizers(saved.at("optimizers"), live.at("optimizers"), in); !why.empty()) return why;
    }
    if (parts.scheduler) {
      const auto s = scheduler_text(saved.at("scheduler"));
      const auto l = scheduler_text(live.at("scheduler"));
      if (s != l) return "the scheduler is " + s + " in " + in + " but " + (l == "none" ? "none" : l) + " was given";
    }
    if (saved.at("cuda_generators") != live.at("cuda_generators")) {
      return in + " was written with " + saved.at("cuda_generators").dump() + " CUDA devices, this process has " +
             live.at("cuda_generators").dump();
    }
  } catch (const json::exception& e) {
    return "the description in " + in + " is malformed (" + e.what() + ")";
  }
  return {};
}

}  // namespace nansense::state
