// The snapshot budget (StartOptions::snapshot_budget): a captured batch's CPU
// copies keep only the leading samples of each batch tensor, the same number
// for all of them, so that together they fit a byte budget.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "nansense/tensor_stats.h"

namespace nansense::capture {

struct TraceResult;

// The budget's state for one capture; lives in its TraceResult, under grad_mu.
struct SampleBudget {
  int64_t bytes = 0;  // the cap (StartOptions::snapshot_budget); 0: no limit
  // StartOptions::snapshot_share: the copies stay within this share of the
  // training step's own memory, estimated as `base` (the process's resident
  // memory when the batch began, less nansense's own held copies) plus the
  // storage of the batch's outputs seen so far. 0: the cap alone.
  double share = 0;
  int64_t base = 0;
  int64_t outputs = 0;
  std::unordered_set<const void*> output_storages;
  // Per-sample bytes of the held activations whose gradient is still to come
  // (held too, the same size): counted before it arrives, so the forward
  // already leaves room for the backward.
  std::map<std::string, int64_t> awaiting_gradient;
  int64_t awaiting_total = 0;  // the sum of awaiting_gradient's bytes
  // held_bytes(trace), kept as hold() goes (each hold would otherwise walk
  // every copy so far); taken again where the copies change otherwise.
  int64_t held_total = 0;
  int64_t batch_size = 0;  // 0: unknown (no tensor input), nothing is trimmed
  // Samples each batch tensor keeps; starts at the last capture's fit and
  // only shrinks during a batch, so every tensor ends with the same count.
  int64_t kept = 0;

  // The held copies of batch tensors; each holds exactly `kept` samples.
  std::unordered_set<const c10::TensorImpl*> batch_copies;

  // The bytes the copies may hold now: the cap, or the share of the step's
  // memory when that is smaller; 0: no limit.
  int64_t limit() const;

  // A live tensor whose leading dimension is the batch's.
  bool is_batch(const torch::Tensor& t) const { return batch_size > 0 && t.dim() > 0 && t.size(0) == batch_size; }
  bool is_batch_copy(const torch::Tensor& t) const { return batch_copies.count(t.unsafeGetTensorImpl()) > 0; }
};

// The samples that fit `budget_bytes` given what one sample of the batch
// tensors costs and what the other copies cost; between 1 and batch_size.
int64_t samples_that_fit(int64_t budget_bytes, int64_t per_sample_bytes, int64_t fixed_bytes, int64_t batch_size);

// Copies `t` to the CPU as held[name] (the trace's activations or gradients),
// keeping budget.kept samples of a batch tensor; when samples are left out,
// `stats[name]` gets the whole tensor's statistics, computed on its device
// first. Then, if the copies exceed the budget, shrinks every held batch
// tensor to the samples that fit (at most half of what they held, as the rest
// of the batch is still to come). `gradient_follows`: an activation whose
// gradient will be held too (counted from now). The caller holds the trace's
// grad_mu.
void hold(TraceResult& trace, std::map<std::string, torch::Tensor>& held, std::map<std::string, TensorStats>& stats,
          const std::string& name, const torch::Tensor& t, bool gradient_follows = false);

// The process's resident memory in bytes (0 where it cannot be read).
int64_t resident_bytes();

// Host bytes of the held activations, gradients and inputs (an input shares
// its activation's storage and is counted once).
int64_t held_bytes(const TraceResult& trace);
// What they would hold with every sample of the batch.
int64_t full_bytes(const TraceResult& trace);
// Bytes of one sample of every held batch tensor.
int64_t per_sample_bytes(const TraceResult& trace);
// The samples per batch tensor a capture of the same model should start
// from (0: all); the caller holds grad_mu.
int64_t next_start_samples(const TraceResult& trace);

}  // namespace nansense::capture
