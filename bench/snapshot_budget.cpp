// The snapshot budget on a ResNet-50-sized model (bottleneck blocks [3, 4, 6,
// 3], 224 x 224 inputs, random weights and data, CPU): one batch is captured
// and paused; the program prints the snapshot's bytes (held, and what every
// sample would take), the time from the pause to the first strip a page gets
// over HTTP, and the process's peak memory before and after the capture.
//
//   build/bench/snapshot_budget [--batch 64] [--image 224] [--budget-mib 512]
#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "integration/http_client.h"

namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

struct BottleneckImpl : nn::Module {
  BottleneckImpl(int64_t in, int64_t width, int64_t stride) {
    const int64_t out = width * 4;
    conv1 = register_module("conv1", conv(in, width, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(width));
    conv2 = register_module("conv2", conv(width, width, 3, stride));
    bn2 = register_module("bn2", nn::BatchNorm2d(width));
    conv3 = register_module("conv3", conv(width, out, 1));
    bn3 = register_module("bn3", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      downsample = register_module("downsample", nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(bn1(conv1(x)));
    h = torch::relu(bn2(conv2(h)));
    h = bn3(conv3(h));
    return torch::relu(h + (downsample ? downsample->forward(x) : x));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

// torchvision's resnet50 layout: 25.6 M parameters.
struct ResNet50Impl : nn::Module {
  explicit ResNet50Impl(int64_t classes) {
    stem = register_module("stem", nn::Sequential(conv(3, 64, 7, 2), nn::BatchNorm2d(64), nn::ReLU(),
                                                  nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))));
    int64_t in = 64;
    const int64_t blocks[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage) {
      nn::Sequential layer;
      const int64_t width = 64 << stage;
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        layer->push_back(Bottleneck(in, width, b == 0 && stage > 0 ? 2 : 1));
        in = width * 4;
      }
      stages.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    fc = register_module("fc", nn::Linear(in, classes));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = stem->forward(x);
    for (auto& s : stages) h = s->forward(h);
    return fc(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  nn::Sequential stem{nullptr};
  std::vector<nn::Sequential> stages;
  nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet50);

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024;  // KiB on Linux
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("nansense snapshot budget on a ResNet-50-sized model");
  int64_t batch = 64, image = 224, budget_mib = 512;
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--image", image, "input height and width")->check(CLI::Range(32, 512));
  app.add_option("--budget-mib", budget_mib, "snapshot budget in MiB (0 keeps every sample: beware the memory)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it is measured

  torch::manual_seed(0);
  ResNet50 model(1000);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::vector<std::pair<torch::Tensor, torch::Tensor>> data;
  for (int i = 0; i < 2; ++i)
    data.emplace_back(torch::randn({batch, 3, image, image}), torch::randint(0, 1000, {batch}));
  auto step = [&](const torch::Tensor& x, const torch::Tensor& y) {
    optimizer.zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
    optimizer.step();
  };
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  std::printf("ResNet-50: %.1f M parameters, batch %lld x 3 x %lld x %lld, %d torch threads, budget %lld MiB\n",
              static_cast<double>(parameters) / 1e6, static_cast<long long>(batch), static_cast<long long>(image),
              static_cast<long long>(image), torch::get_num_threads(), static_cast<long long>(budget_mib));

  // The plain loop's step and peak, before nansense sees the model.
  auto t = Clock::now();
  step(data[0].first, data[0].second);
  const double plain_ms = ms_since(t);
  const double plain_peak = peak_rss_mib();
  std::printf("plain step:                %8.0f ms   peak RSS %6.0f MiB\n", plain_ms, plain_peak);

  auto session =
      nansense::start(model, nansense::StartOptions()
                                 .optimizer(&optimizer)
                                 .snapshot_budget(budget_mib << 20)
                                 .serve(nansense::ServeOptions().port(0).open_browser(false).print_banner(false)));
  const int port = std::stoi(session.url().substr(session.url().rfind(':') + 1));
  Clock::time_point batch_start;
  std::thread loop([&] {
    for (auto& b : session.batches(data, "train")) {
      batch_start = Clock::now();
      step(b.first, b.second);
    }
    session.close();
  });
  if (session.wait_until_stopped(std::chrono::minutes(30)) != nansense::RunState::kPaused) {
    std::fprintf(stderr, "the loop did not pause at its first batch\n");
    session.detach();
    loop.join();
    return 1;
  }
  const auto paused = Clock::now();
  const double captured_ms = std::chrono::duration<double, std::milli>(paused - batch_start).count();
  // What a page does on a new snapshot: the summary, then the cards' strips.
  auto summary = nansense::testing::http_request(port, "GET", "/api/snapshot");
  const double summary_ms = ms_since(paused);
  auto strip = nansense::testing::http_request(port, "GET", "/api/render/strip?layer=stem.0&kind=activation&sample=0");
  const double strip_ms = ms_since(paused);
  auto gradient =
      nansense::testing::http_request(port, "GET", "/api/render/strip?layer=layer4.2.conv3&kind=gradient&sample=0");
  const double gradient_ms = ms_since(paused);

  auto snap = session.snapshot();
  std::printf("captured step (to pause):  %8.0f ms   (%.2fx the plain step)\n", captured_ms, captured_ms / plain_ms);
  std::printf(
      "snapshot: %lld of %lld samples kept; held %.0f MiB of activations, gradients and inputs "
      "(every sample: %.0f MiB); parameters, gradients, momentum %.0f MiB\n",
      static_cast<long long>(snap->samples_kept), static_cast<long long>(snap->batch_size), mib(snap->held_bytes),
      mib(snap->full_bytes), mib(snap->parameter_bytes));
  std::printf("pause -> snapshot summary: %8.0f ms   (HTTP %u, %zu bytes)\n", summary_ms, summary.status,
              summary.body.size());
  std::printf("pause -> first strip:      %8.0f ms   (HTTP %u, stem.0 activation)\n", strip_ms, strip.status);
  std::printf("pause -> a gradient strip: %8.0f ms   (HTTP %u, layer4.2.conv3)\n", gradient_ms, gradient.status);
  std::printf("peak RSS:                  %8.0f MiB  (plain loop %.0f MiB: +%.0f MiB)\n", peak_rss_mib(), plain_peak,
              peak_rss_mib() - plain_peak);
  session.detach();
  loop.join();
  return strip.status == 200 && gradient.status == 200 ? 0 : 1;
}
