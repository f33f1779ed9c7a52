// What every benchmark program shares: the demo's training step on synthetic
// Fashion-MNIST-shaped batches, the training thread's CPU clock, medians.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <random>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Held over one timed pass: a block of a given size (drawn by draw(): 0 to
// 124 KiB, in 64-byte steps) at the top of the heap, so every pass starts from
// another heap layout. The same loop runs up to 10% faster or slower depending
// on where its tensors land (cache sets, page boundaries: glibc.malloc.top_pad
// alone moves the plain loop from 19.2 to 21.8 ms a batch here), which would
// otherwise be read as a variant's cost. Draw the size in the parent, not in
// a forked child: a child's generator is a copy that never advances the
// parent's, so every pass would get the same layout.
class HeapShift {
 public:
  static size_t draw(std::mt19937_64& rng) { return 64 * std::uniform_int_distribution<size_t>(0, 124 * 16)(rng); }

  explicit HeapShift(size_t bytes) {
    if (bytes == 0) return;
    block_ = std::make_unique<char[]>(bytes);
    std::memset(block_.get(), 1, bytes);
  }

 private:
  std::unique_ptr<char[]> block_;
};

// Fixes glibc's allocator policy for the whole process. By default glibc
// raises its mmap and trim thresholds to the largest block freed so far
// (up to 32 MiB), so one large temporary (a snapshot's copies) changes how
// often the heap is trimmed and regrown for everything after it: the plain
// loop here takes 1,500-3,000 page faults a batch, the same loop after a
// capture under 100. Fixed thresholds make every variant (the plain loop
// included) run under the same policy, that of a long-running process whose
// heap has settled; the ratios then measure the variants' own work.
inline void settle_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

// The calling thread's user and system CPU time and its minor page faults,
// to split a pass's time between computing and the kernel's page handling.
struct ThreadUsage {
  double user_ms = 0, sys_ms = 0, faults = 0;
  static ThreadUsage now() {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    const auto ms = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
    };
    return {ms(u.ru_utime), ms(u.ru_stime), static_cast<double>(u.ru_minflt)};
  }
  ThreadUsage operator-(const ThreadUsage& o) const {
    return {user_ms - o.user_ms, sys_ms - o.sys_ms, faults - o.faults};
  }
};

// Runs `pass` (returning a few figures) in a child forked from this process
// and returns what it returned: every timed pass then starts from the same
// process state, whatever the passes before it left behind. In one process
// each variant followed the same predecessor round after round, and a heap
// grown or fragmented by one (scope all) showed up as the next one's cost
// (glibc trims and regrows the heap each batch: the plain loop takes about
// 3,000 page faults a batch here, a tenth of its time). The child must not
// need threads the parent started (one torch thread, no server). Runs
// `pass` here when fork fails.
template <class Pass>
std::vector<double> in_child(Pass&& pass) {
  int fds[2];
  if (pipe(fds) != 0) return pass();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return pass();
  }
  if (pid == 0) {
    close(fds[0]);
    const std::vector<double> out = pass();
    const auto bytes = static_cast<ssize_t>(out.size() * sizeof(double));
    const bool sent = write(fds[1], out.data(), static_cast<size_t>(bytes)) == bytes;
    _exit(sent ? 0 : 1);
  }
  close(fds[1]);
  std::vector<double> out;
  double value;
  while (read(fds[0], &value, sizeof value) == static_cast<ssize_t>(sizeof value)) out.push_back(value);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("a benchmark pass failed in its child process");
  }
  return out;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace nansense::bench
