// Data-parallel training in C++ debugged as one run: N processes (ranks)
// train one small MLP on synthetic data, each on its own shard, averaging
// their gradients after every backward. Rank 0 serves the nansense UI; the
// UI's pause, step and run apply to every rank (docs/guide/distributed.md).
//
// Start it as torchrun would, one process per rank:
//
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 ./ddp_example --port 8080 &
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 ./ddp_example
//
// LibTorch has no DistributedDataParallel module, and PyTorch's pip wheel
// ships no Gloo headers (ProcessGroupGloo.hpp includes <gloo/...>), so a C++
// program built against the wheel cannot make a Gloo process group. This one
// does what DDP's all-reduce does through the run's c10d::TCPStore (which the
// wheel's LibTorch has): each rank sets its flattened gradients under a key of
// the step, reads every rank's, and averages. The same store coordinates
// nansense (StartOptions::distributed). The lines marked "nansense" are all
// the wiring there is.
#include <CLI/CLI.hpp>
#include <nansense/nansense.h>  // nansense
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc1(16, 32), fc2(32, 4) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  if (!raw || !*raw) return fallback;
  char* end = nullptr;
  const long value = std::strtol(raw, &end, 10);
  if (*end != '\0') throw std::invalid_argument(std::string(name) + " must be an integer, got \"" + raw + "\"");
  return static_cast<int>(value);
}

// Writes `text` to `path` whole (a reader never sees half of it).
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
  }
  std::filesystem::rename(tmp, path);
}

std::vector<uint8_t> bytes_of(const torch::Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.numel() * t.element_size());
}

// DDP's gradient all-reduce (the mean) over the store. Every rank makes the
// same calls in the same order, so `step` names the same exchange on each.
class StoreAllReduce {
 public:
  StoreAllReduce(c10::intrusive_ptr<c10d::Store> store, int rank, int world)
      : store_(std::move(store)), rank_(rank), world_(world) {}

  void average_gradients(torch::nn::Module& model) {
    std::vector<torch::Tensor> flat;
    for (auto& p : model.parameters()) {
      flat.push_back(p.grad().defined() ? p.grad().detach().reshape({-1}) : torch::zeros({p.numel()}));
    }
    const torch::Tensor grads = torch::cat(flat).to(torch::kFloat).contiguous();
    const std::string step = std::to_string(step_++);
    store_->set("ddp/grad/" + step + "/" + std::to_string(rank_), bytes_of(grads));
    torch::Tensor sum = torch::zeros_like(grads);
    for (int r = 0; r < world_; ++r) {
      std::vector<uint8_t> got = store_->get("ddp/grad/" + step + "/" + std::to_string(r));  // waits for rank r
      sum += torch::from_blob(got.data(), grads.sizes(), grads.options()).clone();
    }
    sum /= world_;
    // Every rank has read the keys of two steps ago (it set its key of the
    // last step only after reading them all): this rank's may go.
    if (step_ > 2) store_->deleteKey("ddp/grad/" + std::to_string(step_ - 3) + "/" + std::to_string(rank_));
    int64_t at = 0;
    for (auto& p : model.parameters()) {
      if (p.grad().defined()) p.mutable_grad().copy_(sum.slice(0, at, at + p.numel()).view_as(p));
      at += p.numel();
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_;
  int64_t step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int epochs = 2;
  int batches = 8;
  int batch_size = 16;
  int port = 8080;
  int nan_rank = -1;
  int nan_batch = -1;
  bool nansense_on = true;
  bool keep_serving = false;
  bool detach = false;
  bool checks = true;
  std::string time_file;
  std::string stats_scope;
  std::string progress_dir;
  std::string url_file;
  std::string store_port_file;
  std::string capsule_dir = "nansense_capsules";
  std::string cache_dir = ".nansense_cache";
  CLI::App app{
      "Data-parallel training of a small MLP, one process per rank (RANK, WORLD_SIZE, MASTER_ADDR, "
      "MASTER_PORT as torchrun sets them), debugged as one run: rank 0 serves the UI."};
  app.add_option("--epochs", epochs, "Training epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batches", batches, "Batches per epoch on every rank")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "Samples per batch on each rank")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--port", port, "Rank 0's UI port (0 picks a free one)")->capture_default_str();
  app.add_option("--nan-rank", nan_rank, "Inject a NaN into this rank's input ...");
  app.add_option("--nan-batch", nan_batch, "... at this batch (counted over the run from 0)");
  app.add_option("--stats-scope", stats_scope, "Statistics scope of this rank's start: all, watched or none")
      ->check(CLI::IsMember({"all", "watched", "none"}));
  app.add_option("--progress-dir", progress_dir,
                 "Write <dir>/rank_<r>.txt: the epoch and batch this rank's loop body runs, and \"done\" at the end");
  app.add_option("--url-file", url_file, "Rank 0 writes the UI's address here once served");
  app.add_option("--store-port-file", store_port_file,
                 "Rank 0 writes the store's port here (MASTER_PORT=0 picks a free one)");
  app.add_option("--capsule-dir", capsule_dir, "NaN capsules (each rank under rank_<r>/)")->capture_default_str();
  app.add_option("--cache-dir", cache_dir, "Epoch checkpoints (each rank under rank_<r>/)")->capture_default_str();
  app.add_flag("!--no-nansense", nansense_on, "Start this rank with nansense disabled");
  app.add_flag("--keep-serving", keep_serving,
               "Keep the process (and rank 0's UI) alive after the run or its error until stdin closes");
  app.add_flag("--detach", detach, "Train on without the first pause (the UI still shows the run)");
  app.add_flag("!--no-checks", checks, "Turn the numerical checks off");
  app.add_option("--time-file", time_file, "Rank 0 writes the training loop's wall time (seconds) here (bench/ddp.sh)");
  CLI11_PARSE(app, argc, argv);

  torch::set_num_threads(1);
  int rank = 0, world = 1;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    rank = env_int("RANK", 0);
    world = env_int("WORLD_SIZE", 1);
    const char* addr = std::getenv("MASTER_ADDR");
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env_int("MASTER_PORT", 29500));
    store_options.isServer = rank == 0;  // rank 0 hosts the run's store
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(120);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(addr && *addr ? addr : "127.0.0.1", store_options);
    if (rank == 0 && !store_port_file.empty()) write_file(store_port_file, std::to_string(tcp->getPort()));
    store = tcp;
  } catch (const std::exception& e) {
    std::cerr << "ddp_example: cannot reach the run's store: " << e.what() << "\n";
    return 2;
  }

  auto wait_for_stdin = [&] {
    if (!keep_serving) return;
    std::string line;
    while (std::getline(std::cin, line)) {
    }
  };
  auto progress = [&](const std::string& text) {
    if (!progress_dir.empty()) write_file(progress_dir + "/rank_" + std::to_string(rank) + ".txt", text);
  };

  // The same initial weights on every rank; the data differs by rank.
  torch::manual_seed(0);
  Mlp model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  torch::manual_seed(1000 + rank);
  const torch::Tensor rule = torch::arange(16 * 4, torch::kFloat).reshape({16, 4}).sin();
  std::vector<torch::data::Example<>> shard;
  for (int b = 0; b < batches; ++b) {
    torch::Tensor x = torch::randn({batch_size, 16});
    shard.push_back({x, x.matmul(rule).argmax(1)});
  }
  StoreAllReduce all_reduce(store, rank, world);

  int code = 0;
  try {
    nansense::StartOptions options;  // nansense
    options.optimizer(&optimizer)
        .distributed(store, rank, world)  // nansense: rank `rank` of `world`, coordinated over the run's store
        .enabled(nansense_on)
        .debug(nansense::DebugSettings().capsule_dir(capsule_dir).enabled(checks))
        .port(port)
        .open_browser(false);
    if (!stats_scope.empty()) {
      options.stats_scope(stats_scope == "all"    ? nansense::StatsScope::kAll
                          : stats_scope == "none" ? nansense::StatsScope::kNone
                                                  : nansense::StatsScope::kWatched);
    }
    auto session = nansense::start(model, options);  // nansense
    if (detach) session.detach();
    if (rank == 0 && !url_file.empty() && !session.url().empty()) write_file(url_file, session.url());
    auto train_batches = session.batches(shard, "train");  // nansense
    const auto started = std::chrono::steady_clock::now();
    try {
      session.epochs(
          epochs,
          [&](int64_t epoch) {  // nansense: time travel rewinds every rank
            int64_t b = 0;
            for (auto& batch : train_batches) {
              progress(std::to_string(epoch) + " " + std::to_string(b));
              torch::Tensor x = batch.data;
              if (rank == nan_rank && epoch * batches + b == nan_batch) x = x * std::numeric_limits<float>::quiet_NaN();
              optimizer.zero_grad();
              auto loss = torch::nn::functional::cross_entropy(model->forward(x), batch.target);
              loss.backward();
              all_reduce.average_gradients(*model);
              optimizer.step();
              ++b;
            }
          },
          nansense::EpochOptions().cache_dir(cache_dir));
      if (rank == 0 && !time_file.empty()) {
        write_file(time_file,
                   std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()));
      }
      session.close();  // nansense
      progress("done");
      std::cout << "rank " << rank << " of " << world << ": training finished" << std::endl;
    } catch (const nansense::DistributedError& e) {
      std::cerr << "ddp_example: " << e.what() << std::endl;
      progress("error");
      wait_for_stdin();
      return 3;
    }
    // Rank 0 hosts the store: it stays until every rank is done with it.
    store->set("ddp/done/" + std::to_string(rank), std::vector<uint8_t>{1});
    if (rank == 0) {
      std::vector<std::string> done;
      for (int r = 0; r < world; ++r) done.push_back("ddp/done/" + std::to_string(r));
      store->wait(done);
    }
    wait_for_stdin();
  } catch (const nansense::DistributedError& e) {
    std::cerr << "ddp_example: " << e.what() << std::endl;
    progress("error");
    wait_for_stdin();
    code = 3;
  } catch (const std::exception& e) {
    std::cerr << "ddp_example: " << e.what() << std::endl;
    progress("error");
    code = 1;
  }
  return code;
}
