// A small GAN with the nansense debugger attached: a generator learns the
// classic ring of eight Gaussians in the plane, made in the program from a
// fixed seed.
//
// One parent module holds both networks (G and D), each with its own Adam
// optimizer, and every batch runs the discriminator three times: on real
// points, on generated ones for D's loss (detached), and on generated ones for
// G's loss. The debugger shows each call as its own layers (D.0, D.0#2,
// D.0#3) and each parameter with its own optimizer's state.

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "stop_signal.h"
#include "take.h"

namespace {

struct Flags {
  int port = 8080;
  std::string host = "127.0.0.1";
  int64_t epochs = 10;
  int64_t batch_size = 64;
  bool no_browser = false;
  bool detach = false;
  int64_t limit_batches = 0;
  bool exit_when_done = false;
};

constexpr int64_t kNoise = 8;
constexpr int64_t kHidden = 64;
constexpr int64_t kPoints = 16384;
constexpr int64_t kModes = 8;
constexpr double kRadius = 2.0;
constexpr double kSpread = 0.1;

// The submodule names are the layer names: "G.0" is the generator's first
// linear layer, "D.4" the discriminator's output.
struct GanImpl : torch::nn::Module {
  GanImpl()
      : G(register_module("G", torch::nn::Sequential(torch::nn::Linear(kNoise, kHidden), torch::nn::ReLU(),
                                                     torch::nn::Linear(kHidden, kHidden), torch::nn::ReLU(),
                                                     torch::nn::Linear(kHidden, 2)))),
        D(register_module("D",
                          torch::nn::Sequential(torch::nn::Linear(2, kHidden),
                                                torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                                torch::nn::Linear(kHidden, kHidden),
                                                torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
                                                torch::nn::Linear(kHidden, 1)))) {}
  torch::nn::Sequential G, D;  // D gives logits
};
TORCH_MODULE(Gan);

torch::Tensor mode_centres() {
  auto angle = torch::arange(kModes, torch::kFloat32) * (2 * M_PI / kModes);
  return torch::stack({torch::cos(angle), torch::sin(angle)}, 1) * kRadius;
}

// The real data: points around the centres, from a generator of their own so
// the data never depends on (or moves) torch's RNG.
torch::Tensor ring_of_gaussians(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> mode(0, kModes - 1);
  std::normal_distribution<float> jitter(0.0f, static_cast<float>(kSpread));
  auto centres = mode_centres();
  auto c = centres.accessor<float, 2>();
  auto points = torch::empty({count, 2});
  auto p = points.accessor<float, 2>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t m = mode(rng);
    p[i][0] = c[m][0] + jitter(rng);
    p[i][1] = c[m][1] + jitter(rng);
  }
  return points;
}

// How good the generator is: the share of its points near some centre, and
// how many centres get at least 2% of them (a collapsed GAN covers few).
void report_quality(Gan& gan, int64_t epoch, int64_t epochs, double d_loss, double g_loss) {
  torch::NoGradGuard no_grad;
  auto fake = gan->G->forward(torch::randn({2048, kNoise}));
  auto distance = torch::cdist(fake, mode_centres());  // [2048, modes]
  auto [nearest, which] = distance.min(1);
  auto near = nearest.lt(3 * kSpread);
  const double near_share = near.to(torch::kFloat64).mean().item<double>();
  auto per_mode = torch::bincount(which.masked_select(near), {}, kModes);
  const int64_t covered = per_mode.gt(0.02 * fake.size(0)).sum().item<int64_t>();
  std::cout << "epoch " << epoch + 1 << "/" << epochs << "  D loss " << d_loss << "  G loss " << g_loss
            << "  generated points near a mode " << std::setprecision(1) << 100 * near_share << "%"
            << std::setprecision(4) << "  modes covered " << covered << "/" << kModes << std::endl;
}

void release(nansense::Session& session) {
  std::cout << "\nStopping…" << std::endl;
  try {
    session.set_debug_settings(session.debug_settings().enabled(false));
    session.detach();
  } catch (...) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything can start a thread (torch, the server).
  StopSignal stop_signal;

  Flags flags;
  CLI::App app{"Train a small GAN on a ring of eight Gaussians under the nansense debugger."};
  app.add_option("--port", flags.port, "UI port (0 picks a free one)")->capture_default_str();
  app.add_option("--host", flags.host, "UI bind address")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Training epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", flags.batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-browser", flags.no_browser, "Do not open a browser tab");
  app.add_flag("--detach", flags.detach, "Train without pausing (the UI stays live)");
  app.add_option("--limit-batches", flags.limit_batches, "Cap batches per epoch (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--exit-when-done", flags.exit_when_done, "Exit after training instead of keeping the UI up");
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(0);
  const auto real_points = ring_of_gaussians(kPoints, /*seed=*/1);
  const int64_t all_batches = (kPoints + flags.batch_size - 1) / flags.batch_size;
  const int64_t batches = flags.limit_batches > 0 ? std::min(all_batches, flags.limit_batches) : all_batches;

  Gan gan;
  const auto adam = torch::optim::AdamOptions(1e-3).betas({0.5, 0.999});
  torch::optim::Adam d_opt(gan->D->parameters(), adam);
  torch::optim::Adam g_opt(gan->G->parameters(), adam);

  auto session = nansense::start(gan, nansense::StartOptions()
                                          .optimizers({&d_opt, &g_opt})
                                          .epochs(flags.epochs)
                                          .phases(nansense::PhaseCounts{{"train", batches}})
                                          .port(flags.port)
                                          .host(flags.host)
                                          .open_browser(!flags.no_browser));
  stop_signal.watch([&session] { release(session); });
  if (flags.detach) session.detach();

  auto bce = [](const torch::Tensor& logits, double label) {
    return torch::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
  };

  std::cout << std::fixed << std::setprecision(4);
  // The time-travel epoch loop checkpoints both optimizers at every epoch start,
  // in a folder of this run's own.
  const auto cache_dir = std::filesystem::temp_directory_path() / ("nansense_gan_" + std::to_string(::getpid()));
  session.epochs(
      flags.epochs,
      [&](int64_t epoch) {
        if (stop_signal.requested()) return;
        // A fresh shuffle of the real points each epoch, cut into batches.
        std::vector<torch::Tensor> real_batches =
            real_points.index_select(0, torch::randperm(kPoints)).split(flags.batch_size);
        Take data(real_batches, flags.limit_batches);
        double d_total = 0, g_total = 0;
        int64_t seen = 0;
        for (auto& real : session.batches(data, "train", epoch)) {
          if (stop_signal.requested()) break;
          // The discriminator: real points are 1, generated ones 0; G is not
          // trained by this loss (detach).
          d_opt.zero_grad();
          auto real_logits = gan->D->forward(real);
          auto fake = gan->G->forward(torch::randn({real.size(0), kNoise}));
          auto fake_logits = gan->D->forward(fake.detach());
          auto d_loss = bce(real_logits, 1.0) + bce(fake_logits, 0.0);
          d_loss.backward();
          d_opt.step();

          // The generator: make D call its points real.
          g_opt.zero_grad();
          auto g_loss = bce(gan->D->forward(fake), 1.0);
          g_loss.backward();
          g_opt.step();

          const double d_value = d_loss.item<double>(), g_value = g_loss.item<double>();
          session.log_scalar("d_loss", d_value);
          session.log_scalar("g_loss", g_value);
          d_total += d_value;
          g_total += g_value;
          ++seen;
        }
        if (stop_signal.requested()) return;
        report_quality(gan, epoch, flags.epochs, d_total / std::max<int64_t>(seen, 1),
                       g_total / std::max<int64_t>(seen, 1));
      },
      nansense::EpochOptions().cache_dir(cache_dir.string()));
  session.close();
  std::error_code ignored;
  std::filesystem::remove_all(cache_dir, ignored);
  if (stop_signal.requested()) return 0;
  if (flags.exit_when_done) {
    std::cout << "Training finished" << std::endl;
    return 0;
  }
  const std::string url = session.url();
  std::cout << "Training finished — the UI stays up at " << (url.empty() ? "(not served)" : url)
            << "; press Ctrl-C to exit" << std::endl;
  stop_signal.wait();
  return 0;
}
