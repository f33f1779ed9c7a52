// The per-session queue of experiments: requests from any thread, run in
// order on the training thread inside the pause loop (or at the next live
// update when auto-run is on), each isolated (state/isolation.h) so training
// and time travel cannot tell it ran. Results are published as immutable
// copies; the 8 most recent are kept.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/auto_runs.h"
#include "experiments/experiments.h"
#include "nansense/architecture.h"
#include "nansense/options.h"
#include "nansense/snapshot.h"
#include "common/refusal.h"

namespace nansense::experiments {

using common::Refusal;

class Engine {
 public:
  // What the engine needs of its session.
  struct Host {
    std::function<std::shared_ptr<const BatchSnapshot>()> snapshot;
    // Paused in the pause loop now.
    std::function<bool()> paused;
    // Paused inside a traced batch (a numerical check stopped it during
    // backward, before the optimizer step): nothing can be traced until the
    // next pause between batches. Asked from any thread (an op observer in
    // the process may be an experiment's own forward, so it cannot tell).
    std::function<bool()> in_batch_pause;
    // Training finished or lost: nothing can run any more ("" while live).
    std::function<std::string()> ended;
    // The pause is ending (a resume, a jump) or the run ended.
    std::function<bool()> leave_requested;
    // Queues work for the training thread's pause loop.
    std::function<void(std::function<void()>)> post;
    // A result changed (wakes the push channel's watchers).
    std::function<void()> changed;
    // How inputs are normalised (for Deep Dream's clamp).
    std::function<ServeOptions()> display;
  };
  static constexpr size_t kKeptResults = 8;
  // A locked session (Session::lock) is shared by many visitors: each request
  // is clamped to these bounds (the parameters that make a run long), at most
  // kLockedQueue wait at once (more are refused with a reason), each run
  // stops at kLockedTimeLimit seconds, and the newest kLockedKeptResults are
  // kept so that every visitor finds its own.
  struct Clamp {
    const char* key;
    double bound;
    bool upper;  // true: at most `bound`; false: at least
  };
  static constexpr Clamp kLockedLimits[] = {
      {"steps", 64, true}, {"channels", 8, true}, {"batch", 8, true}, {"ig_steps", 32, true}, {"stride", 2, false}};
  static constexpr size_t kLockedQueue = 16;
  static constexpr double kLockedTimeLimit = 20;
  static constexpr size_t kLockedKeptResults = 64;
  static constexpr double kDefaultTimeLimit = 90;

  Engine(torch::nn::Module& model, Host host);

  // Any thread.
  void set_forward(ForwardFn forward);
  bool has_forward() const;
  ForwardFn forward() const;

  struct Submitted {
    uint64_t seq = 0;
    json params;                       // resolved
    std::vector<std::string> ignored;  // unknown keys
    std::vector<std::string> clamped;  // keys a locked session bounded (kLockedLimits)
    int64_t queued_ahead = 0;
  };
  // Validates and queues a request. Refused: unknown kind or layer (naming
  // the known ones), a layer the kind cannot use (saying why), a parameter of
  // the wrong type or out of range, no captured batch yet, no forward, or the
  // loop running without auto-run (kConflict: pause first).
  // `until_pause`: a request made while the loop runs (auto-run off) waits
  // in the queue for the next pause instead of being refused (the
  // reference API's request_experiment).
  Submitted submit(const std::string& kind, const std::string& layer, const json& params, bool until_pause = false);
  // The seq of the newest request made (0 before the first).
  uint64_t latest_seq() const;
  // Cancels one request (queued or running) or, with nullopt, all; returns
  // how many it stopped.
  int cancel(std::optional<uint64_t> seq);
  // The request's result as published (progress or outcome); nullptr when
  // absent (never submitted, or dropped from the 8 kept).
  std::shared_ptr<const Result> result(uint64_t seq) const;
  // Queued requests ahead of `seq` (0 when it runs), nullopt when not queued.
  std::optional<int64_t> queued_ahead(uint64_t seq) const;
  // Blocks until `seq` finishes or the timeout passes; its result then.
  std::shared_ptr<const Result> wait(uint64_t seq, std::chrono::milliseconds timeout) const;
  std::vector<uint64_t> kept() const;

  bool auto_run() const;
  void set_auto_run(bool on);
  // Session defaults, layered between a kind's own and the caller's params:
  // {kind: {key: value}} for the kinds that have any.
  json defaults() const;
  // Replaces `kind`'s session defaults with `params` (an empty object clears
  // them), checked as run_experiment's are. Unknown keys are not kept: they
  // are returned, to be reported as ignored. Throws common::Refusal(kInvalidArgument) for an
  // unknown kind or a bad value.
  std::vector<std::string> set_defaults(const std::string& kind, const json& params);
  double time_limit_seconds() const;
  void set_time_limit_seconds(double seconds);

  // --- auto experiments: one per page (tab), re-run at each snapshot ---
  using Clock = AutoRuns::Clock;
  // Registers or renews (a heartbeat) `tab`'s auto experiment, checked as
  // submit() checks a request (but accepted while the loop runs). A new or
  // changed one runs at once when the loop is paused (its seq in the reply;
  // 0 when it waits for the next snapshot).
  // `pinned`: a recording's (AutoRuns::Entry::pinned), kept until
  // clear_auto and run at each snapshot even with auto-run off.
  Submitted set_auto(const std::string& tab, const std::string& kind, const std::string& layer, const json& params,
                     Clock::time_point now, bool pinned = false);
  // Forgets `tab`'s auto experiment; false when it had none.
  bool clear_auto(const std::string& tab);
  // The registered auto experiments still renewed at `now` (older ones are
  // dropped first).
  std::vector<AutoRuns::Entry> auto_entries(Clock::time_point now);
  // Whether live updates run experiments: auto-run on, or a pinned auto
  // experiment registered (the training thread drains the queue then).
  bool runs_at_updates() const;
  // The newest finished result still kept that `which` accepts (nullptr
  // when none).
  std::shared_ptr<const Result> latest_finished(const std::function<bool(const Result&)>& which) const;
  // Training thread, right after a snapshot is published: drops expired
  // entries and, while auto-run is on, queues each tab's experiment (the
  // pinned ones whether or not it is on; a tab's own request still queued
  // gives way to the new one; other tabs' requests and any running one are
  // untouched). Returns how many it queued.
  int snapshot_published(Clock::time_point now);

  // --- a change feed for the push channel ---
  struct Changes {
    uint64_t version = 0;
    // The results published after the version asked about (and, when any
    // were, every queued one: their place in the queue moved).
    std::vector<std::shared_ptr<const Result>> results;
  };
  Changes changes_since(uint64_t version) const;

  // One way: the limits above from now on; auto experiments and changes to
  // the defaults, auto-run and the time limit are refused.
  void lock();
  bool locked() const;

  // Training thread: runs the queued requests in order until the queue is
  // empty or the pause ends (those left wait for the next pause).
  void drain();
  bool pending() const;
  // The session closed: queued requests become stopped results.
  void close();

 private:
  struct Request {
    uint64_t seq = 0;
    std::string kind;
    std::string layer;
    json params;
    std::string tab;  // the auto experiment it re-runs ("" for a direct request)
  };
  // A result of `request` at `stage`: what was asked, nothing computed yet.
  static Result result_of(const Request& request, Result::Stage stage);
  // The result of a queued request dropped before it ran, saying why.
  static Result stopped_before_running(const Request& request, std::string why);
  struct Checked {
    const KindSpec* kind = nullptr;
    Resolved resolved;
  };
  // What submit() refuses before it looks at the pause.
  Checked check(const std::string& kind, const std::string& layer, const json& params) const;
  // mu_ held: queues the request and records its queued result.
  Submitted enqueue(Request request);
  // mu_ held: `tab`'s queued requests leave the queue (stopped results).
  std::vector<Result> drop_queued_of(const std::string& tab);
  void publish(const Result& r);    // mu_ not held
  void keep_recent();               // mu_ held
  void mark_changed(uint64_t seq);  // mu_ held
  void run_one(const Request& request);

  torch::nn::Module& model_;
  Host host_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  ForwardFn forward_;
  uint64_t next_seq_ = 1;
  std::deque<Request> queue_;
  std::optional<uint64_t> running_;
  std::map<uint64_t, bool> cancelled_;
  std::map<uint64_t, std::shared_ptr<const Result>> results_;
  bool auto_run_ = false;
  AutoRuns auto_runs_;
  uint64_t version_ = 0;
  std::map<uint64_t, uint64_t> changed_at_;  // seq -> version of its last change
  json defaults_ = json::object();
  double time_limit_ = kDefaultTimeLimit;
  bool closed_ = false;
  bool locked_ = false;
};

}  // namespace nansense::experiments
