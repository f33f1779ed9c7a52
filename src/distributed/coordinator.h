// Distributed runs of a C++ program (StartOptions::distributed): rank 0
// leads, the other ranks follow, over the run's c10d TCPStore. The rank
// protocol (keys, messages, decisions, losing the run) is described once,
// in docs/guide/distributed.md, "The rank protocol"; this coordinator speaks
// the subset that section names (the full exchange at every boundary: a
// follower's one message a boundary, q/<r>/<n>, rank 0's decision g/<n>,
// the start/, hb/ and x/ keys). Python's coordinator
// (python/nansense/_distributed.py) speaks all of it; a run is all C++ or
// all Python.
//
// Rank 0's session is the one the UI and MCP drive; the other ranks'
// sessions never pause on their own (detached, no server, no output beyond a
// NaN's log line). Rank 0 reads every follower's news of boundary n in one
// multiGet; its heartbeat thread reads them early (peek) so that a paused
// rank 0 names a follower's trip and adds its statistics meanwhile.
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

class Coordinator {
 public:
  // What the coordinator asks of its session. Called on the training thread
  // unless marked "any thread" (the heartbeat thread calls those).
  struct Host {
    // Any thread: this rank's standing trip (SessionCore::standing_trip),
    // null when none.
    std::function<nlohmann::json()> standing_trip;
    // This rank's trip when not told before, else null (SessionCore::trip_news).
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
    // A follower: never pause on its own.
    std::function<void()> detach;
    // Rank 0: whether a UI is served (something can resume a pause).
    std::function<bool()> served;
    // Rank 0: what the followers must collect; a follower: apply it.
    std::function<nlohmann::json()> stats_settings;
    std::function<void(const nlohmann::json&)> apply_stats_settings;
  };

  // Connects to the store at `store` (two clients: the training thread's,
  // the heartbeat thread's) and meets every rank's start: DistributedError
  // naming the missing ranks when some have not started within `timeout`.
  Coordinator(const StoreAddress& store, int rank, int world, std::chrono::milliseconds timeout, Host host);
  // A coordinator not closed tells the peers this rank left (its session
  // ended without close()), then stops its heartbeat.
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  bool leader() const { return rank_ == 0; }

  // Meets the other ranks at this batch boundary; DistributedError when a
  // rank is lost. Rank 0 gathers the followers' news here (and pauses when
  // one tripped); unless this boundary ends in a jump (`jump`: the epoch of
  // the TimeTravelJump unwinding rank 0's batch) or the end (`close`), its
  // decision is sent by release() once its next batch has begun. A follower
  // waits here for the decision; a jump is armed on its session, so that its
  // batch start raises it.
  void boundary(std::optional<int64_t> jump = std::nullopt, bool close = false);
  // Rank 0: sends the decision of the boundary gathered last.
  void release(std::optional<int64_t> jump = std::nullopt, bool close = false);
  // This rank left its loop by an exception: the others stop at their next
  // boundary instead of waiting for it.
  void abandon(const std::string& why);
  void close();

 private:
  using Bytes = std::vector<uint8_t>;
  void handshake();
  void beat();
  void peek(int64_t n);
  void lose(const std::string& why);
  [[noreturn]] void raise_lost();
  std::vector<Bytes> wait(const std::vector<std::string>& keys);
  void set(const std::string& key, const std::string& value);
  std::string news();
  void gather(int64_t n, bool close);
  void follow(int64_t n, bool close);
  void add_news(int rank, const nlohmann::json& news);
  void record_trips(const std::map<int, nlohmann::json>& tripped);
  void leave(const std::string& why);
  std::string rank_text() const { return std::to_string(rank_); }

  const int rank_;
  const int world_;
  const std::chrono::milliseconds timeout_;
  Host host_;
  c10::intrusive_ptr<c10d::Store> main_;  // the training thread's waits
  c10::intrusive_ptr<c10d::Store> side_;  // the heartbeat thread's
  std::atomic<int64_t> n_{0};             // boundaries met
  int64_t deleted_ = 0;                   // boundaries whose own keys the heartbeat removed
  bool closed_ = false;
  bool left_ = false;                         // x/<rank> set
  std::optional<int64_t> pending_;            // rank 0: the boundary gathered, its decision not sent
  bool rejoin_ = false;                       // a follower that made a jump: detach it again
  std::optional<nlohmann::json> stats_sent_;  // rank 0: the statistics settings the followers have
  std::optional<std::pair<std::vector<int64_t>, std::string>> checkpoints_sent_;  // a follower's last report

  std::mutex lost_mu_;  // lost_ and awaiting_
  std::optional<std::string> lost_;
  std::vector<std::string> awaiting_;  // the keys the training thread waits for

  std::mutex trips_mu_;                       // trips_, peeked_, shard_warned_
  std::map<int, nlohmann::json> trips_;       // rank 0: each rank's first trip
  std::set<std::pair<int64_t, int>> peeked_;  // rank 0: (boundary, rank) news read early
  std::set<int> shard_warned_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace nansense::distributed
