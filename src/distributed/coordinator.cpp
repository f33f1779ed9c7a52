// The boundary exchange of a distributed run (see coordinator.h).
#include "distributed/coordinator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "nansense/errors.h"
#include "nansense/time_travel.h"

namespace nansense::distributed {

using json = nlohmann::json;

namespace {

// Per process: every rank starts its sessions in the same order, so the
// k-th session of each rank shares the prefix nansense/cxx/<k>/.
std::atomic<int> g_sessions{0};

constexpr std::chrono::milliseconds kLong = std::chrono::hours(24 * 7);

std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string to_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

c10::intrusive_ptr<c10d::Store> connect(const StoreAddress& at, const std::string& prefix,
                                        std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(at.port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(at.host, options);
  return c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string store_gone(const std::exception& e) {
  return std::string("the run's store stopped answering (") + e.what() +
         "); the rank that hosts it (rank 0, usually) probably died";
}

}  // namespace

std::chrono::milliseconds timeout_from_env() {
  const char* raw = std::getenv(kTimeoutEnv);
  if (!raw) return std::chrono::seconds(30);
  char* end = nullptr;
  const double value = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(value > 0)) {
    throw UsageError(std::string(kTimeoutEnv) + " must be a number of seconds > 0, got \"" + raw + "\"");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * 1000 + 0.5));
}

StoreAddress address_of(const c10::intrusive_ptr<c10d::Store>& store) {
  c10::intrusive_ptr<c10d::Store> s = store;
  while (auto* prefix = dynamic_cast<c10d::PrefixStore*>(s.get())) s = prefix->getUnderlyingStore();
  auto* tcp = dynamic_cast<c10d::TCPStore*>(s.get());
  if (!tcp) {
    throw UsageError(
        "StartOptions().distributed(store, ...): nansense coordinates the ranks over a c10d::TCPStore (or a "
        "c10d::PrefixStore over one), and this store is neither: make the run's store a TCPStore (rank 0 hosts it, "
        "every rank connects to MASTER_ADDR:MASTER_PORT)");
  }
  return {tcp->getHost(), tcp->getPort()};
}

Coordinator::Coordinator(const StoreAddress& store, int rank, int world, std::chrono::milliseconds timeout, Host host)
    : rank_(rank), world_(world), timeout_(timeout), host_(std::move(host)) {
  const std::string prefix = "nansense/cxx/" + std::to_string(g_sessions++) + "/";
  main_ = connect(store, prefix, kLong);
  // The heartbeat's operations never wait for a key: a bound keeps a store
  // that hangs from holding its thread (and close()) for long.
  side_ = connect(store, prefix, std::max<std::chrono::milliseconds>(timeout_ * 2, std::chrono::seconds(60)));
  handshake();
  heartbeat_ = std::thread([this] { beat(); });
}

Coordinator::~Coordinator() {
  if (!closed_) leave("rank " + rank_text() + "'s session ended without close()");
  close();
}

// ---- start

void Coordinator::handshake() {
  main_->set("start/" + rank_text(), to_bytes("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_; ++r) keys.push_back("start/" + std::to_string(r));
  try {
    main_->wait(keys, timeout_);
    return;
  } catch (const std::exception&) {
  }
  std::vector<int> missing, started;
  for (int r = 0; r < world_; ++r) (main_->check({"start/" + std::to_string(r)}) ? started : missing).push_back(r);
  if (missing.empty()) return;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", timeout_.count() / 1000.0);
  throw DistributedError("nansense::start() ran on rank(s) " + join_ranks(started) + " but not on rank(s) " +
                         join_ranks(missing) + " within " + seconds + " s (" + kTimeoutEnv +
                         "): call nansense::start() with StartOptions().distributed(store, rank, world_size) on "
                         "every rank of the run (enabled(false) on every rank turns it off)");
}

// ---- heartbeat and the watch on the peers

void Coordinator::beat() {
  const auto interval = std::min<std::chrono::milliseconds>(std::chrono::seconds(1), timeout_ / 10);
  std::vector<int> peers;
  if (leader()) {
    for (int r = 1; r < world_; ++r) peers.push_back(r);
  } else {
    peers.push_back(0);
  }
  using Clock = std::chrono::steady_clock;
  std::map<int, std::pair<int64_t, Clock::time_point>> last;
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    try {
      side_->add("hb/" + rank_text(), 1);
      // This rank's keys of boundaries every rank has passed.
      for (const int64_t n = n_.load(); deleted_ < n - 2; ++deleted_) {
        const std::string d = std::to_string(deleted_);
        side_->deleteKey(leader() ? "g/" + d : "q/" + rank_text() + "/" + d);
      }
      if (leader()) peek(n_.load());
      const auto now = Clock::now();
      for (int r : peers) {
        const std::string rs = std::to_string(r);
        if (side_->check({"x/" + rs})) {
          lose("rank " + rs + " of " + std::to_string(world_) + " left the run: " + to_text(side_->get("x/" + rs)));
          return;
        }
        const int64_t count = side_->add("hb/" + rs, 0);
        auto seen = last.find(r);
        if (seen == last.end() || seen->second.first != count) {
          last[r] = {count, now};
        } else if (now - seen->second.second > timeout_) {
          const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen->second.second);
          char text[160];
          std::snprintf(text, sizeof text, "no heartbeat for %.0f s (it died or hangs; %s=%g)", quiet.count() / 1000.0,
                        kTimeoutEnv, timeout_.count() / 1000.0);
          lose("rank " + rs + " of " + std::to_string(world_) + " stopped answering: " + text);
          return;
        }
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard stop(stop_mu_);
        if (stop_) return;
      }
      lose(store_gone(e));
      return;
    }
    lock.lock();
  }
}

void Coordinator::peek(int64_t n) {
  // A follower's news, read as soon as it reaches the boundary: rank 0 may
  // be paused in the batch before it (for its own trip, or a step), and the
  // UI names every rank that tripped, and adds the followers' statistics up
  // to the same batch, meanwhile.
  for (int r = 1; r < world_; ++r) {
    const std::string key = "q/" + std::to_string(r) + "/" + std::to_string(n);
    {
      std::lock_guard lock(trips_mu_);
      for (auto it = peeked_.begin(); it != peeked_.end();) it = it->first < n ? peeked_.erase(it) : std::next(it);
      if (peeked_.count({n, r})) continue;
    }
    if (!side_->check({key})) continue;
    const std::string value = to_text(side_->get(key));
    {
      std::lock_guard lock(trips_mu_);
      peeked_.insert({n, r});
    }
    if (value.empty() || value[0] != '{') continue;
    const json news = json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!news.is_object()) continue;
    add_news(r, news);
    if (news.contains("trip")) {
      std::map<int, json> tripped{{r, news["trip"]}};
      const json own = host_.standing_trip();
      if (!own.is_null() && own["position"] == news["trip"].value("position", "")) tripped[0] = own;
      record_trips(tripped);
    }
  }
}

void Coordinator::add_news(int rank, const json& news) {
  // Rank 0 (any thread): a follower's statistics and checkpoints.
  if (news.contains("stats") && news["stats"].is_string() && !news["stats"].get<std::string>().empty()) {
    try {
      host_.add_stats_shard(rank, world_, news["stats"].get<std::string>());
    } catch (const std::exception& e) {  // the run goes on; the Stats page shows rank 0's own then
      std::lock_guard lock(trips_mu_);
      if (shard_warned_.insert(rank).second) {
        std::cerr << "[nansense] the statistics of rank " << rank << " could not be added to rank 0's: " << e.what()
                  << "\n";
      }
    }
  }
  if (news.contains("checkpoints")) {
    const json& held = news["checkpoints"];
    host_.set_peer_checkpoints(rank, held.value("epochs", std::vector<int64_t>{}), held.value("where", ""));
  }
}

void Coordinator::record_trips(const std::map<int, json>& tripped) {
  std::lock_guard lock(trips_mu_);
  bool fresh = false;
  for (const auto& [r, trip] : tripped) fresh = trips_.emplace(r, trip).second || fresh;
  if (fresh) host_.note_rank_trips(trips_, tripped);
}

void Coordinator::lose(const std::string& why) {
  std::vector<std::string> awaiting;
  {
    std::lock_guard lock(lost_mu_);
    if (lost_) return;
    lost_ = why;
    awaiting = awaiting_;
  }
  // The UI shows it, and a pause in progress ends.
  if (leader()) host_.mark_lost(why);
  // End the training thread's wait in the store.
  for (const auto& key : awaiting) {
    try {
      side_->set(key, to_bytes("!" + why));
    } catch (const std::exception&) {
      break;  // the store is gone: the wait fails by itself
    }
  }
}

void Coordinator::raise_lost() {
  std::string why;
  {
    std::lock_guard lock(lost_mu_);
    why = lost_.value_or("a rank was lost");
  }
  // The peers still waiting stop too, with the reason.
  leave("rank " + rank_text() + " stopped: " + why);
  throw DistributedError("nansense (rank " + rank_text() + "): " + why);
}

// ---- waits

std::vector<Coordinator::Bytes> Coordinator::wait(const std::vector<std::string>& keys) {
  bool lost;
  {
    std::lock_guard lock(lost_mu_);
    lost = lost_.has_value();
    if (!lost) awaiting_ = keys;
  }
  if (lost) raise_lost();
  std::vector<Bytes> values;
  try {
    values = main_->multiGet(keys);
  } catch (const std::exception& e) {
    std::string why;
    {
      std::lock_guard lock(lost_mu_);
      awaiting_.clear();
      if (!lost_) lost_ = store_gone(e);
      why = *lost_;
    }
    if (leader()) host_.mark_lost(why);
    raise_lost();
  }
  {
    std::lock_guard lock(lost_mu_);
    awaiting_.clear();
  }
  for (const auto& v : values) {
    if (!v.empty() && v[0] == '!') raise_lost();
  }
  return values;
}

void Coordinator::set(const std::string& key, const std::string& value) {
  try {
    main_->set(key, to_bytes(value));
  } catch (const std::exception& e) {
    std::string why;
    {
      std::lock_guard lock(lost_mu_);
      if (!lost_) lost_ = store_gone(e);
      why = *lost_;
    }
    if (leader()) host_.mark_lost(why);
    raise_lost();
  }
}

// ---- the boundary

std::string Coordinator::news() {
  const json trip = host_.trip_news();
  return trip.is_null() ? "" : json{{"trip", trip}}.dump();
}

void Coordinator::boundary(std::optional<int64_t> jump, bool close) {
  if (closed_) return;
  if (rejoin_) {
    // The session pauses on a jump's target whatever its mode; a follower's
    // pauses are rank 0's, so it goes on detached.
    rejoin_ = false;
    host_.detach();
  }
  const int64_t n = n_++;
  if (leader()) {
    gather(n, close);
    if (jump || close) release(jump, close);
  } else {
    follow(n, close);
  }
}

void Coordinator::gather(int64_t n, bool close) {
  const std::string own = news();
  std::vector<std::string> keys;
  for (int r = 1; r < world_; ++r) keys.push_back("q/" + std::to_string(r) + "/" + std::to_string(n));
  const auto values = wait(keys);
  std::map<int, json> tripped;
  for (int r = 1; r < world_; ++r) {
    const std::string value = to_text(values[r - 1]);
    if (value.empty()) continue;
    const json news = json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!news.is_object()) continue;
    bool peeked;
    {
      std::lock_guard lock(trips_mu_);
      peeked = peeked_.count({n, r}) > 0;
    }
    if (!peeked) add_news(r, news);
    if (news.contains("trip")) tripped[r] = news["trip"];
    if (news.value("close", false) && !close) {
      const std::string why = "rank " + std::to_string(r) + " of " + std::to_string(world_) +
                              " closed its session while rank 0 was still in its loop: every rank must run the same "
                              "batches";
      {
        std::lock_guard lock(lost_mu_);
        lost_ = why;
      }
      host_.mark_lost(why);
      raise_lost();
    }
  }
  if (!own.empty()) tripped[0] = json::parse(own)["trip"];
  if (!tripped.empty()) {
    record_trips(tripped);
    const bool follower_tripped = tripped.rbegin()->first != 0;
    if (follower_tripped && !tripped.count(0) && host_.served()) {
      // A follower tripped (rank 0, which did not, has not paused for it):
      // every rank stands here, before the next batch, until the UI resumes
      // rank 0.
      host_.hold_at_boundary();
      bool lost;
      {
        std::lock_guard lock(lost_mu_);
        lost = lost_.has_value();
      }
      if (lost) raise_lost();
    }
  }
  pending_ = n;
}

void Coordinator::release(std::optional<int64_t> jump, bool close) {
  if (!leader() || !pending_) return;
  const int64_t n = *pending_;
  pending_.reset();
  std::string decision;
  if (jump) {
    decision = json{{"jump", *jump}}.dump();
  } else if (close) {
    decision = json{{"close", true}, {"by", 0}}.dump();
  } else {
    // The followers collect what rank 0 collects (as of this batch), so
    // that their shards add up to the global batch.
    json settings = host_.stats_settings();
    if (!stats_sent_ || settings != *stats_sent_) {
      decision = json{{"stats_settings", settings}}.dump();
      stats_sent_ = std::move(settings);
    }
  }
  set("g/" + std::to_string(n), decision);
  if (close) this->close();
}

void Coordinator::follow(int64_t n, bool close) {
  const std::string own = news();
  json news = own.empty() ? json::object() : json::parse(own);
  if (std::string shard = host_.take_stats_shard(); !shard.empty()) news["stats"] = std::move(shard);
  // The epochs this rank could be rewound to: rank 0 refuses a jump to any
  // other for every rank.
  const TimeTravelStatus tt = host_.time_travel_status();
  const std::string where = tt.cache_dir + (tt.available || tt.reason.empty() ? "" : " (" + tt.reason + ")");
  std::pair<std::vector<int64_t>, std::string> held{tt.cached_epochs, where};
  if (held != checkpoints_sent_ && (tt.available || !tt.cached_epochs.empty() || tt.total_epochs)) {
    checkpoints_sent_ = held;
    news["checkpoints"] = {{"epochs", held.first}, {"where", held.second}};
  }
  if (close) news["close"] = true;
  news["b"] = n;
  // One message a boundary: this follower's k-th message is boundary k's.
  set("q/" + rank_text() + "/" + std::to_string(n), news.dump());
  const std::string value = to_text(wait({"g/" + std::to_string(n)})[0]);
  if (close) {
    this->close();
    return;
  }
  if (value.empty()) return;
  const json decision = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!decision.is_object()) return;
  if (decision.value("close", false)) {
    const std::string why = "rank 0 closed its session while rank " + rank_text() +
                            " was still in its loop: every rank must run the same batches";
    leave(why);
    throw DistributedError("nansense (rank " + rank_text() + "): " + why);
  }
  if (decision.contains("stats_settings")) host_.apply_stats_settings(decision["stats_settings"]);
  if (decision.contains("jump")) {
    const int64_t jump = decision["jump"].get<int64_t>();
    // Armed here, the jump is raised by this rank's batch start.
    try {
      host_.request_time_travel(jump);
      rejoin_ = true;
    } catch (const std::exception& e) {
      const std::string why = "rank " + rank_text() + " cannot jump to epoch " + std::to_string(jump) + ": " + e.what();
      leave(why);
      throw DistributedError("nansense: " + why);
    }
  }
}

// ---- the end

void Coordinator::leave(const std::string& why) {
  if (left_ || !main_) return;
  left_ = true;
  try {
    main_->set("x/" + rank_text(), to_bytes(why));
  } catch (const std::exception&) {
    // The store is gone: the peers see that themselves.
  }
}

void Coordinator::abandon(const std::string& why) {
  if (closed_) return;
  leave(why);
  close();
}

void Coordinator::close() {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  // This rank's store connections end before the program's store does.
  main_.reset();
  side_.reset();
}

}  // namespace nansense::distributed
