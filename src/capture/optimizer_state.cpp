#include "capture/optimizer_state.h"

#include <unordered_map>

#include "capture/host_buffers.h"
#include "common/torch_compat.h"

namespace nansense::capture {

namespace {

using State = std::map<std::string, torch::Tensor>;
using Hyper = std::map<std::string, double>;

torch::Tensor scalar(int64_t v) { return torch::tensor(v, torch::kInt64); }

// How a state tensor is read: live, or copied to the CPU (into recycled
// memory when the snapshot has a pool).
struct Reading {
  bool copy = true;
  HostBuffers* buffers = nullptr;
};

void put(State& s, const char* key, const torch::Tensor& t, const Reading& how) {
  if (!t.defined()) return;
  if (!how.copy) {
    s[key] = t;
  } else {
    s[key] = how.buffers ? how.buffers->copy(t) : t.detach().to(torch::kCPU, false, true);
  }
}

// Adam and AdamW keep the same state and hyperparameters under different types.
template <class ParamState>
State adam_state(const ParamState& st, const Reading& how) {
  State s;
  s["step"] = scalar(st.step());
  put(s, "exp_avg", st.exp_avg(), how);
  put(s, "exp_avg_sq", st.exp_avg_sq(), how);
  put(s, "max_exp_avg_sq", st.max_exp_avg_sq(), how);
  return s;
}

template <class Options>
Hyper adam_hyper(const Options& o) {
  return {{"lr", o.lr()},   {"beta1", std::get<0>(o.betas())},  {"beta2", std::get<1>(o.betas())},
          {"eps", o.eps()}, {"weight_decay", o.weight_decay()}, {"amsgrad", o.amsgrad() ? 1.0 : 0.0}};
}

State read_state(const torch::optim::OptimizerParamState& base, const Reading& how) {
  State s;
  if (auto* st = dynamic_cast<const torch::optim::SGDParamState*>(&base)) {
    put(s, "momentum_buffer", st->momentum_buffer(), how);
  } else if (auto* st = dynamic_cast<const torch::optim::AdamParamState*>(&base)) {
    s = adam_state(*st, how);
  } else if (auto* st = dynamic_cast<const torch::optim::AdamWParamState*>(&base)) {
    s = adam_state(*st, how);
  } else if (auto* st = dynamic_cast<const torch::optim::RMSpropParamState*>(&base)) {
    s["step"] = scalar(st->step());
    put(s, "square_avg", st->square_avg(), how);
    put(s, "momentum_buffer", st->momentum_buffer(), how);
    put(s, "grad_avg", st->grad_avg(), how);
  } else if (auto* st = dynamic_cast<const torch::optim::AdagradParamState*>(&base)) {
    s["step"] = scalar(st->step());
    put(s, "sum", st->sum(), how);
  }
  return s;
}

Hyper read_hyper(const torch::optim::OptimizerOptions& base) {
  Hyper h;
  if (auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&base)) {
    h = {{"lr", o->lr()},
         {"momentum", o->momentum()},
         {"dampening", o->dampening()},
         {"weight_decay", o->weight_decay()},
         {"nesterov", o->nesterov() ? 1.0 : 0.0}};
  } else if (auto* o = dynamic_cast<const torch::optim::AdamOptions*>(&base)) {
    h = adam_hyper(*o);
  } else if (auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&base)) {
    h = adam_hyper(*o);
  } else if (auto* o = dynamic_cast<const torch::optim::RMSpropOptions*>(&base)) {
    h = {{"lr", o->lr()},
         {"alpha", o->alpha()},
         {"eps", o->eps()},
         {"weight_decay", o->weight_decay()},
         {"momentum", o->momentum()},
         {"centered", o->centered() ? 1.0 : 0.0}};
  } else if (auto* o = dynamic_cast<const torch::optim::AdagradOptions*>(&base)) {
    h = {{"lr", o->lr()},
         {"lr_decay", o->lr_decay()},
         {"weight_decay", o->weight_decay()},
         {"initial_accumulator_value", o->initial_accumulator_value()},
         {"eps", o->eps()}};
  } else {
    h = {{"lr", base.get_lr()}};
  }
  return h;
}

}  // namespace

OptimizerView read_optimizer(torch::optim::Optimizer& optimizer, const torch::nn::Module& model, bool copy_to_cpu,
                             HostBuffers* buffers) {
  torch::NoGradGuard no_grad;
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& p : model.named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();

  OptimizerView view;
  for (auto& group : optimizer.param_groups()) {
    Hyper hyper = read_hyper(group.options());
    for (auto& p : group.params()) {
      auto name = names.find(p.unsafeGetTensorImpl());
      if (name == names.end()) continue;  // a parameter outside the debugged model
      view.hyperparams[name->second] = hyper;
      if (const auto* state = compat::optimizer_state(optimizer, p))
        view.state[name->second] = read_state(*state, Reading{copy_to_cpu, buffers});
    }
  }
  return view;
}

}  // namespace nansense::capture
