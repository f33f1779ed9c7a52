// What every benchmark program shares: the demo's training step on synthetic
// Fashion-MNIST-shaped batches, the training thread's CPU clock, medians.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

#include "model.h"

namespace nansense::bench {

using Batch = torch::data::Example<>;

inline std::vector<Batch> synthetic_batches(int64_t count, int64_t batch_size) {
  std::vector<Batch> batches;
  batches.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back({torch::randn({batch_size, 1, 28, 28}), torch::randint(0, 10, {batch_size})});
  }
  return batches;
}

// One step of the plain loop every ratio is taken against.
inline void train_step(FashionCnn& model, torch::optim::Optimizer& optimizer, const Batch& batch) {
  optimizer.zero_grad();
  torch::nll_loss(model->forward(batch.data), batch.target).backward();
  optimizer.step();
}

// CPU time of the calling thread: on a shared, noisy machine it leaves out the
// time the thread was descheduled, which wall-clock time does not. With one
// torch thread every variant's work (and nansense's) runs on this thread.
struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ThreadCpuClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(duration(static_cast<rep>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec));
  }
};

inline double thread_cpu_ms() {
  return std::chrono::duration<double, std::milli>(ThreadCpuClock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace nansense::bench
