#include "capture/sample_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "capture/tracer.h"
#include "common/tensor_stats.h"

namespace nansense::capture {

namespace {

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

template <class Visit>
void for_each_held(const TraceResult& trace, Visit&& visit) {
  for (const auto& [_, t] : trace.activations) visit(t);
  for (const auto& [_, t] : trace.gradients) visit(t);
}

// The first `kept` samples of a held copy, in storage of their own.
torch::Tensor leading(const torch::Tensor& t, int64_t kept) { return t.narrow(0, 0, kept).clone(); }

void shrink(TraceResult& trace, int64_t kept) {
  SampleBudget& budget = trace.budget;
  std::unordered_set<const c10::TensorImpl*> shortened;
  auto trim = [&](std::map<std::string, torch::Tensor>& held, std::map<std::string, TensorStats>& stats) {
    for (auto& [name, t] : held) {
      if (!budget.is_batch_copy(t)) continue;
      // Held whole until now: its statistics come from the complete copy.
      if (budget.kept == budget.batch_size) stats[name] = common::tensor_stats(t);
      auto shorter = leading(t, kept);
      for (auto& input : trace.inputs) {
        if (input.is_same(t)) input = shorter;
      }
      shortened.insert(shorter.unsafeGetTensorImpl());
      t = std::move(shorter);
    }
  };
  trim(trace.activations, trace.activation_stats);
  trim(trace.gradients, trace.gradient_stats);
  budget.batch_copies = std::move(shortened);
  budget.kept = kept;
  budget.held_total = held_bytes(trace);
}

void await_gradient(SampleBudget& budget, const std::string& name, int64_t per_sample) {
  auto it = budget.awaiting_gradient.find(name);
  if (it != budget.awaiting_gradient.end()) {
    budget.awaiting_total -= it->second;
    if (per_sample == 0) {
      budget.awaiting_gradient.erase(it);
    } else {
      it->second = per_sample;
    }
  } else if (per_sample != 0) {
    budget.awaiting_gradient.emplace(name, per_sample);
  }
  budget.awaiting_total += per_sample;
}

}  // namespace

int64_t resident_bytes() {
  // Read once a captured batch: open/read rather than stdio's buffered
  // stream, which cost several times the read itself.
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128];
  const ssize_t n = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  long long size = 0, resident = 0;
  if (std::sscanf(text, "%lld %lld", &size, &resident) != 2) return 0;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

int64_t SampleBudget::limit() const {
  if (bytes <= 0 || share <= 0) return bytes;
  return std::min<int64_t>(bytes, static_cast<int64_t>(share * static_cast<double>(base + outputs)));
}

int64_t samples_that_fit(int64_t budget_bytes, int64_t per_sample, int64_t fixed, int64_t batch_size) {
  if (per_sample <= 0) return batch_size;
  const int64_t room = budget_bytes - fixed;
  return std::clamp<int64_t>(room / per_sample, 1, std::max<int64_t>(batch_size, 1));
}

int64_t held_bytes(const TraceResult& trace) {
  int64_t total = 0;
  for_each_held(trace, [&](const torch::Tensor& t) { total += bytes_of(t); });
  return total;
}

int64_t per_sample_bytes(const TraceResult& trace) {
  int64_t total = 0;
  for_each_held(trace, [&](const torch::Tensor& t) {
    if (trace.budget.is_batch_copy(t) && t.size(0) > 0) total += bytes_of(t) / t.size(0);
  });
  return total;
}

int64_t full_bytes(const TraceResult& trace) {
  int64_t total = 0;
  for_each_held(trace, [&](const torch::Tensor& t) {
    total += trace.budget.is_batch_copy(t) && t.size(0) > 0 ? bytes_of(t) / t.size(0) * trace.budget.batch_size
                                                            : bytes_of(t);
  });
  return total;
}

int64_t next_start_samples(const TraceResult& trace) {
  const SampleBudget& budget = trace.budget;
  if (budget.bytes <= 0 || budget.batch_size <= 0) return 0;
  const int64_t per_sample = per_sample_bytes(trace);
  const int64_t fixed = held_bytes(trace) - per_sample * budget.kept;
  return samples_that_fit(budget.limit(), per_sample, fixed, budget.batch_size);
}

void hold(TraceResult& trace, std::map<std::string, torch::Tensor>& held, std::map<std::string, TensorStats>& stats,
          const std::string& name, const torch::Tensor& t, bool gradient_follows) {
  SampleBudget& budget = trace.budget;
  // A layer's later op replaces its earlier output.
  stats.erase(name);
  if (auto old = held.find(name); old != held.end()) {
    budget.batch_copies.erase(old->second.unsafeGetTensorImpl());
    budget.held_total -= bytes_of(old->second);
  }
  const bool gradient = &held == &trace.gradients;
  if (gradient) await_gradient(budget, name, 0);
  if (!gradient && t.has_storage() && budget.output_storages.insert(t.storage().unsafeGetStorageImpl()).second) {
    budget.outputs += static_cast<int64_t>(t.storage().nbytes());
  }
  const bool batch = budget.bytes > 0 && budget.is_batch(t);
  torch::Tensor leading;
  if (batch && budget.kept < budget.batch_size) {
    stats[name] = common::tensor_stats(t);
    leading = t.detach().narrow(0, 0, budget.kept);
  }
  const torch::Tensor& live = leading.defined() ? leading : t;
  std::optional<double> abs_sum;
  auto& copy = held[name] = trace.buffers ? trace.buffers->copy(live, &abs_sum)
                                          : live.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  budget.held_total += bytes_of(copy);
  if (abs_sum) {
    trace.copied_abs_sums.insert_or_assign(
        copy.unsafeGetTensorImpl(),
        TraceResult::CopiedSum{
            c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(copy.getIntrusivePtr()), copy._version(),
            *abs_sum});
  }
  if (!batch) return;
  budget.batch_copies.insert(copy.unsafeGetTensorImpl());
  if (!gradient) await_gradient(budget, name, gradient_follows && copy.size(0) > 0 ? bytes_of(copy) / copy.size(0) : 0);
  const int64_t awaiting = budget.awaiting_total;
  const int64_t limit = budget.limit();
  const int64_t total = budget.held_total + awaiting * budget.kept;
  if (total <= limit || budget.kept <= 1) return;
  const int64_t per_sample = per_sample_bytes(trace) + awaiting;
  const int64_t fixed = total - per_sample * budget.kept;
  const int64_t fit = samples_that_fit(limit, per_sample, fixed, budget.batch_size);
  shrink(trace, std::max<int64_t>(1, std::min(fit, budget.kept / 2)));
}

}  // namespace nansense::capture
