// What statistics over time cost a training loop, as ratios to the plain
// loop, and the memory they hold.
//
// The demo's CNN on synthetic batches: scope none, three watched layers on
// every batch, every layer on every batch, and the default live-update
// cadence (a running loop published every 2 seconds of training). Variants are
// interleaved round by round in a shuffled order, each pass in a child
// process forked from the same state on a randomly shifted heap
// (bench_common.h), and the median of the per-round ratios taken. Then a
// 200-layer network trained 100 epochs with every layer collected: the bytes
// the statistics hold on the device and in the published view on the host
// (where they go), and how much the training thread's heap grew (`--only
// memory` runs this pass alone).

#include <CLI/CLI.hpp>
#include <nansense/nansense.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "capture/host_buffers.h"
#include "stats/patches.h"
#include "stats/stats_store.h"

namespace {

using namespace nansense::bench;

enum class Variant {
  kPlain,
  kPlainCadenceWindow,
  kScopeNone,
  kTraceOnly,
  kWatched3,
  kWatched3Galleries,
  kWatched3GalleriesOps,
  kAll,
  kDefaultCadence,
  kDefaultCadenceFresh
};

// The default cadence's capture that ends its timed window: the training
// thread's CPU time and page faults of that one batch.
struct CaptureBatch {
  double ms = 0, faults = 0;
};

// A timed batch beside the training thread's CPU time (the ratio's): its
// wall-clock time, which also counts waiting for work done off the thread,
// and the whole process's CPU time, which counts that work. With all of
// nansense's statistics on the training thread the three agree; a change
// that moves work off it must show its gain in the wall clock too.
struct PassClocks {
  double wall_ms = 0, process_ms = 0;
};

inline double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Which batches of a pass are timed: those after the first `warmup`, `timed` of them.
struct Window {
  int64_t warmup = 0;
  int64_t timed = 0;
};

// One timed pass over `batches` (repeated as often as needed) in `window`;
// returns milliseconds per timed batch and, in `seen`, what it published, and
// in `usage` the timed batches' user and system time and page faults, per batch.
// Model, optimizer and session are built outside the timed region, and the
// warm-up batches let the heap and the caches settle, as they have in a long
// run. The default cadence is timed in whole periods instead (see below).
double measure(Variant variant, std::vector<Batch>& batches, Window& window, size_t heap_shift, uint64_t* seen,
               ThreadUsage* usage, PassClocks* clocks, CaptureBatch* capture = nullptr) {
  // Shallow copies: the same tensors, as many as a pass may need.
  std::vector<Batch> loop;
  while (loop.size() < 2000) loop.insert(loop.end(), batches.begin(), batches.end());
  const int64_t warmup = window.warmup;
  const HeapShift shift(heap_shift);
  torch::manual_seed(0);
  FashionCnn model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  using Clock = ThreadCpuClock;
  Clock::time_point begin, end;
  ThreadUsage usage_begin;
  std::chrono::steady_clock::time_point wall_begin;
  double process_begin = 0;
  int64_t timed = 0;
  const auto start_clock = [&] {
    usage_begin = ThreadUsage::now();
    wall_begin = std::chrono::steady_clock::now();
    process_begin = process_cpu_ms();
    begin = Clock::now();
  };
  const auto stop_clock = [&] {
    end = Clock::now();
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_begin).count();
    const double process = process_cpu_ms() - process_begin;
    if (timed > 0) {
      const auto n = static_cast<double>(timed);
      if (usage) {
        const auto used = ThreadUsage::now() - usage_begin;
        *usage = {used.user_ms / n, used.sys_ms / n, used.faults / n};
      }
      if (clocks) *clocks = {wall / n, process / n};
    }
  };
  const auto per_batch = [&] {
    return timed > 0 ? std::chrono::duration<double, std::milli>(end - begin).count() / static_cast<double>(timed)
                     : 0.0;
  };
  int64_t i = 0;
  const auto step = [&](const Batch& batch) {
    if (i++ == warmup) start_clock();
    if (i > warmup) ++timed;
    train_step(model, optimizer, batch);
  };
  const auto fixed = static_cast<size_t>(std::min<int64_t>(2000, window.warmup + window.timed));
  if (variant == Variant::kPlain || variant == Variant::kPlainCadenceWindow) {
    loop.resize(fixed);
    for (auto& batch : loop) step(batch);
    stop_clock();
    return per_batch();
  }
  auto options = nansense::StartOptions().optimizer(&optimizer);
  switch (variant) {
    case Variant::kScopeNone:
      options.stats_scope(nansense::StatsScope::kNone);
      break;
    // Collecting (every batch traced, tensors referenced) with no layer in
    // scope: the tracing part of the cost, without any folding.
    case Variant::kTraceOnly:
      options.watch({"not_a_layer"});
      break;
    // The statistics alone (Min/Max patches off), then with the patches
    // (5 inputs per channel, the default).
    case Variant::kWatched3:
      options.watch({"features.0", "features.3", "classifier.1"})
          .watch_performance(nansense::WatchPerformance().samples_per_channel(0));
      break;
    case Variant::kWatched3Galleries:
      options.watch({"features.0", "features.3", "classifier.1"});
      break;
    // The same with the patches folded by the tensor ops a device runs (the
    // CPU's path before it got plain loops): the loops' gain in one run.
    case Variant::kWatched3GalleriesOps:
      nansense::stats::set_patch_path(nansense::stats::PatchPath::kTensorOps);
      options.watch({"features.0", "features.3", "classifier.1"});
      break;
    case Variant::kAll:
      options.stats_scope(nansense::StatsScope::kAll);
      break;
    // The default cadence with every capture copied into fresh memory, as
    // before the snapshot copies were recycled: both in one run.
    case Variant::kDefaultCadenceFresh:
      nansense::capture::HostBuffers::set_recycling(false);
      break;
    default:
      break;
  }
  auto session = nansense::start(model, options);
  if (variant == Variant::kDefaultCadence || variant == Variant::kDefaultCadenceFresh) {
    // Attached and running, never reaching a last batch (no epoch count): it
    // publishes at the default cadence (2 seconds of training) without
    // pausing. Timed in whole periods of a running loop, once it has
    // settled: from the end of the session's second publish to the end of
    // its third, so the window holds one period and the capture that ends
    // it, however many batches a second is on this machine. The first
    // capture also finds the architecture, and the first two allocate the
    // two sets of buffers later captures write into (the published
    // snapshot's and the next one's), once in a run. `window` returns where
    // that was, for the plain loop to be timed over the same batches of its
    // life (glibc's heap settles as a process runs: later batches take
    // fewer page faults).
    constexpr uint64_t kSettled = 2;
    session.run();
    uint64_t published = 0;
    ThreadUsage before_step;
    Clock::time_point step_began;
    for (auto& batch : session.batches(loop, "train")) {
      const auto last = session.snapshot();
      published = last ? last->sequence : 0;
      if (published >= kSettled && timed == 0 && i > 0) {
        window.warmup = i;
        start_clock();
      }
      if (published > kSettled) {
        if (capture) {
          capture->faults = (ThreadUsage::now() - before_step).faults;
          capture->ms = std::chrono::duration<double, std::milli>(Clock::now() - step_began).count();
        }
        break;
      }
      if (published >= kSettled && i > 0) ++timed;
      ++i;
      before_step = ThreadUsage::now();
      step_began = Clock::now();
      train_step(model, optimizer, batch);
    }
    stop_clock();
    if (published <= kSettled) timed = 0;  // never reached: no figure rather than a wrong one
    window.timed = timed;
    if (seen) *seen += published >= kSettled ? published - kSettled : 0;
    session.close();
    return per_batch();
  }
  // No server runs, so nothing could release a pause: the collecting
  // variants train detached (statistics are collected all the same).
  session.detach();
  loop.resize(fixed);
  for (auto& batch : session.batches(loop, "train")) step(batch);
  stop_clock();
  if (seen) {
    if (const auto stats = session.watch_snapshot()) *seen += stats->layers.size();
  }
  session.close();
  return per_batch();
}

// measure() in a child process (bench_common.h: in_child).
double measure_isolated(Variant variant, std::vector<Batch>& batches, Window& window, size_t heap_shift, uint64_t* seen,
                        ThreadUsage* usage, PassClocks* clocks, CaptureBatch* capture = nullptr) {
  const auto out = in_child([&] {
    uint64_t published = 0;
    ThreadUsage used;
    PassClocks passed;
    CaptureBatch captured;
    const double ms = measure(variant, batches, window, heap_shift, &published, &used, &passed, &captured);
    return std::vector<double>{ms,
                               static_cast<double>(published),
                               used.user_ms,
                               used.sys_ms,
                               used.faults,
                               static_cast<double>(window.warmup),
                               static_cast<double>(window.timed),
                               captured.ms,
                               captured.faults,
                               passed.wall_ms,
                               passed.process_ms};
  });
  if (out.size() != 11) throw std::runtime_error("a benchmark pass returned no figures");
  if (seen) *seen += static_cast<uint64_t>(out[1]);
  if (usage) *usage = {out[2], out[3], out[4]};
  window = {static_cast<int64_t>(out[5]), static_cast<int64_t>(out[6])};
  if (capture) *capture = {out[7], out[8]};
  if (clocks) *clocks = {out[9], out[10]};
  return out[0];
}

struct Row {
  Row(Variant v, const char* n, const char* t, double max, size_t base = 0)
      : variant(v), name(n), target(t), max_ratio(max), baseline(base) {}
  Variant variant;
  const char* name;
  const char* target;
  double max_ratio;
  size_t baseline;  // the row its ratios divide by
  std::vector<double> ms;
  std::vector<double> ratios;
  std::vector<double> user_ms, sys_ms, faults;
  std::vector<double> wall_ratios, process_ratios;
  // Cadence rows: the batch that ends the window (its capture), and the
  // page faults a batch of the window's other batches.
  std::vector<double> capture_ms, capture_faults, other_faults, window_batches;
  uint64_t seen = 0;  // snapshots published (cadence) or (layer, phase) streams collected
};

void run_ratios(int64_t batch_count, int64_t warmup, int rounds, const std::string& only,
                const std::vector<std::string>& picked) {
  auto batches = synthetic_batches(warmup + batch_count, 64);
  // The cadence rows are timed over whole update periods, later in a pass's
  // life than the others: each has its own plain loop, timed right after it
  // over the same batches (the row its ratios divide by).
  std::vector<Row> rows = {
      {Variant::kPlain, "plain loop", nullptr, 0},
      {Variant::kPlainCadenceWindow, "plain, cadence's window", nullptr, 0, 1},
      {Variant::kPlainCadenceWindow, "plain, fresh's window", nullptr, 0, 2},
      {Variant::kScopeNone, "scope none", nullptr, 0},
      {Variant::kTraceOnly, "traced, nothing folded", nullptr, 0},
      {Variant::kWatched3, "3 watched, every batch", "<= 1.10", 1.10},
      {Variant::kWatched3Galleries, "3 watched + patches", "<= 1.15", 1.15},
      {Variant::kWatched3GalleriesOps, "3 watched + patches, tensor ops", nullptr, 0},
      {Variant::kAll, "all layers, every batch", "<= 1.4", 1.4},
      {Variant::kDefaultCadence, "default live updates", "<= 1.01", 1.01, 1},
      {Variant::kDefaultCadenceFresh, "live updates, fresh copies", nullptr, 0, 2},
  };
  const auto row_names = [&] {
    std::string names;
    for (const auto& r : rows) {
      if (r.variant != Variant::kPlain && r.variant != Variant::kPlainCadenceWindow) {
        names += (names.empty() ? "\"" : ", \"") + std::string(r.name) + "\"";
      }
    }
    return names;
  };
  if (!picked.empty()) {
    // Some rows only (each with the plain loop, or the cadence window it divides by).
    for (const auto& name : picked) {
      if (std::none_of(rows.begin(), rows.end(), [&](const Row& r) { return name == r.name; })) {
        throw std::invalid_argument("--rows: no variant named '" + name + "'; the variants: " + row_names());
      }
    }
    std::vector<Row> kept;
    for (const auto& r : rows) {
      const bool wanted =
          r.variant != Variant::kPlainCadenceWindow && std::find(picked.begin(), picked.end(), r.name) != picked.end();
      if (r.variant == Variant::kPlain || wanted) kept.push_back(r);
    }
    // A cadence row keeps the window row it divides by, placed right before it.
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i].baseline == 0) continue;
      const auto& window = rows[kept[i].baseline];
      kept.insert(kept.begin() + static_cast<std::ptrdiff_t>(i), window);
      kept[i].baseline = i;
      kept[i + 1].baseline = i;
      ++i;
    }
    rows = kept;
  }
  if (!only.empty()) {
    // One variant alone, in this process, for a profiler: no ratios.
    for (auto& row : rows) {
      if (only != row.name) continue;
      std::mt19937_64 layouts(1);
      for (int r = 0; r < rounds; ++r) {
        const size_t shift = HeapShift::draw(layouts);
        ThreadUsage used;
        PassClocks clocks;
        Window window{warmup, batch_count};
        const double ms = measure(row.variant, batches, window, shift, nullptr, &used, &clocks);
        std::printf(
            "%s: %.3f ms/batch (user %.2f, sys %.2f, %.0f page faults; wall %.3f ms, process CPU %.3f ms; heap "
            "shifted %zu bytes)\n",
            row.name, ms, used.user_ms, used.sys_ms, used.faults, clocks.wall_ms, clocks.process_ms, shift);
      }
      return;
    }
    throw std::invalid_argument("--only: no variant named '" + only + "'; the variants: " + row_names() +
                                ", or \"memory\" or \"fold\"");
  }
  std::printf(
      "\ndemo CNN, batches of 64 [1x28x28]: %d rounds of %lld synthetic batches timed after %lld "
      "warm-up batches, each pass in a child process from the same state\n",
      rounds, static_cast<long long>(batch_count), static_cast<long long>(warmup));
  std::fflush(stdout);
  // Each round runs every variant once, in an order shuffled anew, all on
  // one heap layout drawn for the round (so each ratio compares like with like).
  std::mt19937_64 order_rng(7);
  std::mt19937_64 layouts(1);
  // A cadence row's plain loop runs right after it, as one unit of the order.
  const auto is_window = [&](size_t i) { return rows[i].variant == Variant::kPlainCadenceWindow; };
  std::vector<size_t> order;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!is_window(i)) order.push_back(i);
  }
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), order_rng);
    const size_t shift = HeapShift::draw(layouts);
    std::vector<double> ms(rows.size());
    std::vector<ThreadUsage> used(rows.size());
    std::vector<PassClocks> clocks(rows.size());
    for (size_t i : order) {
      Window window{warmup, batch_count};
      CaptureBatch captured;
      ms[i] = measure_isolated(rows[i].variant, batches, window, shift, &rows[i].seen, &used[i], &clocks[i], &captured);
      const size_t plain = rows[i].baseline;
      if (plain != 0) {
        const auto n = static_cast<double>(window.timed);
        rows[i].capture_ms.push_back(captured.ms);
        rows[i].capture_faults.push_back(captured.faults);
        rows[i].other_faults.push_back(n > 1 ? (used[i].faults * n - captured.faults) / (n - 1) : 0);
        rows[i].window_batches.push_back(n);
        ms[plain] = measure_isolated(rows[plain].variant, batches, window, shift, &rows[plain].seen, &used[plain],
                                     &clocks[plain]);
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].ms.push_back(ms[i]);
      rows[i].user_ms.push_back(used[i].user_ms);
      rows[i].sys_ms.push_back(used[i].sys_ms);
      rows[i].faults.push_back(used[i].faults);
      rows[i].ratios.push_back(ms[i] / ms[rows[i].baseline]);
      const auto& plain = clocks[rows[i].baseline];
      rows[i].wall_ratios.push_back(clocks[i].wall_ms / plain.wall_ms);
      rows[i].process_ratios.push_back(clocks[i].process_ms / plain.process_ms);
    }
  }
  std::printf("%-26s %10s %8s %16s %6s %8s  %-14s %6s %6s %7s\n", "variant", "ms/batch", "ratio", "ratio IQR", "wall",
              "process", "target", "user", "sys", "faults");
  for (auto& row : rows) {
    const double ratio = median(row.ratios);
    const double wall = median(row.wall_ratios);
    std::sort(row.ratios.begin(), row.ratios.end());
    const double q1 = row.ratios[row.ratios.size() / 4];
    const double q3 = row.ratios[(row.ratios.size() * 3) / 4];
    std::string verdict =
        row.variant == Variant::kPlain || row.variant == Variant::kPlainCadenceWindow ? "baseline" : "reported";
    if (row.variant == Variant::kWatched3GalleriesOps) verdict = "before (issue 58)";
    if (row.variant == Variant::kDefaultCadenceFresh) verdict = "before (issue 58)";
    // Met only where neither the thread's time nor the wall clock passes it:
    // work moved off the training thread counts wherever the loop waits for it.
    if (row.target) verdict = std::string(row.target) + (std::max(ratio, wall) <= row.max_ratio ? "  met" : "  MISSED");
    std::printf("%-26s %10.3f %8.3f   [%5.3f, %5.3f] %6.3f %8.3f  %-14s %6.2f %6.2f %7.0f\n", row.name, median(row.ms),
                ratio, q1, q3, wall, median(row.process_ratios), verdict.c_str(), median(row.user_ms),
                median(row.sys_ms), median(row.faults));
  }
  std::printf(
      "ratio: the training thread's CPU time (it leaves out time the machine ran something else); wall: wall-clock "
      "time, which counts waiting for work done off the thread; process: the whole process's CPU time, that work "
      "included. A target is met when both ratio and wall are within it. user, sys: medians of the training "
      "thread's user and system ms a timed batch; faults: its minor page faults a batch\n");
  for (const auto& row : rows) {
    if (row.baseline == 0 || is_window(static_cast<size_t>(&row - rows.data()))) continue;
    std::printf(
        "%s: timed from the end of the session's second publish to the end of its third (%.1f captures a pass, "
        "guards the ratio: 0 would mean nothing was published), %.0f batches; the capture batch that ends it: "
        "%.2f ms, %.0f page faults; the other batches: %.1f page faults a batch (their plain loop %.1f)\n",
        row.name, static_cast<double>(row.seen) / rounds, median(row.window_batches), median(row.capture_ms),
        median(row.capture_faults), median(row.other_faults), median(rows[row.baseline].faults));
  }
}

// Where folding's time goes: the engine on the demo's largest activation
// ([64,16,28,28]), its binning alone, and one forward+backward for scale.
void run_fold_parts() {
  auto x = torch::randn({64, 16, 28, 28});
  auto time_ms = [](auto&& f) {
    f();  // warm-up
    const double begin = thread_cpu_ms();
    for (int i = 0; i < 10; ++i) f();
    return (thread_cpu_ms() - begin) / 10;
  };
  nansense::stats::TensorAccumulator accumulator{nansense::WatchPerformance()};
  const double add = time_ms([&] { accumulator.add(x); });
  const double slots = time_ms([&] { nansense::stats::slot_index(x); });
  const double to_double = time_ms([&] { (void)x.to(torch::kDouble).sum(); });
  std::printf(
      "\nfolding one [64,16,28,28] float tensor (802816 values): TensorAccumulator::add %.2f ms, of which "
      "slot_index (searchsorted binning) %.2f ms; a float64 copy + sum alone %.2f ms\n",
      add, slots, to_double);
  const auto input = torch::rand({64, 1, 28, 28});
  // A fresh activation each call, so every call has candidates to take in
  // (the same tensor again would beat no kept score after the first).
  std::vector<torch::Tensor> fresh;
  for (int i = 0; i < 11; ++i) fresh.push_back(torch::randn_like(x));
  const auto gallery_ms = [&](nansense::stats::PatchPath path) {
    nansense::stats::set_patch_path(path);
    nansense::stats::PatchCollector gallery{nansense::stats::PatchSettings{}};
    int64_t batch = 0;
    const double ms = time_ms([&] { gallery.add(fresh[batch % 11], input, batch), ++batch; });
    nansense::stats::set_patch_path(nansense::stats::PatchPath::kCpuLoops);
    return ms;
  };
  const double loops_ms = gallery_ms(nansense::stats::PatchPath::kCpuLoops);
  const double ops_ms = gallery_ms(nansense::stats::PatchPath::kTensorOps);
  nansense::stats::PatchCollector gallery{nansense::stats::PatchSettings{}};
  gallery.add(x, input, 0);
  std::printf(
      "Min/Max patches of it (max and min pixel, 5 inputs x 16 channels, a fresh activation each call): "
      "PatchCollector::add %.2f ms (%.2f ms by the tensor ops); they hold %.1f KiB (%.1f KiB per channel)\n",
      loops_ms, ops_ms, gallery.bytes() / 1024.0, gallery.bytes() / 1024.0 / 16);
  // The maps' extremes taken by the statistics' fold as it passes (what a
  // session does for a patched layer's activation): the fold with and
  // without them, and add() given them.
  const nansense::WatchPerformance detail;
  std::vector<nansense::stats::MapExtremesTable> tables(fresh.size());
  // Both over the same fresh activations in turn (the same tensor again
  // would stay in the cache).
  int64_t folded = 0;
  const double fold_ms = time_ms([&] {
    nansense::stats::fold_on_cpu(fresh[static_cast<size_t>(folded % 11)], detail, 0);
    ++folded;
  });
  const double fold_maps_ms = time_ms([&] {
    auto& table = tables[static_cast<size_t>(folded % 11)];
    table.channels = 16;
    nansense::stats::fold_on_cpu(fresh[static_cast<size_t>(folded % 11)], detail, 0, &table);
    ++folded;
  });
  for (size_t i = 0; i < fresh.size(); ++i) {
    tables[i].channels = 16;
    nansense::stats::fold_on_cpu(fresh[i], detail, 0, &tables[i]);
  }
  nansense::stats::PatchCollector ahead{nansense::stats::PatchSettings{}};
  int64_t batch = 0;
  const double ahead_ms = time_ms([&] {
    const auto i = static_cast<size_t>(batch % 11);
    ahead.add(fresh[i], input, batch, &tables[i]);
    ++batch;
  });
  // The fold of one tensor again and again: from the cache, as a session
  // folds an activation right after the op wrote it.
  const double cached_ms = time_ms([&] { nansense::stats::fold_on_cpu(x, detail, 0); });
  std::printf(
      "the same with the maps' extremes taken by the statistics' fold as it passes: the fold %.2f ms "
      "(%.2f ms without them; %.2f ms folding one tensor again, from the cache), then PatchCollector::add %.2f ms\n",
      fold_maps_ms, fold_ms, cached_ms, ahead_ms);
}

// 100 Linear + ReLU pairs: 200 layers (plus the input and the loss-side ops).
struct DeepMlpImpl : torch::nn::Module {
  explicit DeepMlpImpl(int64_t width) {
    for (int i = 0; i < 100; ++i) {
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = torch::relu(l(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(DeepMlp);

// Heap bytes in use on the main arena (the training thread's), chunks and
// mmapped blocks together.
size_t heap_in_use() {
  const auto info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

double mb(size_t bytes) { return static_cast<double>(bytes) / 1e6; }

// Where the published view's host bytes go, by the same accounting as
// WatchSnapshot::host_bytes() (which counts a vector by its capacity).
void print_view_breakdown(const nansense::WatchSnapshot& stats) {
  size_t buckets = 0, bucket_slots = 0, bins = 0, samples = 0, sample_slots = 0;
  for (const auto& [_, list] : stats.layers) {
    buckets += list.size();
    bucket_slots += list.capacity();
    for (const auto& b : list) {
      for (const auto* t : {&b.activation, &b.gradient}) {
        if (!*t) continue;
        const auto& v = **t;
        bins += v.hist.capacity() * sizeof(int64_t) + v.channel_hists.capacity() * sizeof(std::vector<int64_t>) +
                v.dead_channels.capacity() * sizeof(int64_t);
        for (const auto& row : v.channel_hists) bins += row.capacity() * sizeof(int64_t);
      }
    }
  }
  for (const auto& [_, list] : stats.parameters) {
    samples += list.size();
    sample_slots += list.capacity();
  }
  const size_t total = stats.host_bytes();
  const size_t objects = buckets * sizeof(nansense::LayerStatsSnapshot);
  const size_t slack = (bucket_slots - buckets) * sizeof(nansense::LayerStatsSnapshot);
  const size_t params = sample_slots * sizeof(nansense::ParameterSample);
  std::printf("  %zu buckets x %zu bytes (LayerStatsSnapshot, two optional %zu-byte TensorStatsSnapshots): %.2f MB\n",
              buckets, sizeof(nansense::LayerStatsSnapshot), sizeof(nansense::TensorStatsSnapshot), mb(objects));
  std::printf("  unused vector capacity behind them (%zu slots): %.2f MB\n", bucket_slots - buckets, mb(slack));
  std::printf("  histogram bins of the newest epochs (layer and channel rows, dead channels): %.2f MB\n", mb(bins));
  std::printf("  %zu parameter samples x %zu bytes (%zu slots): %.2f MB\n", samples, sizeof(nansense::ParameterSample),
              sample_slots, mb(params));
  std::printf("  map nodes, names and series: %.2f MB\n", mb(total - objects - slack - bins - params));
}

void run_memory(int64_t epochs, int64_t width) {
  torch::manual_seed(0);
  DeepMlp model(width);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-3));
  auto session =
      nansense::start(model, nansense::StartOptions().optimizer(&optimizer).stats_scope(nansense::StatsScope::kAll));
  session.detach();
  std::vector<Batch> train = {{torch::randn({32, width}), torch::randn({32, width})}};
  std::vector<Batch> val = {{torch::randn({32, width}), torch::randn({32, width})}};
  const size_t heap_before = heap_in_use();
  const double begin = thread_cpu_ms();
  for (int64_t e = 0; e < epochs; ++e) {
    for (auto& b : session.batches(train, "train", e)) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(b.data), b.target).backward();
      optimizer.step();
    }
    torch::NoGradGuard no_grad;
    for (auto& b : session.batches(val, "val", e)) model->forward(b.data);
  }
  session.close();
  const double ms = thread_cpu_ms() - begin;
  const auto stats = session.watch_snapshot();
  if (!stats) {
    std::printf("\nmemory: nothing was collected (statistics disabled?)\n");
    return;
  }
  std::set<std::string> names;
  for (const auto& [key, _] : stats->layers) names.insert(key.first);
  std::printf("\n%zu layers (train + val, width %lld), %lld epochs of 1 batch per phase, scope all: %.0f ms\n",
              names.size(), static_cast<long long>(width), static_cast<long long>(epochs), ms);
  std::printf("statistics hold %.2f MB on the device and %.2f MB on the host (the published view)\n",
              static_cast<double>(stats->device_bytes) / 1e6, static_cast<double>(stats->host_bytes()) / 1e6);
  print_view_breakdown(*stats);
  // The store the view was published from, the session's other state and
  // the view itself: what the process holds, not an estimate.
  std::printf(
      "the training thread's heap grew %.2f MB over the run (the statistics store, the published view and "
      "the rest of the session)\n",
      (static_cast<double>(heap_in_use()) - static_cast<double>(heap_before)) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch_count = 60;
  int64_t warmup = 10;
  int rounds = 25;
  int64_t epochs = 100;
  std::string only;
  std::vector<std::string> picked;
  CLI::App app{"Statistics over time: cost on the demo CNN and memory for a 200-layer network."};
  app.add_option("--batches", batch_count,
                 "Batches per timed pass (the default-cadence row is timed over whole update periods instead)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Batches each pass runs before its clock starts")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", rounds, "Rounds; each times every variant once, in a shuffled order")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--epochs", epochs, "Epochs of the 200-layer memory run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--only", only,
                 "Time one variant by its row name (e.g. \"3 watched, every batch\"), for a profiler; \"memory\" runs "
                 "the memory pass alone, \"fold\" the timings of one tensor's fold and patches");
  app.add_option("--rows", picked,
                 "Time these variants only, by row name, each beside the plain loop it divides by (a quicker A/B)")
      ->excludes("--only");
  CLI11_PARSE(app, argc, argv);

  torch::set_num_threads(1);
  torch::manual_seed(0);
  settle_allocator();
  std::printf("nansense statistics over time\n");
  std::printf(
      "torch threads: 1; times are the training thread's CPU time; ratio = median over rounds of "
      "(variant / plain loop of the same round)\n");
  if (only == "memory") {
    run_memory(epochs, 16);
    return 0;
  }
  if (only == "fold") {
    run_fold_parts();
    return 0;
  }
  try {
    run_ratios(batch_count, warmup, rounds, only, picked);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (!only.empty() || !picked.empty()) return 0;
  run_fold_parts();
  run_memory(epochs, 16);
  return 0;
}
