// Fashion-MNIST training with the nansense debugger attached.
//
// The run pauses once its first batch has run; open the printed address to step
// through it. --detach trains straight through with the UI still live.

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include "fashion_mnist_dataset.h"
#include "model.h"
#include "stop_signal.h"
#include "take.h"

namespace {

struct Flags {
  int port = 8080;
  std::string host = "127.0.0.1";
  int64_t epochs = 3;
  int64_t batch_size = 64;
  bool no_browser = false;
  bool detach = false;
  int64_t limit_batches = 0;
  std::string data_dir = kDefaultFashionMnistDir;
  bool exit_when_done = false;
};

// Batches one phase will draw: the loader's count, capped by --limit-batches.
int64_t phase_batches(size_t examples, int64_t batch_size, int64_t limit) {
  const int64_t all = (static_cast<int64_t>(examples) + batch_size - 1) / batch_size;
  return limit > 0 ? std::min(all, limit) : all;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything can start a thread (torch, the server, the loaders).
  StopSignal stop_signal;

  Flags flags;
  CLI::App app{"Train a small CNN on Fashion-MNIST under the nansense debugger."};
  app.add_option("--port", flags.port, "UI port (0 picks a free one)")->capture_default_str();
  app.add_option("--host", flags.host, "UI bind address")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Training epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", flags.batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-browser", flags.no_browser, "Do not open a browser tab");
  app.add_flag("--detach", flags.detach, "Train without pausing (the UI stays live)");
  app.add_option("--limit-batches", flags.limit_batches, "Cap batches per phase (0 = all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--data-dir", flags.data_dir, "Directory of the Fashion-MNIST .gz files")->capture_default_str();
  app.add_flag("--exit-when-done", flags.exit_when_done, "Exit after training instead of keeping the UI up");
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(0);

  std::optional<FashionMnist> train_set, val_set;
  try {
    train_set.emplace(flags.data_dir, FashionMnist::Split::kTrain);
    val_set.emplace(flags.data_dir, FashionMnist::Split::kTest);
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist_demo: " << e.what() << "\n";
    return 1;
  }
  const int64_t train_count = phase_batches(*train_set->size(), flags.batch_size, flags.limit_batches);
  const int64_t val_count = phase_batches(*val_set->size(), flags.batch_size, flags.limit_batches);

  auto train_loader = torch::data::make_data_loader(
      std::move(*train_set).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(flags.batch_size));
  auto val_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(*val_set).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(flags.batch_size));

  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);

  auto session = nansense::start(
      model, nansense::StartOptions()
                 .optimizer(&optimizer)
                 .scheduler(&scheduler)
                 .epochs(flags.epochs)
                 .phases(nansense::PhaseCounts{{"train", train_count}, {"val", val_count}})
                 .port(flags.port)
                 .host(flags.host)
                 .open_browser(!flags.no_browser)
                 .input_mean({kFashionMnistMean})
                 .input_std({kFashionMnistStd}));

  stop_signal.watch([&session] {
    std::cout << "\nStopping…" << std::endl;
    // A paused loop only notices the stop once it is released.
    try {
      session.detach();
    } catch (...) {
    }
  });
  if (flags.detach) session.detach();

  // --limit-batches caps each phase; 0 leaves the loaders whole.
  Take train_data(*train_loader, flags.limit_batches);
  Take val_data(*val_loader, flags.limit_batches);

  std::cout << std::fixed << std::setprecision(4);
  for (int64_t epoch = 0; epoch < flags.epochs && !stop_signal.requested(); ++epoch) {
    model->train();
    double train_loss = 0;
    int64_t train_seen = 0;
    for (auto& batch : session.batches(train_data, "train", epoch)) {
      if (stop_signal.requested()) break;
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      train_loss += loss.item<double>();
      ++train_seen;
    }
    if (stop_signal.requested()) break;

    torch::NoGradGuard no_grad;
    model->eval();
    double val_loss = 0;
    int64_t correct = 0, total = 0, val_seen = 0;
    for (auto& batch : session.batches(val_data, "val", epoch)) {
      if (stop_signal.requested()) break;
      auto output = model->forward(batch.data);
      val_loss += torch::nll_loss(output, batch.target).item<double>();
      correct += output.argmax(1).eq(batch.target).sum().item<int64_t>();
      total += batch.target.size(0);
      ++val_seen;
    }
    if (stop_signal.requested()) break;
    scheduler.step();

    std::cout << "epoch " << epoch + 1 << "/" << flags.epochs
              << "  train loss " << train_loss / std::max<int64_t>(train_seen, 1)
              << "  val loss " << val_loss / std::max<int64_t>(val_seen, 1)
              << "  val accuracy " << std::setprecision(2) << 100.0 * correct / std::max<int64_t>(total, 1)
              << "%" << std::setprecision(4) << std::endl;
  }
  session.close();
  if (stop_signal.requested()) return 0;

  if (flags.exit_when_done) {
    std::cout << "Training finished" << std::endl;
    return 0;
  }
  // The session keeps serving the last captured state for post-mortem browsing.
  const std::string url = session.url();
  std::cout << "Training finished — the UI stays up at " << (url.empty() ? "(not served)" : url)
            << "; press Ctrl-C to exit" << std::endl;
  stop_signal.wait();
  return 0;
}
