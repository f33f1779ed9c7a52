// What nansense costs a training loop, as ratios to the plain loop.
//
// Every variant trains the demo's CNN on the same synthetic Fashion-MNIST-shaped
// batches. Variants are interleaved round by round and the median taken, so a
// noisy neighbour slows all of them alike instead of one.

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "model.h"

namespace {

using Batch = torch::data::Example<>;

std::vector<Batch> synthetic_batches(int64_t count, int64_t batch_size) {
  std::vector<Batch> batches;
  batches.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    batches.push_back({torch::randn({batch_size, 1, 28, 28}), torch::randint(0, 10, {batch_size})});
  }
  return batches;
}

void train_step(FashionCnn& model, torch::optim::Optimizer& optimizer, const Batch& batch) {
  optimizer.zero_grad();
  auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
  loss.backward();
  optimizer.step();
}

enum class Variant { kPlain, kDisabled, kDetach, kCaptureEveryBatch };

// One timed pass over `batches`; returns milliseconds per batch. Model,
// optimizer and session are built outside the timed region.
double measure(Variant variant, std::vector<Batch>& batches) {
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  using Clock = std::chrono::steady_clock;
  Clock::time_point begin, end;

  if (variant == Variant::kPlain) {
    begin = Clock::now();
    for (auto& batch : batches) train_step(model, optimizer, batch);
    end = Clock::now();
  } else {
    auto options = nansense::StartOptions().optimizer(&optimizer);
    if (variant == Variant::kDisabled) options.enabled(false);
    auto session = nansense::start(model, options);
    // No server runs, so nothing could release a pause.
    if (variant != Variant::kDisabled) session.detach();
    const bool capture = variant == Variant::kCaptureEveryBatch;

    begin = Clock::now();
    // A request applies to the next batch to begin: ask before the first, then
    // during each batch for the one after it.
    if (capture) session.request_snapshot();
    for (auto& batch : session.batches(batches, "train")) {
      train_step(model, optimizer, batch);
      if (capture) session.request_snapshot();
    }
    end = Clock::now();
    // Guards the numbers: a capture variant that captured nothing would look cheap.
    const auto last = session.snapshot();
    if (capture && (!last || last->position.batch_idx + 1 != static_cast<int64_t>(batches.size()))) {
      std::fprintf(stderr, "warning: the last batch was not captured; capture timings are suspect\n");
    }
    session.close();
  }
  return std::chrono::duration<double, std::milli>(end - begin).count() /
         static_cast<double>(batches.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch_count = 200;
  int rounds = 3;
  CLI::App app{"nansense overhead on the Fashion-MNIST demo's CNN (synthetic data)."};
  app.add_option("--batches", batch_count, "Batches per timed pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "Interleaved rounds; the median is reported")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  torch::set_num_threads(1);
  torch::manual_seed(0);
  auto batches = synthetic_batches(batch_count, 64);

  struct Row {
    Variant variant;
    const char* name;
    const char* target;  // nullptr: reported, no target
    double max_ratio;
    std::vector<double> samples;
  };
  std::vector<Row> rows = {
      {Variant::kPlain, "plain loop", nullptr, 0, {}},
      {Variant::kDisabled, "enabled(false)", "<= 1.01", 1.01, {}},
      {Variant::kDetach, "DETACH", "<= 1.02", 1.02, {}},
      {Variant::kCaptureEveryBatch, "capture every batch", nullptr, 0, {}},
  };

  std::printf("nansense overhead: demo CNN, %lld synthetic batches of 64 [1x28x28], %d rounds, median\n",
              static_cast<long long>(batch_count), rounds);
  std::printf("torch threads: 1 (torch::set_num_threads(1), for stable timings)\n");
  std::fflush(stdout);

  measure(Variant::kPlain, batches);  // warm-up: allocator, kernels, page faults
  for (int r = 0; r < rounds; ++r) {
    for (auto& row : rows) row.samples.push_back(measure(row.variant, batches));
  }

  const double plain = median(rows.front().samples);
  // The spread (half the min-max range, relative to the median) shows how much
  // of a ratio is noise.
  std::printf("\n%-22s %10s %8s %8s  %s\n", "variant", "ms/batch", "spread", "ratio", "target");
  for (const auto& row : rows) {
    const double ms = median(row.samples);
    const double ratio = ms / plain;
    std::string verdict = "reported";
    if (row.variant == Variant::kPlain) {
      verdict = "baseline";
    } else if (row.target) {
      verdict = std::string(row.target) + (ratio <= row.max_ratio ? "  met" : "  MISSED");
    }
    const auto [lo, hi] = std::minmax_element(row.samples.begin(), row.samples.end());
    const double spread = (*hi - *lo) / 2 / ms * 100;
    std::printf("%-22s %10.3f %7.1f%% %8.3f  %s\n", row.name, ms, spread, ratio, verdict.c_str());
  }
  return 0;
}
