// The SchedulerAdapter for LibTorch's own LRScheduler classes.
#include <c10/util/Type.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/serialize/archive.h>

#include <typeinfo>

#include "nansense/time_travel.h"

namespace nansense {

namespace {

// LRScheduler keeps its step count protected and offers no state dict; a
// pointer to member formed inside a derived class reaches it legally.
struct StepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& scheduler) { return scheduler.*(&StepCount::step_count_); }
};

class LRSchedulerAdapter : public SchedulerAdapter {
 public:
  explicit LRSchedulerAdapter(torch::optim::LRScheduler& scheduler) : scheduler_(scheduler) {}
  std::string kind() const override { return c10::demangle(typeid(scheduler_).name()); }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("step_count", torch::tensor(static_cast<int64_t>(StepCount::of(scheduler_))));
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor count;
    archive.read("step_count", count);
    StepCount::of(scheduler_) = static_cast<unsigned>(count.item<int64_t>());
  }

 private:
  torch::optim::LRScheduler& scheduler_;
};

}  // namespace

std::shared_ptr<SchedulerAdapter> adapt_scheduler(torch::optim::LRScheduler& scheduler) {
  return std::make_shared<LRSchedulerAdapter>(scheduler);
}

}  // namespace nansense
