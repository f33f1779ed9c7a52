// What nansense costs a training loop, as ratios to the plain loop.
//
// Every variant trains the same model on the same synthetic batches: the
// Fashion-MNIST demo's CNN, and the transformer demo's text classifier (masked
// attention, many small ops: the tracer's worst case). Variants are
// interleaved round by round and the median taken, so a noisy neighbour slows
// all of them alike instead of one.

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "capture/host_buffers.h"
#include "numerics/bands.h"
#include "observer/observer.h"
#include "transformer/model.h"

namespace {

using namespace nansense::bench;

enum class Variant {
  kPlain,
  kDisabled,
  kDetach,
  kCaptureEveryBatch,
  kCaptureFresh,
  kCaptureUnchecked,
  kFloorCopies,   // the plain step, then the bytes a capture copies, into recycled memory
  kFloorSeeOps,   // the plain step under the dispatcher callback, every forward op's tensors handed to nobody
  kFloorReadOps,  // every op seen, forward and backward, each output's values read once for a NaN or Inf
};

// Every tensor a snapshot holds a copy of: what a capture copies.
std::vector<torch::Tensor> copied_by_a_capture(const nansense::BatchSnapshot& s) {
  std::vector<torch::Tensor> out;
  for (const auto* group : {&s.activations, &s.activation_gradients, &s.weights, &s.weight_gradients}) {
    for (const auto& [_, t] : *group) out.push_back(t);
  }
  for (const auto& [_, state] : s.optimizer_state) {
    for (const auto& [_, t] : state) out.push_back(t);
  }
  return out;
}

// Sees every op (the observer boxes each forward op's inputs and outputs)
// and does nothing with them.
struct SeesNothing : nansense::observer::Consumer {
  bool wants_backward() const override { return false; }
  void op_ended(const nansense::observer::Frame&, const std::vector<torch::Tensor>&,
                const std::vector<nansense::observer::Frame>&) override {}
};

// Sees every op, forward and backward, and reads each floating output once
// for a non-finite value, in place: the least a root-cause check of every
// op can do (the op tracer does this and keeps the ops' order and owners).
struct ReadsEveryOutput : nansense::observer::Consumer {
  int64_t non_finite = 0;
  bool wants_backward() const override { return true; }
  void op_ended(const nansense::observer::Frame&, const std::vector<torch::Tensor>& outputs,
                const std::vector<nansense::observer::Frame>&) override {
    for (const auto& t : outputs) {
      if (!t.is_floating_point() || t.numel() == 0) continue;
      if (const auto finite = nansense::numerics::all_finite_in_place(t); finite && !*finite) ++non_finite;
    }
  }
};

// The copies of one capture of this model: one captured batch, outside any timing.
template <class Bench>
std::vector<torch::Tensor> one_capture(std::vector<Batch>& batches) {
  torch::manual_seed(0);
  auto model = Bench::make();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto session = nansense::start(model, nansense::StartOptions().optimizer(&optimizer));
  session.detach();
  session.refresh();
  for (auto& batch : session.batches(batches, "train")) {
    Bench::step(model, optimizer, batch);
    break;
  }
  const auto snapshot = session.snapshot();
  session.close();
  if (!snapshot) throw std::runtime_error("no capture to measure the copies of");
  std::vector<torch::Tensor> sources;
  int64_t bytes = 0;
  for (const auto& t : copied_by_a_capture(*snapshot)) {
    sources.push_back(t.clone());
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  static bool said = false;
  if (!std::exchange(said, true)) {
    std::printf(
        "a capture copies %zu tensors, %.2f MB (activations, their gradients, weights, their gradients, "
        "optimizer state)\n",
        sources.size(), static_cast<double>(bytes) / 1e6);
  }
  return sources;
}

// A model the benchmark trains: how to build it and one plain step.
struct CnnBench {
  using Model = FashionCnn;
  static Model make() { return FashionCnn(); }
  static void step(Model& model, torch::optim::Optimizer& optimizer, const Batch& batch) {
    train_step(model, optimizer, batch);
  }
};

struct TransformerBench {
  using Model = TextClassifier;
  static Model make() { return TextClassifier(TextClassifierOptions()); }
  static void step(Model& model, torch::optim::Optimizer& optimizer, const Batch& batch) {
    optimizer.zero_grad();
    torch::cross_entropy_loss(model->forward(batch.data), batch.target).backward();
    optimizer.step();
  }
};

// Token batches shaped like the transformer demo's: 4..length real tokens, then padding.
std::vector<Batch> token_batches(int64_t count, int64_t batch_size) {
  const TextClassifierOptions o;
  std::vector<Batch> batches;
  for (int64_t i = 0; i < count; ++i) {
    auto tokens = torch::randint(1, o.vocab(), {batch_size, o.length()});
    auto lengths = torch::randint(4, o.length() + 1, {batch_size, 1});
    tokens.masked_fill_(torch::arange(o.length()).unsqueeze(0) >= lengths, kPadToken);
    batches.push_back({tokens, torch::randint(0, o.classes(), {batch_size})});
  }
  return batches;
}

// One timed pass over `batches`; returns milliseconds per batch, and in
// `faults` the training thread's minor page faults a batch. Model, optimizer
// and session are built outside the timed region.
template <class Bench>
double measure(Variant variant, std::vector<Batch>& batches, double* faults = nullptr) {
  torch::manual_seed(0);
  auto model = Bench::make();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  using Clock = ThreadCpuClock;
  Clock::time_point begin, end;
  ThreadUsage usage_begin;

  if (variant == Variant::kPlain) {
    usage_begin = ThreadUsage::now();
    begin = Clock::now();
    for (auto& batch : batches) Bench::step(model, optimizer, batch);
    end = Clock::now();
  } else if (variant == Variant::kFloorCopies) {
    // What copying alone costs: as many bytes as a capture of this model
    // copies, from tensors of the same shapes, into the recycled pool, the
    // last batch's copies held (as the published snapshot is) while the next
    // are written.
    const auto sources = one_capture<Bench>(batches);
    nansense::capture::HostBuffers buffers;
    std::vector<torch::Tensor> held, copies;
    usage_begin = ThreadUsage::now();
    begin = Clock::now();
    for (auto& batch : batches) {
      Bench::step(model, optimizer, batch);
      copies.clear();
      for (const auto& t : sources) copies.push_back(buffers.copy(t));
      buffers.end_capture();
      std::swap(held, copies);
    }
    end = Clock::now();
  } else if (variant == Variant::kFloorSeeOps || variant == Variant::kFloorReadOps) {
    // What seeing the ops alone costs: the observer installed for each batch
    // as a capture installs it, every forward op's inputs and outputs handed
    // to a consumer that does nothing (backward unobserved, as the capture
    // tracer alone leaves it); or, reading each op, the backward's ops too
    // and every output read once.
    SeesNothing nobody;
    ReadsEveryOutput reader;
    nansense::observer::Consumer* consumer =
        variant == Variant::kFloorSeeOps ? static_cast<nansense::observer::Consumer*>(&nobody) : &reader;
    usage_begin = ThreadUsage::now();
    begin = Clock::now();
    for (auto& batch : batches) {
      nansense::observer::Observer observer;
      observer.attach(consumer);
      Bench::step(model, optimizer, batch);
      observer.detach(consumer);
    }
    end = Clock::now();
  } else {
    auto options = nansense::StartOptions().optimizer(&optimizer);
    if (variant == Variant::kDisabled) options.enabled(false);
    // The capture alone: no guard, no root-cause op tracing of the batch.
    if (variant == Variant::kCaptureUnchecked) options.debug(nansense::DebugSettings().enabled(false));
    auto session = nansense::start(model, options);
    // No server runs, so nothing could release a pause.
    if (variant != Variant::kDisabled) session.detach();
    const bool capture = variant == Variant::kCaptureEveryBatch || variant == Variant::kCaptureFresh ||
                         variant == Variant::kCaptureUnchecked;
    // Every capture's copies in fresh memory, as before they were recycled.
    nansense::capture::HostBuffers::set_recycling(variant != Variant::kCaptureFresh);

    usage_begin = ThreadUsage::now();
    begin = Clock::now();
    // A request applies to the next batch to begin: ask before the first, then
    // during each batch for the one after it.
    if (capture) session.refresh();
    for (auto& batch : session.batches(batches, "train")) {
      Bench::step(model, optimizer, batch);
      if (capture) session.refresh();
    }
    end = Clock::now();
    nansense::capture::HostBuffers::set_recycling(true);
    // Guards the numbers: a capture variant that captured nothing would look cheap.
    const auto last = session.snapshot();
    if (capture && (!last || last->position.batch_idx + 1 != static_cast<int64_t>(batches.size()))) {
      std::fprintf(stderr, "warning: the last batch was not captured; capture timings are suspect\n");
    }
    session.close();
  }
  const auto n = static_cast<double>(batches.size());
  if (faults) *faults = (ThreadUsage::now() - usage_begin).faults / n;
  return std::chrono::duration<double, std::milli>(end - begin).count() / n;
}

struct Row {
  Variant variant;
  const char* name;
  const char* target;  // nullptr: reported, no target
  double max_ratio;
  std::vector<double> ms;      // per round
  std::vector<double> ratios;  // per round, against that round's plain loop
  std::vector<double> faults;  // per round, minor page faults a batch
};

// With `only` set (a profile of one variant), runs that variant alone for
// `rounds` passes and prints its time a batch; no ratios.
template <class Bench>
bool profile_only(const std::string& only, std::vector<Batch>& batches, int rounds) {
  static const std::map<std::string, Variant> kByName = {{"plain", Variant::kPlain},
                                                         {"disabled", Variant::kDisabled},
                                                         {"detach", Variant::kDetach},
                                                         {"capture", Variant::kCaptureEveryBatch},
                                                         {"capture-fresh", Variant::kCaptureFresh},
                                                         {"capture-unchecked", Variant::kCaptureUnchecked},
                                                         {"floor-copies", Variant::kFloorCopies},
                                                         {"floor-see-ops", Variant::kFloorSeeOps},
                                                         {"floor-read-ops", Variant::kFloorReadOps}};
  if (only.empty()) return false;
  const Variant variant = kByName.at(only);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) ms.push_back(measure<Bench>(variant, batches));
  std::printf("%s alone: %.3f ms/batch (median of %d passes)\n", only.c_str(), median(ms), rounds);
  return true;
}

template <class Bench>
void run(const char* title, std::vector<Batch> batches, int rounds, const char* capture_target, double capture_max,
         const std::string& only) {
  if (profile_only<Bench>(only, batches, rounds)) return;
  std::vector<Row> rows = {
      {Variant::kPlain, "plain loop", nullptr, 0, {}, {}, {}},
      {Variant::kDisabled, "enabled(false)", "<= 1.01", 1.01, {}, {}, {}},
      {Variant::kDetach, "DETACH", "<= 1.02", 1.02, {}, {}, {}},
      {Variant::kCaptureEveryBatch, "capture every batch", capture_target, capture_max, {}, {}, {}},
      {Variant::kCaptureFresh, "capture, fresh copies", nullptr, 0, {}, {}, {}},
      {Variant::kCaptureUnchecked, "capture, checks off", nullptr, 0, {}, {}, {}},
      {Variant::kFloorCopies, "floor: copies alone", nullptr, 0, {}, {}, {}},
      {Variant::kFloorSeeOps, "floor: seeing the ops", nullptr, 0, {}, {}, {}},
      {Variant::kFloorReadOps, "floor: reading each op", nullptr, 0, {}, {}, {}},
  };
  std::printf("\n%s: %d rounds of %zu synthetic batches\n", title, rounds, batches.size());
  std::fflush(stdout);

  measure<Bench>(Variant::kPlain, batches);  // warm-up: allocator, kernels, page faults
  for (int r = 0; r < rounds; ++r) {
    // Rotating the order keeps a slow stretch of the machine from always
    // landing on the same variant.
    std::vector<double> ms(rows.size()), faults(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % rows.size();
      ms[i] = measure<Bench>(rows[i].variant, batches, &faults[i]);
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].faults.push_back(faults[i]);
      rows[i].ms.push_back(ms[i]);
      rows[i].ratios.push_back(ms[i] / ms[0]);
    }
  }

  // The interquartile range of the per-round ratios shows how much is noise.
  std::printf("%-22s %10s %8s %16s %7s  %s\n", "variant", "ms/batch", "ratio", "ratio IQR", "faults", "target");
  for (auto& row : rows) {
    const double ratio = median(row.ratios);
    std::sort(row.ratios.begin(), row.ratios.end());
    const double q1 = row.ratios[row.ratios.size() / 4];
    const double q3 = row.ratios[(row.ratios.size() * 3) / 4];
    std::string verdict = "reported";
    if (row.variant == Variant::kPlain) {
      verdict = "baseline";
    } else if (row.target) {
      verdict = std::string(row.target) + (ratio <= row.max_ratio ? "  met" : "  MISSED");
    } else if (row.variant == Variant::kCaptureFresh) {
      verdict = "before (issue 58)";
    } else if (row.variant == Variant::kCaptureUnchecked) {
      verdict = "the capture without the numerical checks";
    } else if (row.variant == Variant::kFloorCopies) {
      verdict = "a capture's bytes copied, nothing else";
    } else if (row.variant == Variant::kFloorSeeOps) {
      verdict = "every forward op seen, nothing done";
    } else if (row.variant == Variant::kFloorReadOps) {
      verdict = "every op seen, backward too, its outputs read once";
    }
    std::printf("%-22s %10.3f %8.3f   [%5.3f, %5.3f] %7.0f  %s\n", row.name, median(row.ms), ratio, q1, q3,
                median(row.faults), verdict.c_str());
  }
  std::printf("faults: the training thread's minor page faults a batch (median over rounds)\n");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch_count = 30;
  int rounds = 15;
  std::string model = "both";
  std::string only;
  bool default_malloc = false;
  CLI::App app{"nansense overhead on the demos' models (synthetic data)."};
  app.add_option("--batches", batch_count, "Batches per timed pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Rounds; each times every variant once, in rotating order")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--model", model, "cnn, transformer or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"cnn", "transformer", "both"}));
  app.add_option("--only", only,
                 "Run one variant alone, no ratios (for a profiler): plain, disabled, detach, capture, capture-fresh, "
                 "capture-unchecked, floor-copies, floor-see-ops, floor-read-ops")
      ->check(CLI::IsMember({"plain", "disabled", "detach", "capture", "capture-fresh", "capture-unchecked",
                             "floor-copies", "floor-see-ops", "floor-read-ops"}));
  app.add_flag("--default-malloc", default_malloc,
               "Leave glibc's malloc thresholds dynamic (by default they are fixed: bench_common.h settle_allocator)");
  CLI11_PARSE(app, argc, argv);
  // Every pass runs in this one process: with glibc's dynamic thresholds the
  // large blocks one variant frees (a capture's copies) decide how often the
  // next variant's heap is trimmed and regrown (the plain loop took 0 or 1,500
  // page faults a batch depending on what ran before it).
  if (!default_malloc) settle_allocator();

  torch::set_num_threads(1);
  torch::manual_seed(0);
  std::printf("nansense overhead\n");
  std::printf("torch threads: 1 (torch::set_num_threads(1), for stable timings)\n");
  std::printf("glibc malloc thresholds: %s\n",
              default_malloc ? "dynamic (--default-malloc)" : "fixed (mmap 32 MiB, trim 128 MiB)");
  std::printf(
      "times are the training thread's CPU time; ratio = median over rounds of (variant / plain loop of the same "
      "round)\n");
  if (model != "transformer") {
    run<CnnBench>("demo CNN, batches of 64 [1x28x28]", synthetic_batches(batch_count, 64), rounds, "<= 1.10", 1.10,
                  only);
  }
  if (model != "cnn") {
    run<TransformerBench>("transformer demo's classifier, batches of 32 x 24 tokens with padding",
                          token_batches(batch_count, 32), rounds, "<= 1.20", 1.20, only);
  }
  return 0;
}
