// What the experiment machinery costs beyond the model's own work: a Grad-CAM
// and a 300-step Deep Dream on the demo CNN, each timed against the same
// number of plain forward+backward passes (same batch, gradient with respect
// to the input) measured in the same run. Target: ratio <= 1.2.
//
// The training thread's CPU time with one torch thread (bench_common.h);
// rounds alternate between the experiment and the plain passes so the
// machine's drifts hit both alike, and the ratio is the median over rounds.

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "experiments/experiments.h"
#include "state/isolation.h"

namespace {

using namespace nansense;
using namespace nansense::bench;

double time_ms(const std::function<void()>& f) {
  const double t0 = thread_cpu_ms();
  f();
  return thread_cpu_ms() - t0;
}

// `passes` plain forward+backward passes of `model` on `x`, gradient w.r.t. the input.
void plain(FashionCnn& model, const torch::Tensor& x, int64_t passes) {
  model->eval();
  for (int64_t i = 0; i < passes; ++i) {
    auto xi = x.detach().requires_grad_(true);
    auto g = torch::autograd::grad({model->forward(xi).sum()}, {xi})[0];
    (void)g;
  }
  model->train();
}

void experiment(FashionCnn& model, const torch::Tensor& x, const std::string& kind, const experiments::json& params) {
  const auto* spec = experiments::find_kind(kind);
  experiments::Context ctx;
  ctx.model = model.ptr().get();
  ctx.forward = [model](const std::vector<torch::Tensor>& in) mutable { return model->forward(in[0]); };
  ctx.inputs = {x};
  ctx.mean = {0.286};
  ctx.std = {0.353};
  experiments::Result result;
  state::ModelIsolation isolation(*model);
  experiments::run(*spec, "features.3", experiments::resolve_params(*spec, {params}).params, ctx, result);
  if (result.stage != experiments::Result::Stage::kDone) std::fprintf(stderr, "experiment did not finish\n");
}

void report(const char* name, int rounds, const std::function<void()>& exp, const std::function<void()>& base) {
  std::vector<double> ratios, exp_ms, base_ms;
  for (int r = 0; r < rounds; ++r) {
    const double b1 = time_ms(base);
    const double e = time_ms(exp);
    const double b2 = time_ms(base);
    const double b = (b1 + b2) / 2;
    ratios.push_back(e / b);
    exp_ms.push_back(e);
    base_ms.push_back(b);
  }
  const double ratio = median(ratios);
  std::printf("%-34s %9.1f ms  plain %9.1f ms  ratio %.3f  (target <= 1.2: %s)\n", name, median(exp_ms),
              median(base_ms), ratio, ratio <= 1.2 ? "met" : "missed");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Experiment machinery overhead against plain forward+backward passes");
  int rounds = 5;
  int steps = 300;
  app.add_option("--rounds", rounds, "Alternating rounds (the median is printed)");
  app.add_option("--steps", steps, "Deep Dream steps");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  torch::manual_seed(0);
  FashionCnn model;
  auto batch = torch::randn({8, 1, 28, 28});
  // Grad-CAM: one forward and one backward on 8 samples, repeated 20 times.
  report(
      "Grad-CAM x20 (batch 8)", rounds,
      [&] {
        for (int i = 0; i < 20; ++i) experiment(model, batch, "gradcam", {{"batch", 8}});
      },
      [&] { plain(model, batch, 20); });
  // Deep Dream: `steps` passes on 8 images (one per channel).
  auto noise = torch::randn({8, 1, 28, 28});
  report(
      "Deep Dream (8 channels)", rounds,
      [&] {
        experiment(model, batch, "deep_dream", {{"steps", steps}, {"channels", 8}});
      },
      [&] { plain(model, noise, steps); });
  return 0;
}
