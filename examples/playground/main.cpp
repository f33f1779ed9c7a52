// The public playground: one frozen moment of the Fashion-MNIST demo, served
// locked and parked so that many anonymous visitors browse it at once.
//
//   playground_demo --prepare            trains the demo CNN briefly (detached,
//                                        every layer's statistics) and freezes
//                                        the last train batch of the last epoch
//                                        to --moment
//   playground_demo [--host 0.0.0.0]     loads the moment into a fresh model,
//                                        locks the session, serves it and parks
//                                        until Ctrl-C
//
// A locked session bound to a non-loopback address is served without a
// token: nothing a visitor sends can change the run or what another visitor
// sees (docs/guide/moments.md).

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "fashion_mnist_dataset.h"
#include "model.h"
#include "stop_signal.h"
#include "take.h"

namespace {

struct Flags {
  bool prepare = false;
  std::string moment = "playground.moment";
  std::string data_dir = kDefaultFashionMnistDir;
  int64_t epochs = 2;
  int64_t limit_batches = 100;
  int64_t batch_size = 64;
  std::string host = "127.0.0.1";
  int port = 7860;
  bool no_browser = false;
  bool synthetic = false;
};

// The layers the demo shows Min/Max patches for; every layer collects
// histograms (scope all).
const std::vector<std::string> kShowcase = {"features.0", "features.3", "classifier.1", "classifier.4"};

torch::Tensor loss_of(FashionCnn& model, const torch::Tensor& data, const torch::Tensor& target) {
  return torch::nll_loss(model->forward(data), target);
}

// Trains on `train_data` (`batches` a epoch) and freezes the last batch.
template <class Data>
int prepare_on(const Flags& flags, Data& train_data, int64_t batches) {
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto session = nansense::start(model, nansense::StartOptions()
                                            .optimizer(&optimizer)
                                            .epochs(flags.epochs)
                                            .phases(nansense::PhaseCounts{{"train", batches}})
                                            .stats_scope(nansense::StatsScope::kAll)
                                            .watch(kShowcase)
                                            .update_frequency(nansense::UpdateFrequency::batches(10)));
  session.set_patch_layers(kShowcase);
  session.freeze_moment(flags.moment, "train", flags.epochs - 1, batches - 1);
  session.detach();
  for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
    model->train();
    double total = 0;
    int64_t seen = 0;
    for (auto& batch : session.batches(train_data, "train", epoch)) {
      optimizer.zero_grad();
      torch::Tensor loss = loss_of(model, batch.data, batch.target);
      loss.backward();
      optimizer.step();
      session.log_scalar("loss", loss.item<double>());
      total += loss.item<double>();
      ++seen;
    }
    std::cout << "epoch " << epoch << ": train loss " << total / std::max<int64_t>(seen, 1) << std::endl;
  }
  session.close();
  if (!std::filesystem::exists(flags.moment)) {
    std::cerr << "playground_demo: no moment was written (see the messages above)\n";
    return 1;
  }
  std::cout << "froze the moment to " << flags.moment << " (" << std::filesystem::file_size(flags.moment)
            << " bytes); serve it with: playground_demo --moment " << flags.moment << "\n";
  return 0;
}

int prepare(const Flags& flags) {
  if (flags.synthetic) {
    // Random images of the demo's shape: for tests, which never need the dataset.
    torch::manual_seed(1);
    const int64_t batches = std::max<int64_t>(flags.limit_batches, 1);
    std::vector<torch::data::Example<>> data;
    for (int64_t i = 0; i < batches; ++i) {
      data.push_back({torch::randn({flags.batch_size, 1, 28, 28}), torch::randint(0, 10, {flags.batch_size})});
    }
    return prepare_on(flags, data, batches);
  }
  std::optional<FashionMnist> train_set;
  try {
    train_set.emplace(flags.data_dir, FashionMnist::Split::kTrain);
  } catch (const std::exception& e) {
    std::cerr << "playground_demo: " << e.what() << "\n";
    return 1;
  }
  const int64_t all = (static_cast<int64_t>(*train_set->size()) + flags.batch_size - 1) / flags.batch_size;
  const int64_t batches = flags.limit_batches > 0 ? std::min(all, flags.limit_batches) : all;
  auto loader = torch::data::make_data_loader(std::move(*train_set).map(torch::data::transforms::Stack<>()),
                                              torch::data::DataLoaderOptions().batch_size(flags.batch_size));
  Take train_data(*loader, flags.limit_batches);
  return prepare_on(flags, train_data, batches);
}

int serve(const Flags& flags, StopSignal& stop_signal) {
  FashionCnn model;
  std::optional<nansense::Session> session;
  try {
    session.emplace(nansense::load_moment(model, flags.moment,
                                          [model](torch::nn::Module&, const std::vector<torch::Tensor>& item) mutable {
                                            return loss_of(model, item.at(0), item.at(1));
                                          }));
  } catch (const nansense::Error& e) {
    std::cerr << "playground_demo: " << e.what() << "\n";
    return 1;
  }
  // Locked before it is served: a non-loopback bind then serves without a token.
  session->lock();
  if (!nansense::serve(*session, nansense::ServeOptions()
                                     .host(flags.host)
                                     .port(flags.port)
                                     .open_browser(!flags.no_browser)
                                     .input_mean({kFashionMnistMean})
                                     .input_std({kFashionMnistStd}))) {
    return 1;
  }
  stop_signal.watch([&session] { session->close(); });
  session->park();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  StopSignal stop_signal;
  Flags flags;
  CLI::App app{"The nansense playground: a frozen moment of the Fashion-MNIST demo, locked and shared"};
  app.add_flag("--prepare", flags.prepare, "Train briefly and freeze the moment, then exit");
  app.add_option("--moment", flags.moment, "The moment file")->capture_default_str();
  app.add_option("--data-dir", flags.data_dir, "Fashion-MNIST's folder (--prepare)")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Epochs to train (--prepare)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--limit-batches", flags.limit_batches, "Train batches per epoch, 0 = all (--prepare)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--host", flags.host, "Bind address (0.0.0.0: every interface)")->capture_default_str();
  app.add_option("--port", flags.port, "Port")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_flag("--no-browser", flags.no_browser, "Do not open a browser tab");
  app.add_flag("--synthetic", flags.synthetic, "Random images instead of Fashion-MNIST (--prepare; tests)");
  CLI11_PARSE(app, argc, argv);
  return flags.prepare ? prepare(flags) : serve(flags, stop_signal);
}
