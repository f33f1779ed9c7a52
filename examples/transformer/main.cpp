// A small transformer text classifier with the nansense debugger attached.
//
// The sequences are made in the program (synthetic_text.h): variable-length
// token sequences padded to a fixed length, with a padding mask in the
// attention. The run pauses once its first batch has run; open the printed
// address to step through it. --detach trains straight through with the UI
// still live.
//
// --nan pads out one sample of one training batch completely (a data bug): its
// attention rows are all -inf, softmax returns NaN, and the debugger pauses on
// that batch naming aten::softmax as the producer, while the -inf of the mask
// on every other batch is intended and does not trip.

#include <CLI/CLI.hpp>
#include <unistd.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>

#include "model.h"
#include "stop_signal.h"
#include "synthetic_text.h"
#include "take.h"

namespace {

struct Flags {
  int port = 8080;
  std::string host = "127.0.0.1";
  int64_t epochs = 3;
  int64_t batch_size = 32;
  bool no_browser = false;
  bool detach = false;
  int64_t limit_batches = 0;
  bool exit_when_done = false;
  bool nan = false;
  int64_t nan_batch = 3;
  std::string capsule_dir = "nansense_capsules";
  std::string cache_dir;  // empty: a folder of this run's own, removed at exit
  int64_t start_epoch = 0;
};

constexpr int64_t kTrainSamples = 4096;
constexpr int64_t kValSamples = 1024;
constexpr uint64_t kTrainSeed = 1, kValSeed = 2;

std::filesystem::path own_cache_dir() {
  return std::filesystem::temp_directory_path() / ("nansense_transformer_" + std::to_string(::getpid()));
}

int64_t phase_batches(int64_t examples, int64_t batch_size, int64_t limit) {
  const int64_t all = (examples + batch_size - 1) / batch_size;
  return limit > 0 ? std::min(all, limit) : all;
}

// --nan: yields the batches of another range, except that the first sample of
// batch `target` comes out all padding — the kind of bug an empty line in a
// text file makes. Changing the item in place means the debugger's flight
// recorder (and so the NaN capsule) holds the batch as the model saw it.
template <class Range>
class PadOutOneSample {
  using InnerIt = decltype(std::begin(std::declval<Range&>()));
  using InnerEnd = decltype(std::end(std::declval<Range&>()));

 public:
  struct sentinel {
    InnerEnd end;
  };

  class iterator {
   public:
    decltype(auto) operator*() const {
      auto& item = *it_;
      if (index_ == target_) item.data[0].fill_(kPadToken);
      return item;
    }
    iterator& operator++() {
      ++it_;
      ++index_;
      return *this;
    }
    friend bool operator==(const iterator& a, const sentinel& s) { return a.it_ == s.end; }

   private:
    friend class PadOutOneSample;
    iterator(InnerIt it, int64_t target) : it_(std::move(it)), target_(target) {}
    mutable InnerIt it_;
    int64_t index_ = 0;
    int64_t target_;
  };

  // target < 0: every batch passes unchanged.
  PadOutOneSample(Range& range, int64_t target) : range_(range), target_(target) {}
  iterator begin() { return iterator(std::begin(range_), target_); }
  sentinel end() { return {std::end(range_)}; }

 private:
  Range& range_;
  int64_t target_;
};

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
  // Before anything can start a thread (torch, the server, the loaders).
  StopSignal stop_signal;

  Flags flags;
  CLI::App app{"Train a small transformer text classifier on synthetic sequences under the nansense debugger."};
  app.add_option("--port", flags.port, "UI port (0 picks a free one)")->capture_default_str();
  app.add_option("--host", flags.host, "UI bind address")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Training epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch-size", flags.batch_size, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--no-browser", flags.no_browser, "Do not open a browser tab");
  app.add_flag("--detach", flags.detach, "Train without pausing (the UI stays live)");
  app.add_option("--limit-batches", flags.limit_batches, "Cap batches per phase (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--exit-when-done", flags.exit_when_done, "Exit after training instead of keeping the UI up");
  app.add_flag("--nan", flags.nan,
               "Pad out one sample of a training batch of epoch 0 completely: softmax over its all -inf "
               "attention scores returns NaN");
  app.add_option("--nan-batch", flags.nan_batch, "The training batch of epoch 0 that --nan spoils")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--capsule-dir", flags.capsule_dir, "Where NaN capsules are written")->capture_default_str();
  app.add_option("--cache-dir", flags.cache_dir,
                 "Time-travel checkpoint folder, kept after the run (default: a temp folder removed at exit)");
  app.add_option("--start-epoch", flags.start_epoch, "Resume at this epoch from --cache-dir's checkpoint")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  const bool own_cache = flags.cache_dir.empty();
  if (own_cache && flags.start_epoch > 0) {
    std::cerr << "transformer_demo: --start-epoch needs --cache-dir, the folder to resume from\n";
    return 1;
  }
  const int64_t train_count = phase_batches(kTrainSamples, flags.batch_size, flags.limit_batches);
  const int64_t val_count = phase_batches(kValSamples, flags.batch_size, flags.limit_batches);
  if (flags.nan && flags.nan_batch >= train_count) {
    std::cerr << "transformer_demo: --nan-batch " << flags.nan_batch << " is past the " << train_count
              << " training batches of an epoch\n";
    return 1;
  }

  torch::manual_seed(0);
  const TextClassifierOptions shape;
  auto train_loader = torch::data::make_data_loader(
      SyntheticText(kTrainSamples, shape.length(), shape.vocab(), shape.classes(), kTrainSeed)
          .map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(flags.batch_size));
  auto val_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      SyntheticText(kValSamples, shape.length(), shape.vocab(), shape.classes(), kValSeed)
          .map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(flags.batch_size));

  TextClassifier model(shape);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));

  auto session = nansense::start(model, nansense::StartOptions()
                                            .optimizer(&optimizer)
                                            .epochs(flags.epochs)
                                            .phases(nansense::PhaseCounts{{"train", train_count}, {"val", val_count}})
                                            .port(flags.port)
                                            .host(flags.host)
                                            .open_browser(!flags.no_browser)
                                            .debug(nansense::DebugSettings().capsule_dir(flags.capsule_dir)));

  stop_signal.watch([&session] { release(session); });
  if (flags.detach) session.detach();

  Take train_data(*train_loader, flags.limit_batches);
  Take val_data(*val_loader, flags.limit_batches);

  const std::filesystem::path cache_dir = own_cache ? own_cache_dir() : std::filesystem::path(flags.cache_dir);
  auto remove_own_cache = [&] {
    std::error_code ignored;
    if (own_cache) std::filesystem::remove_all(cache_dir, ignored);
  };

  std::cout << std::fixed << std::setprecision(4);
  auto train_epoch = [&](int64_t epoch) {
    if (stop_signal.requested()) return;
    model->train();
    PadOutOneSample spoiled(train_data, flags.nan && epoch == 0 ? flags.nan_batch : -1);
    double train_loss = 0;
    int64_t train_seen = 0, train_correct = 0, train_total = 0;
    for (auto& batch : session.batches(spoiled, "train", epoch)) {
      if (stop_signal.requested()) break;
      optimizer.zero_grad();
      auto logits = model->forward(batch.data);
      auto loss = torch::cross_entropy_loss(logits, batch.target);
      loss.backward();
      optimizer.step();
      const double value = loss.item<double>();
      session.log_scalar("loss", value);
      train_loss += value;
      train_correct += logits.argmax(1).eq(batch.target).sum().item<int64_t>();
      train_total += batch.target.size(0);
      ++train_seen;
    }
    if (stop_signal.requested()) return;

    torch::NoGradGuard no_grad;
    model->eval();
    double val_loss = 0;
    int64_t correct = 0, total = 0, val_seen = 0;
    for (auto& batch : session.batches(val_data, "val", epoch)) {
      if (stop_signal.requested()) break;
      auto logits = model->forward(batch.data);
      const double loss = torch::cross_entropy_loss(logits, batch.target).item<double>();
      session.log_scalar("loss", loss);
      val_loss += loss;
      correct += logits.argmax(1).eq(batch.target).sum().item<int64_t>();
      total += batch.target.size(0);
      ++val_seen;
    }
    if (stop_signal.requested()) return;

    std::cout << "epoch " << epoch + 1 << "/" << flags.epochs << "  train loss "
              << train_loss / std::max<int64_t>(train_seen, 1) << "  train accuracy " << std::setprecision(2)
              << 100.0 * train_correct / std::max<int64_t>(train_total, 1) << "%" << std::setprecision(4)
              << "  val loss " << val_loss / std::max<int64_t>(val_seen, 1) << "  val accuracy " << std::setprecision(2)
              << 100.0 * correct / std::max<int64_t>(total, 1) << "%" << std::setprecision(4) << std::endl;
  };
  try {
    session.epochs(flags.epochs, train_epoch,
                   nansense::EpochOptions().cache_dir(cache_dir.string()).start_epoch(flags.start_epoch));
  } catch (const nansense::TimeTravelError& e) {
    std::cerr << "transformer_demo: " << e.what() << "\n";
    remove_own_cache();
    return 1;
  }
  session.close();
  if (stop_signal.requested()) {
    remove_own_cache();
    return 0;
  }
  if (flags.exit_when_done) {
    std::cout << "Training finished" << std::endl;
    remove_own_cache();
    return 0;
  }
  const std::string url = session.url();
  std::cout << "Training finished — the UI stays up at " << (url.empty() ? "(not served)" : url)
            << "; press Ctrl-C to exit" << std::endl;
  stop_signal.wait();
  remove_own_cache();
  return 0;
}
