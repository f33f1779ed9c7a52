// The SchedulerAdapter for LibTorch's own LRScheduler classes.
#include <c10/util/Type.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/serialize/archive.h>

#include <typeinfo>

#include "common/torch_compat.h"
#include "nansense/time_travel.h"

namespace nansense {

namespace {

class LRSchedulerAdapter : public SchedulerAdapter {
 public:
  explicit LRSchedulerAdapter(torch::optim::LRScheduler& scheduler) : scheduler_(scheduler) {}
  std::string kind() const override { return c10::demangle(typeid(scheduler_).name()); }
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("step_count", torch::tensor(static_cast<int64_t>(compat::lr_scheduler_step_count(scheduler_))));
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor count;
    archive.read("step_count", count);
    compat::lr_scheduler_step_count(scheduler_) = static_cast<unsigned>(count.item<int64_t>());
  }

 private:
  torch::optim::LRScheduler& scheduler_;
};

}  // namespace

std::shared_ptr<SchedulerAdapter> adapt_scheduler(torch::optim::LRScheduler& scheduler) {
  return std::make_shared<LRSchedulerAdapter>(scheduler);
}

}  // namespace nansense
