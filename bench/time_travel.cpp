// Time travel's costs on the demo's network, as ratios where a baseline exists.
//
// 1. Checkpoint write: nansense's epoch-start checkpoint (model, Adam state,
//    per-group options, StepLR, RNG; CRC-32 per section; temp file + fsync +
//    rename + folder fsync) against a plain torch::save of the same model and
//    optimizer into one archive.
//    Rounds interleave the two and the median per-round ratio is reported, in
//    wall time (fsync waits on the disk, which CPU time would hide) and in
//    thread CPU time.
// 2. Jump latency: from request_time_travel() until the loop is paused on the
//    target epoch's first batch (validate the file, unwind, restore, rewind,
//    run and capture that batch), median over repeated jumps; and the restore
//    alone.

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "session/session_access.h"
#include "state/training_state.h"
#include "time_travel/checkpoint_store.h"

namespace {

namespace fs = std::filesystem;
using namespace nansense::bench;
using Clock = std::chrono::steady_clock;

double wall_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

struct Times {
  double wall = 0;
  double cpu = 0;
};

template <class F>
Times timed(F&& f) {
  const auto wall = Clock::now();
  const double cpu = thread_cpu_ms();
  f();
  return {wall_ms(wall), thread_cpu_ms() - cpu};
}

void bench_write(int rounds, const fs::path& dir) {
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::StepLR scheduler(optimizer, 1, 0.7);
  for (const auto& b : synthetic_batches(2, 64)) train_step(model, optimizer, b);  // Adam state exists
  auto adapter = nansense::adapt_scheduler(scheduler);
  nansense::state::LiveState live{model.ptr().get(), {&optimizer}, adapter.get()};
  nansense::time_travel::CheckpointStore store(dir / "nansense", std::nullopt);
  const fs::path plain = dir / "plain.pt";

  auto write_plain = [&] {
    torch::serialize::OutputArchive archive;
    model->save(archive);
    torch::serialize::OutputArchive opt;
    optimizer.save(opt);
    archive.write("optimizer", opt);
    archive.save_to(plain.string());
  };
  int64_t epoch = 0;
  auto write_checkpoint = [&] {
    store.write(epoch++, [&](nansense::state::StateFile& file) { nansense::state::save_state(live, file); });
  };
  write_plain();
  write_checkpoint();
  std::vector<double> wall_ratio, cpu_ratio, plain_ms, ours_ms, durable_ms;
  for (int r = 0; r < rounds; ++r) {
    // Epochs are far apart in training: the last file is in place by the next.
    store.wait_idle();
    // Alternate the order so neither always runs on a warmer cache.
    Times a, b;
    if (r % 2 == 0) {
      a = timed(write_plain);
      store.wait_idle();
      b = timed(write_checkpoint);
    } else {
      b = timed(write_checkpoint);
      store.wait_idle();
      a = timed(write_plain);
    }
    const auto since = Clock::now();
    store.wait_idle();
    durable_ms.push_back(b.wall + wall_ms(since));
    plain_ms.push_back(a.wall);
    ours_ms.push_back(b.wall);
    wall_ratio.push_back(b.wall / a.wall);
    cpu_ratio.push_back(b.cpu / a.cpu);
  }
  store.wait_idle();
  std::printf("checkpoint write (%s, %.2f MB; plain torch::save %.2f MB), %d rounds\n", "FashionCnn + Adam + StepLR",
              static_cast<double>(fs::file_size(store.path_of(0))) / 1e6,
              static_cast<double>(fs::file_size(plain)) / 1e6, rounds);
  std::printf("  plain torch::save    %8.2f ms (median wall)\n", median(plain_ms));
  std::printf("  nansense checkpoint  %8.2f ms (median wall, training thread blocked)\n", median(ours_ms));
  std::printf("  ... until durable    %8.2f ms (median wall, incl. background checksum, fsync, rename)\n",
              median(durable_ms));
  std::printf("  ratio wall  %.3fx   ratio thread CPU  %.3fx   (target <= 1.1x)\n", median(wall_ratio),
              median(cpu_ratio));
}

void bench_jump(int jumps, const fs::path& dir) {
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::StepLR scheduler(optimizer, 1, 0.7);
  auto train = synthetic_batches(8, 64);
  auto val = synthetic_batches(2, 64);
  auto session = nansense::start(model, nansense::StartOptions().optimizer(&optimizer).scheduler(&scheduler));
  std::thread trainer([&] {
    session.epochs(
        3,
        [&](int64_t) {
          model->train();
          for (auto& b : session.batches(train, "train")) train_step(model, optimizer, b);
          torch::NoGradGuard no_grad;
          model->eval();
          for (auto& b : session.batches(val, "val")) model->forward(b.data);
          scheduler.step();
        },
        nansense::EpochOptions().cache_dir((dir / "jump").string()));
    session.close();
  });
  const auto wait = std::chrono::seconds(60);
  session.wait_until_stopped(wait);
  nansense::BatchPosition target;
  target.phase = "train";
  target.epoch = 2;
  target.batch_idx = 3;
  session.run_until(target);  // epochs 0..2 are now cached
  session.wait_until_stopped(wait);
  std::vector<double> latency;
  for (int i = 0; i < jumps; ++i) {
    const auto start = Clock::now();
    session.request_time_travel(i % 2);
    if (session.wait_until_stopped(wait) != nansense::RunState::kPaused) break;
    latency.push_back(wall_ms(start));
  }
  // The restore alone: load the archive and copy it into the live objects.
  auto adapter = nansense::adapt_scheduler(scheduler);
  nansense::state::LiveState live{model.ptr().get(), {&optimizer}, adapter.get()};
  auto file = nansense::detail::core_of(session)->restorer().store()->read(1);
  std::vector<double> restore;
  for (int i = 0; i < jumps; ++i) {
    restore.push_back(timed([&] { nansense::state::restore_state(file, live); }).wall);
  }
  session.detach();
  trainer.join();
  std::printf("jump latency (request -> paused on the target's first batch, demo CNN, batch 64), %zu jumps\n",
              latency.size());
  std::printf("  median %.2f ms   (of which restoring the state: %.2f ms; the rest runs and captures the batch)\n",
              median(latency), median(restore));
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 31;
  int jumps = 15;
  std::string dir = (fs::temp_directory_path() / ("nansense_bench_tt_" + std::to_string(::getpid()))).string();
  CLI::App app{"Time travel: checkpoint write time against torch::save, and jump latency."};
  app.add_option("--rounds", rounds, "Write rounds")->capture_default_str();
  app.add_option("--jumps", jumps, "Jumps to time")->capture_default_str();
  app.add_option("--dir", dir, "Scratch folder (on the disk to measure)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  fs::create_directories(dir);
  bench_write(rounds, dir);
  bench_jump(jumps, dir);
  fs::remove_all(dir);
  return 0;
}
