// Fashion-MNIST training with the nansense debugger attached.
//
// The run pauses once its first batch has run; open the printed address to step
// through it. --detach trains straight through with the UI still live.
//
// --nan swaps the loss for one that goes non-finite now and then (the NaN
// scheme's toy example); the debugger pauses on it and writes a NaN capsule.
// --replay <capsule> runs that batch again, bit for bit, with the UI paused on it.
// --device cuda trains on a GPU; --dtype bfloat16|float16 autocasts the
// forward (mixed precision, as torch.autocast does).

#include <CLI/CLI.hpp>
#include <unistd.h>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include "autocast.h"
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
  bool nan = false;
  bool instruments = false;
  std::string replay;
  std::string capsule_dir = "nansense_capsules";
  std::string cache_dir;  // empty: a folder of this run's own, removed at exit
  int64_t start_epoch = 0;
  double snapshot_budget_mib = static_cast<double>(nansense::StartOptions::kDefaultSnapshotBudget) / (1 << 20);
  std::string device_name = "cpu";
  std::string dtype_name = "float32";
  torch::Device device = torch::kCPU;             // parsed from device_name
  std::optional<c10::ScalarType> autocast_dtype;  // parsed from dtype_name; none: float32
};

// The default time-travel cache: private to this process, so demos running
// side by side (the browser tests) never adopt each other's checkpoints.
std::filesystem::path own_cache_dir() {
  return std::filesystem::temp_directory_path() / ("nansense_fashion_mnist_" + std::to_string(::getpid()));
}

// The NaN scheme's toy loss: binary cross-entropy per class, each divided by
// the number of the batch's samples of that class. A batch that lacks a class
// divides by zero: the loss is Inf and the gradients NaN. With 10 classes a
// batch of 8 always lacks some; one of 64 lacks one about every 80 batches.
torch::Tensor per_class_bce(const torch::Tensor& output, const torch::Tensor& target) {
  std::vector<torch::Tensor> losses;
  for (int64_t c = 0; c < output.size(1); ++c) {
    auto is_c = target == c;
    auto loss = torch::binary_cross_entropy_with_logits(output.select(1, c), is_c.to(output.dtype()), {}, {},
                                                        at::Reduction::Sum);
    losses.push_back(loss / is_c.sum());
  }
  return torch::stack(losses).mean();
}

torch::Tensor train_loss_of(const torch::Tensor& output, const torch::Tensor& target, bool nan) {
  return nan ? per_class_bce(output, target) : torch::nll_loss(output, target);
}

// The training loss of one batch on the run's device, its forward and loss
// autocast to --dtype; backward is the caller's, outside the autocast.
torch::Tensor batch_loss(FashionCnn& model, const torch::Tensor& data, const torch::Tensor& target,
                         const Flags& flags) {
  Autocast autocast(flags.device, flags.autocast_dtype);
  return train_loss_of(model->forward(data.to(flags.device)), target.to(flags.device), flags.nan);
}

// Batches one phase will draw: the loader's count, capped by --limit-batches.
int64_t phase_batches(size_t examples, int64_t batch_size, int64_t limit) {
  const int64_t all = (static_cast<int64_t>(examples) + batch_size - 1) / batch_size;
  return limit > 0 ? std::min(all, limit) : all;
}

// Lets a paused loop go and keeps it from pausing again, so that it can
// notice the stop request.
void release(nansense::Session& session) {
  std::cout << "\nStopping…" << std::endl;
  try {
    session.set_debug_settings(session.debug_settings().enabled(false));
    session.detach();
  } catch (...) {
  }
}

// --replay: the capsule's batch, once, on the state it recorded; the guard
// trips on it and the UI opens paused there with the producer named.
int replay(const Flags& flags, StopSignal& stop_signal) {
  FashionCnn model;
  model->to(flags.device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  nansense::Capsule capsule;
  try {
    capsule = nansense::replay_capsule(flags.replay, *model, &optimizer);
  } catch (const nansense::CapsuleError& e) {
    std::cerr << "fashion_mnist_demo: " << e.what() << "\n";
    return 1;
  }
  if (capsule.batch.size() != 2) {
    std::cerr << "fashion_mnist_demo: " << flags.replay << " holds " << capsule.batch.size()
              << " batch tensors; this demo's batches have 2 (images, labels)\n";
    return 1;
  }
  std::cout << "Replaying " << flags.replay << ": the batch at " << capsule.position.to_string() << std::endl;
  for (const auto& note : capsule.notes) std::cout << "  note: " << note << std::endl;

  // No capsule of the replay itself: it would only copy the one replayed.
  auto settings = capsule.settings;
  auto session = nansense::start(model, nansense::StartOptions()
                                            .optimizer(&optimizer)
                                            .port(flags.port)
                                            .host(flags.host)
                                            .open_browser(!flags.no_browser)
                                            .input_mean({kFashionMnistMean})
                                            .input_std({kFashionMnistStd})
                                            .debug(settings.capsule_dir("")));
  stop_signal.watch([&session] { release(session); });
  std::vector<torch::data::Example<>> item = {{capsule.batch[0], capsule.batch[1]}};
  model->train();
  for (auto& batch : session.batches(item, capsule.position.phase, capsule.position.epoch)) {
    optimizer.zero_grad();
    batch_loss(model, batch.data, batch.target, flags).backward();
    std::string difference;
    if (capsule.gradients_match(*model, &difference)) {
      std::cout << "Replay reproduced the recorded gradients bit for bit" << std::endl;
    } else {
      std::cout << "Replay differs from the recording: " << difference
                << " (was the capsule written with other flags, e.g. --nan?)" << std::endl;
    }
    optimizer.step();
  }
  session.close();
  if (flags.exit_when_done || stop_signal.requested()) return 0;
  std::cout << "Replay finished — the UI stays up at " << session.url() << "; press Ctrl-C to exit" << std::endl;
  stop_signal.wait();
  return 0;
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
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--data-dir", flags.data_dir, "Directory of the Fashion-MNIST .gz files")->capture_default_str();
  app.add_flag("--exit-when-done", flags.exit_when_done, "Exit after training instead of keeping the UI up");
  app.add_flag("--nan", flags.nan, "Train with a per-class loss that turns NaN when a batch lacks a class");
  app.add_flag("--instruments", flags.instruments,
               "Add two tensor instruments: each watched layer's z-score (a strip under its card) and Adam's "
               "update direction per parameter (on the Weights page)");
  app.add_option("--replay", flags.replay,
                 "Replay a NaN capsule bit for bit, paused in the UI (use the flags of the run that wrote it)");
  app.add_option("--capsule-dir", flags.capsule_dir, "Where NaN capsules are written")->capture_default_str();
  app.add_option("--snapshot-budget-mib", flags.snapshot_budget_mib,
                 "Host memory a snapshot may spend on activations, gradients and inputs (0 = every sample)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cache-dir", flags.cache_dir,
                 "Time-travel checkpoint folder, kept after the run (default: a temp folder removed at exit)");
  app.add_option("--start-epoch", flags.start_epoch, "Resume at this epoch from --cache-dir's checkpoint")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", flags.device_name, "Where the model trains: cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", flags.dtype_name,
                 "Forward precision: float32, or float16/bfloat16 autocast (mixed precision; on the CPU "
                 "float16 needs a recent PyTorch)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    flags.device = parse_device(flags.device_name);
    flags.autocast_dtype = parse_autocast_dtype(flags.dtype_name);
    Autocast probe(flags.device, flags.autocast_dtype);  // refuses a device/dtype pair LibTorch cannot autocast
  } catch (const std::invalid_argument& e) {
    std::cerr << "fashion_mnist_demo: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "fashion_mnist_demo: --dtype " << flags.dtype_name << " on " << flags.device_name << ": "
              << e.what_without_backtrace() << "\n";
    return 1;
  }
  if (!flags.replay.empty()) return replay(flags, stop_signal);

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

  auto train_loader = torch::data::make_data_loader(std::move(*train_set).map(torch::data::transforms::Stack<>()),
                                                    torch::data::DataLoaderOptions().batch_size(flags.batch_size));
  auto val_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(*val_set).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(flags.batch_size));

  FashionCnn model;
  model->to(flags.device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.7);

  auto session =
      nansense::start(model, nansense::StartOptions()
                                 .optimizer(&optimizer)
                                 .scheduler(&scheduler)
                                 .epochs(flags.epochs)
                                 .phases(nansense::PhaseCounts{{"train", train_count}, {"val", val_count}})
                                 .port(flags.port)
                                 .host(flags.host)
                                 .open_browser(!flags.no_browser)
                                 .input_mean({kFashionMnistMean})
                                 .input_std({kFashionMnistStd})
                                 .debug(nansense::DebugSettings().capsule_dir(flags.capsule_dir))
                                 .snapshot_budget(static_cast<int64_t>(flags.snapshot_budget_mib * (1 << 20)))
                                 // The conv and linear layers collect statistics over time (the Stats page).
                                 .watch({"features.0", "features.3", "classifier.1", "classifier.4"}));

  if (flags.instruments) {
    // Drawn under each watched layer's card: how many standard deviations
    // each value lies from the batch's mean.
    session.watch_layer_tensor("zscore", [](const nansense::LayerContext& ctx) {
      return (ctx.activation - ctx.activation.mean()) / (ctx.activation.std() + 1e-6);
    });
    // Drawn on the Weights page: the direction Adam moves each weight.
    session.watch_weight_tensor("adam_direction", [](const nansense::WeightContext& ctx) -> torch::Tensor {
      auto m = ctx.optimizer_state.find("exp_avg"), v = ctx.optimizer_state.find("exp_avg_sq");
      if (m == ctx.optimizer_state.end() || v == ctx.optimizer_state.end()) return {};
      return m->second / (v->second.sqrt() + 1e-8);
    });
  }
  stop_signal.watch([&session] { release(session); });
  if (flags.detach) session.detach();

  // --limit-batches caps each phase; 0 leaves the loaders whole.
  Take train_data(*train_loader, flags.limit_batches);
  Take val_data(*val_loader, flags.limit_batches);

  const bool own_cache = flags.cache_dir.empty();
  if (own_cache && flags.start_epoch > 0) {
    std::cerr << "fashion_mnist_demo: --start-epoch needs --cache-dir, the folder to resume from\n";
    return 1;
  }
  const std::filesystem::path cache_dir = own_cache ? own_cache_dir() : std::filesystem::path(flags.cache_dir);
  auto remove_own_cache = [&] {
    std::error_code ignored;
    if (own_cache) std::filesystem::remove_all(cache_dir, ignored);
  };

  std::cout << std::fixed << std::setprecision(4);
  // One epoch; session.epochs() checkpoints each start so the UI can rewind.
  auto train_epoch = [&](int64_t epoch) {
    if (stop_signal.requested()) return;
    model->train();
    double train_loss = 0;
    int64_t train_seen = 0;
    for (auto& batch : session.batches(train_data, "train", epoch)) {
      if (stop_signal.requested()) break;
      optimizer.zero_grad();
      auto loss = batch_loss(model, batch.data, batch.target, flags);
      loss.backward();
      optimizer.step();
      const double value = loss.item<double>();
      session.log_scalar("loss", value);
      train_loss += value;
      ++train_seen;
    }
    if (stop_signal.requested()) return;

    torch::NoGradGuard no_grad;
    model->eval();
    double val_loss = 0;
    int64_t correct = 0, total = 0, val_seen = 0;
    for (auto& batch : session.batches(val_data, "val", epoch)) {
      if (stop_signal.requested()) break;
      Autocast autocast(flags.device, flags.autocast_dtype);
      const auto target = batch.target.to(flags.device);
      auto output = model->forward(batch.data.to(flags.device));
      const double loss = torch::nll_loss(output, target).item<double>();
      const int64_t right = output.argmax(1).eq(target).sum().item<int64_t>();
      session.log_scalar("loss", loss);
      session.log_scalar("accuracy", static_cast<double>(right) / static_cast<double>(batch.target.size(0)));
      val_loss += loss;
      correct += right;
      total += batch.target.size(0);
      ++val_seen;
    }
    if (stop_signal.requested()) return;
    scheduler.step();

    std::cout << "epoch " << epoch + 1 << "/" << flags.epochs << "  train loss "
              << train_loss / std::max<int64_t>(train_seen, 1) << "  val loss "
              << val_loss / std::max<int64_t>(val_seen, 1) << "  val accuracy " << std::setprecision(2)
              << 100.0 * correct / std::max<int64_t>(total, 1) << "%" << std::setprecision(4) << std::endl;
  };
  try {
    session.epochs(flags.epochs, train_epoch,
                   nansense::EpochOptions().cache_dir(cache_dir.string()).start_epoch(flags.start_epoch));
  } catch (const nansense::TimeTravelError& e) {
    std::cerr << "fashion_mnist_demo: " << e.what() << "\n";
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
  // The session keeps serving the last captured state for post-mortem browsing.
  const std::string url = session.url();
  std::cout << "Training finished — the UI stays up at " << (url.empty() ? "(not served)" : url)
            << "; press Ctrl-C to exit" << std::endl;
  stop_signal.wait();
  remove_own_cache();
  return 0;
}
