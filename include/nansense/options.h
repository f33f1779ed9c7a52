// Options for nansense::start and nansense::serve, in LibTorch's chained-setter
// style: StartOptions().optimizer(&opt).port(8080).
#pragma once

#include <torch/arg.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nansense/debug.h"
#include "nansense/schedule.h"
#include "nansense/stats.h"

namespace torch::optim {
class Optimizer;
class LRScheduler;
}  // namespace torch::optim

// c10d's key-value store (torch/csrc/distributed/c10d/Store.hpp), named
// here only: a program that makes one includes c10d's headers itself.
namespace c10d {
class Store;
}  // namespace c10d

namespace nansense {

namespace detail {
struct DistributedRun;  // what StartOptions::distributed() keeps (src/distributed/run.h)
}  // namespace detail

// Aliases so TORCH_ARG's `const T&` means a const pointer, not a pointer to const.
using OptimizerPtr = torch::optim::Optimizer*;
using SchedulerPtr = torch::optim::LRScheduler*;

// Per-channel mean/std used to show a normalised input as the image it was
// (x * std + mean). Either one value list for every input, or one per named
// input layer ("input", "input_1", ...) for multi-input models.
struct InputNormalization {
  std::vector<double> all;
  std::map<std::string, std::vector<double>> per_input;

  bool empty() const { return all.empty() && per_input.empty(); }
  // The values for `input`, falling back to `all`; empty when none are set.
  const std::vector<double>& for_input(const std::string& input) const;
};

// Maps one input sample [C,H,W] (a CPU copy, already denormalised) to a
// displayable [1,H,W] or [3,H,W] image in 0..1, for inputs that are not gray
// or RGB images. Runs on a server thread: keep it a pure function.
using InputTransform = std::function<torch::Tensor(const torch::Tensor&)>;

// One transform for every input, or one per named input layer.
struct InputTransforms {
  InputTransform all;
  std::map<std::string, InputTransform> per_input;

  // The transform for `input`, falling back to `all`; empty when none is set.
  const InputTransform& for_input(const std::string& input) const;
};

// What clients can hold of the server, so that slow, dead or very many
// clients (a socket that stops reading, a half-open connection, a request
// sent a byte a second, hundreds of viewers, agents that never end their
// MCP session) cannot stall it or grow its memory without bound. Requests
// over a limit are answered at once with a status and a message saying
// which limit; nothing here ever waits on the training loop. docs/guide/security.md
// lists every limit.
struct ServeLimits {
  // Open connections at once (HTTP keep-alive and WebSocket). Default 1024.
  // One more is answered 503 and closed. Each costs a socket and a few KB.
  TORCH_ARG(int, max_connections) = 1024;
  // Requests waiting for the loop at once (a moving command's
  // timeout_seconds, over REST or MCP). They wait on their own threads, so
  // they never hold up the workers that answer every other request; one
  // more is answered 503 at once. Default 64 (a thread each while waiting).
  TORCH_ARG(int, max_waiting_requests) = 64;
  // How long a client may take to send one whole request (headers and
  // body), and how long an idle keep-alive connection stays open: a client
  // sending a byte a second is closed when it runs out. Default 30 s.
  TORCH_ARG(std::chrono::milliseconds, request_timeout) = std::chrono::seconds(30);
  // An MCP session not used for this long is dropped; a request naming it
  // then gets 404, on which MCP clients start a new session. Default 1 h.
  TORCH_ARG(std::chrono::milliseconds, mcp_session_idle_timeout) = std::chrono::hours(1);
};

// How the UI is served. None of these options costs the training loop
// anything: the server runs on its own threads and reads only published
// copies (a listener thread, plus one push thread while a page is open).
struct ServeOptions {
  // TCP port. Default 8080. 0 picks a free port (the banner and
  // Session::url() tell which).
  TORCH_ARG(int, port) = 8080;
  // Bind address. Default "127.0.0.1": this machine only.
  TORCH_ARG(std::string, host) = "127.0.0.1";
  // Open the printed address in a browser tab where a desktop browser exists.
  // Default true.
  TORCH_ARG(bool, open_browser) = true;
  // Print the address banner on stdout once the port is bound. Default true.
  TORCH_ARG(bool, print_banner) = true;
  // Serve the MCP endpoint at /mcp on the same port, so a coding agent can
  // drive and inspect the run the browser shows (same access checks).
  // Default true; false answers /mcp with 404.
  TORCH_ARG(bool, mcp) = true;
  // Limits on what clients can hold (see ServeLimits). Default: ServeLimits().
  TORCH_ARG(ServeLimits, limits) = {};

 public:
  ServeOptions& input_mean(std::vector<double> all) {
    mean_.all = std::move(all);
    return *this;
  }
  ServeOptions& input_mean(std::map<std::string, std::vector<double>> m) {
    mean_.per_input = std::move(m);
    return *this;
  }
  ServeOptions& input_std(std::vector<double> all) {
    std_.all = std::move(all);
    return *this;
  }
  ServeOptions& input_std(std::map<std::string, std::vector<double>> m) {
    std_.per_input = std::move(m);
    return *this;
  }
  ServeOptions& input_transform(InputTransform all) {
    transform_.all = std::move(all);
    return *this;
  }
  ServeOptions& input_transform(std::map<std::string, InputTransform> m) {
    transform_.per_input = std::move(m);
    return *this;
  }
  const InputNormalization& input_mean() const { return mean_; }
  const InputNormalization& input_std() const { return std_; }
  const InputTransforms& input_transform() const { return transform_; }

 private:
  InputNormalization mean_;
  InputNormalization std_;
  InputTransforms transform_;
};

// Everything nansense::start takes.
struct StartOptions {
  // Total epoch count, if known up front. Default: unknown (epochs() or
  // set_schedule() can set it later). No cost.
  TORCH_ARG(std::optional<int64_t>, epochs) = std::nullopt;
  // Declare every phase and its batch count up front for exact progress and
  // boundary stops from batch 0. Default: phases are learned in epoch 0.
  // No cost.
  TORCH_ARG(std::optional<PhaseCounts>, phases) = std::nullopt;
  // Default true. false makes the session inert: no tracing, no server,
  // batches() is a pass-through costing one flag check per batch
  // (bench/overhead: within 1% of a plain loop). Keep nansense wired in and
  // switch it off with one flag.
  TORCH_ARG(bool, enabled) = true;
  // When given, time travel and NaN capsules save and restore the LR schedule
  // too (a few numbers per checkpoint). Default none. Not owned.
  TORCH_ARG(SchedulerPtr, scheduler) = nullptr;
  // Numerical checks, root-cause tracing and the NaN flight recorder.
  // Default: every check on every batch, about 0.1% of a batch for the guard;
  // see nansense/debug.h for what each part costs.
  TORCH_ARG(DebugSettings, debug) = {};
  // Statistics over time (nansense/stats.h, docs/guide/stats.md): which layers collect (default kWatched), the layers
  // watched from the start (default none, so nothing is collected; a name the first captured batch does not have is
  // dropped and reported), how often a running loop is published without pausing (default every 2 seconds of training,
  // about 1% on the demo) and the per-channel detail kept (default the first 16 channels). Each says its cost in
  // nansense/stats.h.
  TORCH_ARG(StatsScope, stats_scope) = StatsScope::kWatched;
  TORCH_ARG(std::vector<std::string>, watch) = {};
  TORCH_ARG(UpdateFrequency, update_frequency) = {};
  TORCH_ARG(WatchPerformance, watch_performance) = {};
  // Host memory a published snapshot may spend on the tensors that grow with
  // the batch (activations, their gradients, inputs), in bytes. Default
  // 512 MiB (kDefaultSnapshotBudget); 0 keeps every sample. When a batch's
  // copies would exceed it, each keeps only its first k samples, the same k
  // for every tensor, the largest that fits (at least one sample). What the
  // UI and MCP show per layer (counts, min, max, mean) and the numerical
  // checks still cover the whole batch: they are computed on the tensor's own
  // device before it is trimmed. Pictures, the sample picker and the
  // statistics queries' spread, histograms and dead channels cover the kept
  // samples, and say so. Parameters, their gradients and optimizer state do
  // not grow with the batch and are kept whole, outside the budget. Cost:
  // trimmed tensors pay one statistics pass on their device at capture;
  // nothing when the batch fits. Negative values are refused by start().
 public:
  static constexpr int64_t kDefaultSnapshotBudget = int64_t{512} << 20;
  TORCH_ARG(int64_t, snapshot_budget) = kDefaultSnapshotBudget;
  // The snapshot budget as a share of the training step's own memory: the
  // copies also stay under this share of what the process held when the
  // batch began (less the snapshot nansense already shows) plus the storage
  // of the batch's outputs as they appear, so a paused batch costs about
  // this share on top of the step whatever the model. An activation's
  // gradient is counted with it, from the forward on. Default 0.2
  // (kDefaultSnapshotShare); 0 leaves snapshot_budget alone; values outside
  // [0, 1] are refused by start().
 public:
  static constexpr double kDefaultSnapshotShare = 0.2;
  TORCH_ARG(double, snapshot_share) = kDefaultSnapshotShare;

 public:
  // The optimizer training the model. When given, snapshots carry each
  // parameter's optimizer state and its group's hyperparameters (SGD, Adam,
  // AdamW, RMSprop, Adagrad), and time travel and NaN capsules save and
  // restore its state. Default none. Cost: a captured batch copies the
  // optimizer state to the CPU (about the model's size per state buffer);
  // checkpoints and capsules store it. Not owned. Replaces what optimizers() set.
  StartOptions& optimizer(OptimizerPtr optimizer) {
    optimizers_.clear();
    if (optimizer) optimizers_.push_back(optimizer);
    return *this;
  }
  // Several optimizers over disjoint parameters (a GAN's generator and
  // discriminator): each parameter shows the state of the optimizer that
  // holds it, and all of them are saved and restored. Not owned.
  StartOptions& optimizers(std::vector<OptimizerPtr> optimizers) {
    optimizers_.clear();
    for (auto* o : optimizers) {
      if (o) optimizers_.push_back(o);
    }
    return *this;
  }
  const std::vector<OptimizerPtr>& optimizers() const { return optimizers_; }

  // A distributed run (docs/guide/distributed.md): this process is rank
  // `rank` of `world_size` processes that train together and coordinate over
  // `store`, a c10d::TCPStore (or a c10d::PrefixStore over one) every rank
  // reaches: the one the program rendezvoused with. Call start() with it on
  // every rank. Rank 0 is the session the UI and MCP drive (it serves;
  // port() and serve() are ignored on the other ranks, and nansense::serve
  // returns false there); the other ranks follow it: they never pause on
  // their own, serve nothing and print nothing beyond a NaN's log line. At
  // every batch boundary (each batch's start, a time-travel jump, close())
  // every rank meets rank 0's decision, so all stand at the same batch
  // whenever the UI shows a pause; a NaN on any rank pauses every rank;
  // statistics add up every rank's shard; a jump rewinds every rank. Each
  // rank keeps its NaN capsules and epoch checkpoints in a folder of its own
  // (`<capsule_dir>/rank_<r>`, `<cache_dir>/rank_<r>`), and the traced re-run
  // of a tripped batch is off (DebugSettings::rerun_to_trace). A rank lost
  // (dead, hung, its loop left) ends the others' waits with DistributedError
  // within NANSENSE_DDP_TIMEOUT seconds (default 30); start() on only some
  // ranks throws it too, after that long. world_size 1 is a run of one (a
  // plain session). Cost: a store round trip each way per batch (about 1 ms
  // on loopback), a heartbeat thread and two store connections per rank.
  // Default: none, a single-process session. Not owned: the store is shared.
  // start() throws UsageError for a null store, a store that is no
  // TCPStore, world_size < 1 or a rank outside [0, world_size); on a
  // nansense built against a torch without c10d (NANSENSE_DISTRIBUTED 0)
  // this setter throws UsageError.
  StartOptions& distributed(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size);
  const std::shared_ptr<const detail::DistributedRun>& distributed() const { return distributed_; }

  // How the UI is served: port, host, browser, banner, MCP, input display.
  // Giving a whole ServeOptions, or a port, serves the UI at once from
  // nansense::start (otherwise call nansense::serve(session, ...) later, or
  // never: without a server a batch costs one flag check). Serving costs one
  // listener thread and, while a page is open, one push thread; a batch pays
  // nothing until a page or agent asks for something.
  StartOptions& serve(ServeOptions options) {
    serve_ = std::move(options);
    serve_at_start_ = true;
    return *this;
  }
  const ServeOptions& serve() const { return serve_; }
  // Whether nansense::start serves the UI (a port or serve() was given).
  bool serve_at_start() const { return serve_at_start_; }

  // Shorthands that set one field of serve() (see ServeOptions for each
  // default). input_mean/input_std (default: none, the input is shown as it
  // is) and input_transform (default: gray or RGB by channel count) only
  // change how the UI draws inputs, on a server thread.
  // port() also means "serve at once"; the others only shape a later serve.
  StartOptions& port(int port) {
    serve_.port(port);
    serve_at_start_ = true;
    return *this;
  }
  StartOptions& host(std::string host) {
    serve_.host(std::move(host));
    return *this;
  }
  StartOptions& open_browser(bool open) {
    serve_.open_browser(open);
    return *this;
  }
  StartOptions& print_banner(bool print) {
    serve_.print_banner(print);
    return *this;
  }
  StartOptions& mcp(bool on) {
    serve_.mcp(on);
    return *this;
  }
  StartOptions& input_mean(std::vector<double> all) {
    serve_.input_mean(std::move(all));
    return *this;
  }
  StartOptions& input_mean(std::map<std::string, std::vector<double>> m) {
    serve_.input_mean(std::move(m));
    return *this;
  }
  StartOptions& input_std(std::vector<double> all) {
    serve_.input_std(std::move(all));
    return *this;
  }
  StartOptions& input_std(std::map<std::string, std::vector<double>> m) {
    serve_.input_std(std::move(m));
    return *this;
  }
  StartOptions& input_transform(InputTransform all) {
    serve_.input_transform(std::move(all));
    return *this;
  }
  StartOptions& input_transform(std::map<std::string, InputTransform> m) {
    serve_.input_transform(std::move(m));
    return *this;
  }

 private:
  ServeOptions serve_;
  bool serve_at_start_ = false;
  std::vector<OptimizerPtr> optimizers_;
  std::shared_ptr<const detail::DistributedRun> distributed_;
};

}  // namespace nansense
