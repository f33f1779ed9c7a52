// Distributed runs: rank 0 leads, the other ranks follow, over the run's
// c10d TCPStore. One implementation of the rank protocol for C++ programs
// (StartOptions::distributed) and the Python package (nansense.start() in
// a torch.distributed process group, which binds this class through its
// engine). Its keys, messages and decisions — the batch ahead, holding the
// update before the optimizer step, settled boundaries, jumps in lockstep,
// closing, losing the run — are described once, in
// docs/guide/distributed.md, "The rank protocol".
//
// Rank 0's session is the one the UI and MCP drive; the other ranks'
// sessions never pause on their own (detached, no server, no output beyond a
// NaN's log line).
//
// Threads: the training thread meets the boundaries (boundary(), release(),
// release_ahead()); a heartbeat thread per rank watches the peers; rank 0
// has a reader per follower (its messages, in order) and a follower a
// fetcher (rank 0's decisions, ahead); a sender thread sets the keys that
// the training thread and the engine's callbacks (settled(),
// update_decided(), await_leader(), from the backward's final callback)
// hand it. Every wait blocks in the store; losing the run sets every key
// this rank waits on to "!<why>".
//
// This part knows nothing of the session: it learns what it needs through
// Host (the session's numerics, statistics, time travel and run control).
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nansense/debug.h"
#include "nansense/time_travel.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace nansense::distributed {

inline constexpr const char* kTimeoutEnv = "NANSENSE_DDP_TIMEOUT";

// NANSENSE_DDP_TIMEOUT (seconds, > 0) or 30 s. UsageError for a bad value.
std::chrono::milliseconds timeout_from_env();

// Where a TCPStore serves: what `store` (a c10d::TCPStore, or PrefixStores
// over one) connects to. UsageError for another kind of store.
struct StoreAddress {
  std::string host;
  int port = 0;
};
StoreAddress address_of(const c10::intrusive_ptr<c10d::Store>& store);

// Rank 0's refusal to skip an update while some follower made its step.
extern const char* const kSkipRefused;

class Coordinator {
 public:
  // What the coordinator asks of its session. Called on the training thread
  // unless marked "any thread" (the heartbeat, reader and callback threads
  // call those).
  struct Host {
    // Any thread: this rank's standing trip (SessionCore::standing_trip),
    // null when none.
    std::function<nlohmann::json()> standing_trip;
    // Any thread: this rank's trip when not told before, else null
    // (SessionCore::trip_news).
    std::function<nlohmann::json()> trip_news;
    // Any thread (rank 0): the run is lost; the UI shows why, a pause ends.
    std::function<void(const std::string&)> mark_lost;
    // Rank 0: pause at the boundary of the batch that just ended.
    std::function<void()> hold_at_boundary;
    // Any thread (rank 0): name the ranks that tripped in the debug report
    // (every rank's first trip, and the ones just learnt).
    std::function<void(const std::map<int, nlohmann::json>& trips, const std::map<int, nlohmann::json>& fresh)>
        note_rank_trips;
    // A follower: its layer statistics since the last call ("" when none).
    std::function<std::string()> take_stats_shard;
    // Any thread (rank 0): a follower's statistics shard, added to the view.
    std::function<void(int rank, int64_t ranks, const std::string& shard)> add_stats_shard;
    // Any thread (rank 0): the epochs a follower holds checkpoints of.
    std::function<void(int rank, std::vector<int64_t> epochs, std::string where)> set_peer_checkpoints;
    std::function<TimeTravelStatus()> time_travel_status;
    // A follower: arm rank 0's jump (TimeTravelError when refused).
    std::function<void(int64_t)> request_time_travel;
    // A follower at a settled boundary: raise the armed jump now (throws
    // TimeTravelJump). Rank 0 there: the same, for a jump armed meanwhile.
    std::function<void()> raise_armed_jump;
    // A follower: never pause on its own.
    std::function<void()> detach;
    // Rank 0: whether a UI is served (something can resume a pause).
    std::function<bool()> served;
    // Rank 0, once its batch began (SessionCore::runs_through_next_boundary):
    // nothing can stop it before the next boundary.
    std::function<bool()> runs_through_next_boundary;
    // Rank 0: while held, an armed jump waits for a boundary where every rank waits.
    std::function<void(bool)> hold_jumps;
    // Rank 0: whether its checks can pause a batch before it settles.
    std::function<bool()> checks_can_pause;
    // Any thread (rank 0): why skipping an update is refused ("" allows it).
    std::function<void(const std::string&)> refuse_skip;
    // Rank 0: what the followers must collect (and a version that changes
    // with it); a follower: apply it.
    std::function<uint64_t()> stats_settings_version;
    std::function<nlohmann::json()> stats_settings;
    std::function<void(const nlohmann::json&)> apply_stats_settings;
  };

  struct Options {
    StoreAddress store;
    int rank = 0;
    int world = 1;
    std::chrono::milliseconds timeout{30000};
    // Every rank checks its gradients once averaged too, inside backward
    // (DDP), so the ranks hold the update before the optimizer step.
    bool hold_before_step = false;
    // Rank 0 lets the followers past a boundary nothing can stop it before
    // (the batch ahead). Off, every rank waits at every boundary (the full
    // exchange): a C++ program's loop averages the gradients through a
    // collective of its own, where a follower let into the next batch would
    // wait for a rank 0 that paused after this one.
    bool batch_ahead = false;
    // For the refusal when some rank did not start: the call and how to
    // make it on every rank, in the front end's words.
    std::string start_call = "nansense::start()";
    std::string start_advice;
    // The run's keys live under nansense/<session>/; -1: this process's next
    // session (every rank starts its sessions in the same order).
    int session = -1;
  };

  // Connects to the store (one client per thread) and meets every rank's
  // start: DistributedError naming the missing ranks when some have not
  // started within the timeout.
  Coordinator(Options options, Host host);
  // A coordinator not closed tells the peers this rank left (its session
  // ended without close()), then stops its threads.
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  bool leader() const { return rank_ == 0; }

  // Meets the other ranks at this batch boundary; DistributedError when a
  // rank is lost. Rank 0 gathers the followers' news here (and pauses when
  // one tripped) unless it let them past this boundary a batch ahead;
  // unless this boundary ends in a jump (`jump`: the epoch of the
  // TimeTravelJump unwinding rank 0's batch) or the end (`close`), its
  // decision is sent by release() once its next batch has begun. A follower
  // waits here for the decision; a jump is armed on its session, so that
  // its batch start raises it.
  // `settled`: a boundary met right after a batch ended instead of before
  // the next begins (Lightning's loop runs a collective of its own in
  // between): rank 0 sends its decision at once, holding jumps until its
  // next batch has begun (then release_ahead()), and a follower raises a
  // jump here (TimeTravelJump).
  void boundary(std::optional<int64_t> jump = std::nullopt, bool close = false, bool settled = false);
  // Rank 0: sends the decision of the boundary gathered last, and (`ahead`)
  // the next one's when nothing can stop rank 0 before it.
  void release(std::optional<int64_t> jump = std::nullopt, bool close = false, bool ahead = true);
  // Rank 0, its batch begun: sends the next boundary's decision now when
  // nothing can stop rank 0 before it.
  void release_ahead();
  // This rank left its loop by an exception: the others stop at their next
  // boundary instead of waiting for it.
  void abandon(const std::string& why);
  void close();

  // The engine's callbacks, from the backward's final callback (never throw).
  // The batch under way checked clean (SessionCore::set_on_settled).
  void settled();
  // Rank 0: its update of this batch is decided before the optimizer step.
  void update_decided(bool skipped);
  // A follower whose batch tripped before its optimizer step: tells rank 0
  // and waits for its choice (true: skip; nullopt: the run was lost).
  std::optional<bool> await_leader();

  // Rank 0: the run's gradients are averaged inside backward (a DDP
  // wrapper), so rank 0's own clean check speaks for every rank.
  void set_averaged(bool averaged) { averaged_ = averaged; }
  // Rank 0: every rank's halted() turns true at one boundary, the one whose
  // decision is sent next.
  void request_halt() {
    if (leader()) halt_asked_ = true;
  }
  // True from the boundary that carried rank 0's request_halt() on.
  bool halted() const;

  // What the tests count (tests/python/ddp_worker.py): the boundaries met;
  // a follower's boundaries where it waited for rank 0, and the batches it
  // reported clean; rank 0's decisions sent once the batch checked clean.
  struct Counts {
    int64_t boundaries = 0;
    int64_t waited = 0;
    int64_t cleans = 0;
    int64_t sent_clean = 0;
  };
  Counts counts() const;

 private:
  using Store = c10::intrusive_ptr<c10d::Store>;
  using Bytes = std::vector<uint8_t>;
  class Sender;

  Store client() const;
  void handshake();
  // Threads.
  void beat();
  void read_news(int r, Store store);
  void fetch_decisions(Store store);
  // Losing the run.
  void lose(const std::string& why);
  [[noreturn]] void raise_lost();
  void store_failed(const std::string& what, const std::exception& e);
  // The values of `keys` once all are set (a feed thread's wait); nullopt
  // when the run is lost or this rank closed.
  std::optional<std::vector<Bytes>> feed_wait(const std::string& who, Store& store,
                                              const std::vector<std::string>& keys);
  // The training thread waits until ready() (under mu_); DistributedError
  // when the run is lost first; false when `timeout` passed first.
  bool await(const std::function<bool()>& ready, std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Rank 0.
  void pass(int64_t n);
  void gather(int64_t n, bool close, bool jump);
  void record_trip(int r, const nlohmann::json& trip);
  void record_trips(const std::map<int, nlohmann::json>& tripped);
  void note_held(int r, int64_t n, const nlohmann::json& trip, Store& store);
  void answer(int64_t n, bool skip, Store& store);
  void add_news(int r, const nlohmann::json& news);
  std::string decision(int64_t n);
  std::optional<std::pair<int64_t, std::string>> take_ready();
  void send(Store& store, const std::optional<std::pair<int64_t, std::string>>& ready);
  std::string end_decision() const;
  // A follower.
  void follow(int64_t n, bool close, bool settled);
  void leave(const std::string& why);
  std::string rank_text() const { return std::to_string(rank_); }

  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  const Options options_;
  const std::string prefix_;
  Host host_;
  Store main_;  // the training thread's keys
  Store side_;  // the heartbeat thread's (and lose()'s)
  std::unique_ptr<Sender> sender_;
  std::atomic<int64_t> n_{0};  // boundaries met
  std::atomic<bool> closed_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> averaged_{false};
  std::atomic<bool> halt_asked_{false};
  std::atomic<bool> report_clean_{false};
  std::atomic<bool> said_failed_{false};
  std::atomic<int64_t> posted_{0};  // a follower's messages so far
  std::atomic<int64_t> waited_{0};
  std::atomic<int64_t> cleans_{0};
  std::optional<std::string> settle_off_;  // why settled() is off (it failed once)
  bool rejoin_ = false;                    // a follower that made a jump: detach it again
  std::optional<std::pair<std::vector<int64_t>, std::string>> checkpoints_sent_;

  mutable std::mutex mu_;  // what the threads hand over
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> awaiting_;  // thread -> the keys it waits for
  std::optional<std::string> lost_;
  std::optional<std::string> left_;  // why this rank left the run
  // Rank 0.
  std::map<int, int64_t> seen_;                                  // follower -> the last boundary of its news
  std::map<int64_t, std::map<int, nlohmann::json>> tripped_at_;  // boundary -> the followers' trips
  std::map<int64_t, std::vector<int>> closed_at_;                // boundary -> the followers that closed there
  std::set<int64_t> own_trip_at_;                                // boundaries where rank 0's own trip was news
  bool hold_wanted_ = false;                // a follower tripped where rank 0 did not wait: hold at the next wait
  std::optional<int64_t> pending_;          // the boundary gathered, its decision not yet sent
  int64_t sent_ = -1;                       // the last boundary whose decision is sent
  int64_t gathering_ = -1;                  // the boundary rank 0's training thread gathers last
  std::map<int64_t, std::set<int>> clean_;  // boundary -> followers whose batch before it checked clean
  std::optional<std::pair<int64_t, std::string>> ready_;  // prepared once rank 0's batch checked clean
  std::optional<bool> clean_sent_;  // whether the followers were last told to report clean batches
  int64_t sent_clean_ = 0;          // decisions sent once the batch checked clean
  std::optional<nlohmann::json> stats_sent_;
  std::optional<uint64_t> stats_version_;
  std::optional<int64_t> halt_at_;            // every rank: the boundary whose decision carried the halt
  std::map<int64_t, std::set<int>> holding_;  // boundary -> followers holding the update before it
  std::set<int64_t> answered_;                // boundaries whose held updates rank 0 answered
  std::map<int64_t, bool> decided_;           // boundary -> rank 0 skipped its update before it
  int64_t past_ = -1;                         // the last boundary rank 0's training thread reached
  // A follower: the decisions fetched ahead.
  std::map<int64_t, std::string> decisions_;

  std::mutex trips_mu_;                  // trips_, shard_warned_
  std::map<int, nlohmann::json> trips_;  // rank 0: each rank's first trip
  std::set<int> shard_warned_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread heartbeat_;
  std::vector<std::thread> feeds_;
};

}  // namespace nansense::distributed
