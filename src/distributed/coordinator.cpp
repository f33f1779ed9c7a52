// The rank protocol of a distributed run (see coordinator.h and
// docs/guide/distributed.md, "The rank protocol").
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

const char* const kSkipRefused =
    "this is a distributed run and not every rank holds this batch's update before its optimizer step (a rank whose "
    "checks are off, or did not run on this batch, made its step with the averaged gradients), so skipping it on "
    "rank 0 alone would leave the model replicas different; apply it, and rewind with time travel (session.epochs) "
    "to undo it on every rank";

namespace {

// Per process: every rank starts its sessions in the same order, so the
// k-th session of each rank shares the prefix nansense/<k>/.
std::atomic<int> g_sessions{0};

constexpr std::chrono::milliseconds kLong = std::chrono::hours(24 * 7);

std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string to_text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", t.count() / 1000.0);
  return text;
}

std::string store_gone(const std::exception& e) {
  return std::string("the run's store stopped answering (") + e.what() +
         "); the rank that hosts it (rank 0, or torchrun's agent) probably died";
}

// What this rank prints of the run (a lost follower's statistics, a close
// without every rank): one line on stderr.
void say(const std::string& line) { std::cerr << "[nansense] " << line << std::endl; }

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

// Sets store keys in a thread of its own, in the order posted: the training
// thread hands a decision or a report over and goes on (a set waits for the
// store's server thread, which on busy cores waits for a core). A set that
// fails goes to `failed` (the store is gone: the coordinator ends this
// rank's waits with the reason).
class Coordinator::Sender {
 public:
  Sender(Store store, std::function<void(const std::string&, const std::exception&)> failed)
      : store_(std::move(store)), failed_(std::move(failed)), thread_([this] { run(); }) {}
  ~Sender() { close(); }

  void post(std::string key, std::string value) {
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back(std::move(key), std::move(value));
    }
    cv_.notify_one();
  }
  // Sends what was posted, then ends.
  void close() {
    {
      std::lock_guard lock(mu_);
      if (done_) return;
      done_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    store_.reset();
  }

 private:
  void run() {
    for (;;) {
      std::pair<std::string, std::string> item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return done_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        store_->set(item.first, to_bytes(item.second));
      } catch (const std::exception& e) {  // any error of the store's client: it is gone
        failed_("setting " + item.first, e);
      }
    }
  }

  Store store_;
  std::function<void(const std::string&, const std::exception&)> failed_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> queue_;
  bool done_ = false;
  std::thread thread_;
};

Coordinator::Coordinator(Options options, Host host)
    : rank_(options.rank),
      world_(options.world),
      timeout_(options.timeout),
      options_(std::move(options)),
      prefix_("nansense/" + std::to_string(options_.session >= 0 ? options_.session : g_sessions++) + "/"),
      host_(std::move(host)) {
  main_ = client();
  side_ = client();
  for (int r = 1; r < world_; ++r) seen_[r] = -1;
  handshake();
  sender_ = std::make_unique<Sender>(
      client(), [this](const std::string& what, const std::exception& e) { store_failed(what, e); });
  heartbeat_ = std::thread([this] { beat(); });
  if (leader()) {
    for (int r = 1; r < world_; ++r) feeds_.emplace_back([this, r, store = client()] { read_news(r, store); });
  } else {
    feeds_.emplace_back([this, store = client()] { fetch_decisions(store); });
  }
  if (leader() && options_.hold_before_step) host_.refuse_skip(kSkipRefused);
}

namespace {
// Joins a rank's own threads but the calling one, one caller at a time
// (close() on one of those threads and the destructor can both get here).
void join_threads(std::thread& heartbeat, std::vector<std::thread>& feeds) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  const auto current = std::this_thread::get_id();
  if (heartbeat.joinable() && heartbeat.get_id() != current) heartbeat.join();
  for (auto& feed : feeds) {
    if (feed.joinable() && feed.get_id() != current) feed.join();
  }
}
}  // namespace

Coordinator::~Coordinator() {
  if (!closed_) leave("rank " + rank_text() + "'s session ended without close()");
  close();
  // close() may have run first on the heartbeat or a feed thread, which
  // cannot join itself: that thread is joined here, or destroying it
  // joinable would end the process (std::terminate).
  join_threads(heartbeat_, feeds_);
}

Coordinator::Store Coordinator::client() const {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(options_.store.port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = kLong;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(options_.store.host, options);
  return c10::make_intrusive<c10d::PrefixStore>(prefix_, tcp);
}

Coordinator::Counts Coordinator::counts() const {
  std::lock_guard lock(mu_);
  return {n_.load(), waited_.load(), cleans_.load(), sent_clean_};
}

bool Coordinator::halted() const {
  std::lock_guard lock(mu_);
  return halt_at_ && *halt_at_ < n_.load();
}

// ---- start

void Coordinator::handshake() {
  main_->set("start/" + rank_text(), to_bytes("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_; ++r) keys.push_back("start/" + std::to_string(r));
  try {
    main_->wait(keys, timeout_);
    return;
  } catch (const std::exception&) {  // some rank did not start in time: named below
  }
  std::vector<int> missing, started;
  for (int r = 0; r < world_; ++r) (main_->check({"start/" + std::to_string(r)}) ? started : missing).push_back(r);
  if (missing.empty()) return;
  throw DistributedError(options_.start_call + " ran on rank(s) " + join_ranks(started) + " but not on rank(s) " +
                         join_ranks(missing) + " within " + seconds_text(timeout_) + " s (" + kTimeoutEnv +
                         "): " + options_.start_advice);
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
  int64_t deleted = 0;   // rank 0: boundaries whose decisions are removed
  int64_t reported = 0;  // a follower: the boundaries it said it met
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stopping_.load(); })) {
    lock.unlock();
    try {
      side_->add("hb/" + rank_text(), 1);
      if (leader()) {
        // Decisions every follower has passed.
        int64_t passed = INT64_MAX;
        for (int r : peers) passed = std::min(passed, side_->add("at/" + std::to_string(r), 0) - 1);
        for (; deleted < passed; ++deleted) side_->deleteKey("g/" + std::to_string(deleted));
      } else {
        // The boundaries this rank has met (rank 0 removes the decisions of those passed).
        const int64_t met = n_.load();
        side_->add("at/" + rank_text(), met - reported);
        reported = met;
      }
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
          std::snprintf(text, sizeof text, "no heartbeat for %.0f s (it died or hangs; %s=%s)", quiet.count() / 1000.0,
                        kTimeoutEnv, seconds_text(timeout_).c_str());
          lose("rank " + rs + " of " + std::to_string(world_) + " stopped answering: " + text);
          return;
        }
      }
    } catch (const std::exception& e) {  // the store itself is gone
      if (stopping_) return;
      lose(store_gone(e));
      return;
    }
    lock.lock();
  }
}

// ---- losing the run

void Coordinator::lose(const std::string& why) {
  std::vector<std::string> awaiting;
  {
    std::lock_guard lock(mu_);
    if (lost_) return;
    lost_ = why;
    for (const auto& [who, keys] : awaiting_) awaiting.insert(awaiting.end(), keys.begin(), keys.end());
  }
  cv_.notify_all();
  // The UI shows it, and a pause in progress ends.
  if (leader()) host_.mark_lost(why);
  // End the feed threads' waits in the store.
  for (const auto& key : awaiting) {
    try {
      side_->set(key, to_bytes("!" + why));
    } catch (const std::exception&) {
      break;  // the store is gone: the waits fail by themselves
    }
  }
}

void Coordinator::raise_lost() {
  std::string why;
  {
    std::lock_guard lock(mu_);
    why = lost_.value_or("a rank was lost");
  }
  // The peers still waiting stop too, with the reason.
  leave("rank " + rank_text() + " stopped: " + why);
  throw DistributedError("nansense (rank " + rank_text() + "): " + why);
}

void Coordinator::store_failed(const std::string& what, const std::exception& e) {
  // A store operation failed, so the store is gone: in the run, every wait
  // of this rank ends with the reason (rank 0's UI shows it); while
  // closing, it is said once (the peers' own waits name the loss).
  if (!stopping_) {
    lose(what + " failed: " + store_gone(e));
  } else if (!said_failed_.exchange(true)) {
    say("rank " + rank_text() + ", closing: " + what + " failed: " + store_gone(e) +
        "; the other ranks still in their loop stop at their next boundary, saying that this rank is lost");
  }
}

// ---- waits

std::optional<std::vector<Coordinator::Bytes>> Coordinator::feed_wait(const std::string& who, Store& store,
                                                                      const std::vector<std::string>& keys) {
  {
    std::lock_guard lock(mu_);
    if (lost_ || stopping_) return std::nullopt;
    awaiting_[who] = keys;
  }
  std::vector<Bytes> values;
  bool failed = false;
  try {
    values = store->multiGet(keys);
  } catch (const std::exception& e) {
    failed = true;
    if (!stopping_) lose(store_gone(e));
  }
  {
    std::lock_guard lock(mu_);
    awaiting_.erase(who);
  }
  if (failed) return std::nullopt;
  for (const auto& v : values) {
    if (!v.empty() && v[0] == '!') return std::nullopt;
  }
  return values;
}

bool Coordinator::await(const std::function<bool()>& ready, std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(kLong);
  {
    std::unique_lock lock(mu_);
    while (!ready() && !lost_) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !lost_) return false;
    }
    if (ready()) return true;
  }
  raise_lost();
}

// ---- the feed threads: each waits in the store for the next keys

void Coordinator::read_news(int r, Store store) {
  // Rank 0's reader of follower r: its news, message after message
  // (q/<r>/<k>; each names its boundary).
  const std::string who = "news-" + std::to_string(r);
  for (int64_t k = 0;; ++k) {
    const std::string key = "q/" + std::to_string(r) + "/" + std::to_string(k);
    const auto values = feed_wait(who, store, {key});
    if (!values) return;
    json news;
    int64_t n = 0;
    try {
      news = json::parse(to_text((*values)[0]));
      if (news.contains("clean")) {
        // Its batch before boundary `clean` checked clean (it has not
        // reached the boundary yet).
        std::optional<std::pair<int64_t, std::string>> ready;
        {
          std::lock_guard lock(mu_);
          clean_[news["clean"].get<int64_t>()].insert(r);
          ready = take_ready();
        }
        send(store, ready);
        store->deleteKey(key);
        continue;
      }
      if (news.contains("held")) {
        note_held(r, news["held"].get<int64_t>(), news.value("trip", json()), store);
        store->deleteKey(key);
        continue;
      }
      n = news.at("b").get<int64_t>();
      add_news(r, news);
    } catch (const std::exception& e) {  // the run goes on; this news is not taken
      if (stopping_) return;
      say("rank " + std::to_string(r) + "'s news " + std::to_string(k) + " could not be read: " + e.what());
      continue;
    }
    const json trip = news.value("trip", json());
    if (!trip.is_null()) record_trip(r, trip);
    {
      std::lock_guard lock(mu_);
      if (!trip.is_null()) {
        tripped_at_[n][r] = trip;
        if (n <= sent_) hold_wanted_ = true;  // rank 0 did not wait here: it holds at its next wait
      }
      if (news.value("close", false)) closed_at_[n].push_back(r);
      seen_[r] = n;
    }
    cv_.notify_all();
    try {
      store->deleteKey(key);
    } catch (const std::exception& e) {  // any error of the store's client: it is gone
      store_failed("removing " + key, e);
    }
  }
}

void Coordinator::fetch_decisions(Store store) {
  // A follower's fetcher: rank 0's decisions, boundary after boundary.
  for (int64_t n = 0;; ++n) {
    const auto values = feed_wait("decisions", store, {"g/" + std::to_string(n)});
    if (!values) return;
    const std::string value = to_text((*values)[0]);
    {
      std::lock_guard lock(mu_);
      decisions_[n] = value;
    }
    cv_.notify_all();
    const json decision = json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (decision.is_object() && decision.value("close", false)) return;
  }
}

// ---- rank 0's side

void Coordinator::record_trip(int r, const json& trip) {
  // Rank 0 (a reader): follower r's trip, named at once (rank 0 may be
  // paused in that batch for its own trip).
  std::map<int, json> tripped{{r, trip}};
  const json own = host_.standing_trip();
  if (!own.is_null() && own.value("position", "") == trip.value("position", "")) tripped[0] = own;
  record_trips(tripped);
}

void Coordinator::record_trips(const std::map<int, json>& tripped) {
  std::lock_guard lock(trips_mu_);
  bool fresh = false;
  for (const auto& [r, trip] : tripped) fresh = trips_.emplace(r, trip).second || fresh;
  if (fresh) host_.note_rank_trips(trips_, tripped);
}

void Coordinator::note_held(int r, int64_t n, const json& trip, Store& store) {
  // Rank 0 (a reader): follower r holds the update of the batch before
  // boundary n, before its optimizer step, until h/<n> says what to do.
  if (!trip.is_null()) record_trip(r, trip);
  bool due = false, skip = false;
  {
    std::lock_guard lock(mu_);
    auto& held = holding_[n];
    held.insert(r);
    if (!trip.is_null()) {
      tripped_at_[n][r] = trip;
      if (n <= sent_) hold_wanted_ = true;  // rank 0 did not wait here: it holds at its next wait
    }
    // Rank 0 decided its own update of that batch already (or went past
    // it: applied): the follower's goes the same way.
    const bool answered = answered_.count(n) > 0;
    due = !answered && (decided_.count(n) || n <= past_);
    skip = decided_.count(n) ? decided_[n] : false;
    // Every rank holds it: rank 0's pause there may skip it.
    if (!due && !answered && static_cast<int>(held.size()) == world_ - 1) host_.refuse_skip("");
  }
  if (due) answer(n, skip, store);
}

void Coordinator::answer(int64_t n, bool skip, Store& store) {
  // Rank 0: the followers holding the update of the batch before boundary
  // n apply (or skip) it.
  {
    std::lock_guard lock(mu_);
    if (!answered_.insert(n).second) return;
    holding_.erase(n);
    host_.refuse_skip(kSkipRefused);
  }
  try {
    store->set("h/" + std::to_string(n), to_bytes(skip ? "skip" : "apply"));
  } catch (const std::exception& e) {  // any error of the store's client: it is gone
    store_failed("answering the held updates of boundary " + std::to_string(n), e);
  }
}

void Coordinator::add_news(int r, const json& news) {
  // Rank 0 (a reader): a follower's statistics and checkpoints.
  if (news.contains("stats") && news["stats"].is_string() && !news["stats"].get<std::string>().empty()) {
    try {
      host_.add_stats_shard(r, world_, news["stats"].get<std::string>());
    } catch (const std::exception& e) {  // the run goes on; the Stats page shows rank 0's own then
      std::lock_guard lock(trips_mu_);
      if (shard_warned_.insert(r).second) {
        say("the statistics of rank " + std::to_string(r) + " could not be added to rank 0's: " + e.what());
      }
    }
  }
  if (news.contains("checkpoints")) {
    const json& held = news["checkpoints"];
    host_.set_peer_checkpoints(r, held.value("epochs", std::vector<int64_t>{}), held.value("where", ""));
  }
}

std::string Coordinator::decision(int64_t n) {
  json out = json::object();
  // The followers report clean batches while rank 0's checks can pause
  // one and its own check does not speak for theirs.
  const bool clean = options_.batch_ahead && host_.checks_can_pause() && !averaged_;
  const uint64_t version = host_.stats_settings_version();
  bool settings_changed = false;
  {
    std::lock_guard lock(mu_);
    if (halt_asked_ && !halt_at_) {
      halt_at_ = n;
      out["halt"] = true;
    }
    if (clean_sent_ != clean) {
      clean_sent_ = clean;
      out["report_clean"] = clean;
    }
    if (stats_version_ != version) {
      stats_version_ = version;
      settings_changed = true;
    }
  }
  if (settings_changed) {
    // The followers collect what rank 0 collects (as of this batch), so
    // that their shards add up to the global batch.
    json settings = host_.stats_settings();
    std::lock_guard lock(mu_);
    if (!stats_sent_ || settings != *stats_sent_) {
      stats_sent_ = settings;
      out["stats_settings"] = std::move(settings);
    }
  }
  return out.empty() ? std::string() : out.dump();
}

std::optional<std::pair<int64_t, std::string>> Coordinator::take_ready() {
  // Rank 0, under mu_: the prepared decision, to send now that rank 0's and
  // every follower's batch before its boundary checked clean (under DDP
  // rank 0's says so for all) and no follower's tripped (nullopt while one
  // has not, or once rank 0's training thread gathers that boundary
  // itself); marked sent.
  if (!ready_ || closed_ || lost_ || hold_wanted_) return std::nullopt;
  const int64_t n = ready_->first;
  const size_t need = averaged_ ? 0 : static_cast<size_t>(world_ - 1);
  const auto clean = clean_.find(n);
  if (n <= sent_ || gathering_ >= n || (clean == clean_.end() ? 0 : clean->second.size()) < need ||
      tripped_at_.count(n)) {
    return std::nullopt;
  }
  auto out = std::move(ready_);
  ready_.reset();
  sent_ = n;
  ++sent_clean_;
  return out;
}

void Coordinator::send(Store& store, const std::optional<std::pair<int64_t, std::string>>& ready) {
  if (!ready) return;
  try {
    store->set("g/" + std::to_string(ready->first), to_bytes(ready->second));
  } catch (const std::exception& e) {  // any error of the store's client: it is gone
    store_failed("sending the decision of boundary " + std::to_string(ready->first), e);
  }
}

std::string Coordinator::end_decision() const {
  // The decision that ends the followers' fetchers: this rank closed its
  // session (or left the run, and why).
  json end{{"close", true}, {"by", rank_}};
  std::lock_guard lock(mu_);
  if (left_) end["left"] = *left_;
  return end.dump();
}

void Coordinator::update_decided(bool skipped) {
  // Rank 0's update of this batch is decided, before its optimizer step:
  // where its pause there ended, or its checks of the averaged gradients
  // are over without one. The followers holding theirs do the same; one
  // whose word comes later is answered by its reader.
  const int64_t n = n_.load();
  bool due;
  {
    std::lock_guard lock(mu_);
    decided_[n] = skipped;
    decided_.erase(decided_.begin(), decided_.lower_bound(n - 1));
    due = holding_.count(n) && !answered_.count(n);
  }
  if (due && !closed_ && main_) answer(n, skipped, main_);
}

std::optional<bool> Coordinator::await_leader() {
  // A follower whose batch tripped, before its optimizer step: tells rank 0
  // and waits for its choice about the update.
  if (closed_ || !main_) return std::nullopt;
  const int64_t n = n_.load();
  json news{{"held", n}};
  const json trip = host_.standing_trip();
  if (!trip.is_null()) {
    news["trip"] = trip;
    host_.trip_news();  // told now: not again at the boundary
  }
  try {
    main_->set("q/" + rank_text() + "/" + std::to_string(posted_++), to_bytes(news.dump()));
  } catch (const std::exception& e) {
    lose(store_gone(e));
    return std::nullopt;
  }
  const auto values = feed_wait("held", main_, {"h/" + std::to_string(n)});
  if (!values) return std::nullopt;
  return to_text((*values)[0]) == "skip";
}

void Coordinator::settled() {
  // From the backward's final callback, with the training thread inside
  // backward(). What fails here turns the early word off, said once: the
  // ranks then meet at every boundary (the full exchange).
  if (settle_off_) return;
  try {
    if (!leader()) {
      if (report_clean_ && !closed_) {
        sender_->post("q/" + rank_text() + "/" + std::to_string(posted_++), json{{"clean", n_.load()}}.dump());
        ++cleans_;
      }
      return;
    }
    if (closed_ || !options_.batch_ahead) return;
    bool ahead;
    {
      // Sent already as the batch began (nothing could stop it).
      std::lock_guard lock(mu_);
      ahead = !hold_wanted_ && !lost_ && n_.load() > sent_;
    }
    if (!ahead || !host_.runs_through_next_boundary()) return;
    // Held while the followers may pass the next boundary: a jump armed
    // meanwhile is raised a batch later, where every rank waits.
    host_.hold_jumps(true);
    const int64_t n = n_.load();
    std::string prepared = decision(n);
    std::optional<std::pair<int64_t, std::string>> ready;
    {
      std::lock_guard lock(mu_);
      ready_ = std::make_pair(n, std::move(prepared));
      ready = take_ready();
    }
    if (ready) sender_->post("g/" + std::to_string(ready->first), ready->second);
  } catch (const std::exception& e) {  // the engine's or the coordinator's own fault: this part alone turns off
    settle_off_ = e.what();
    say("rank " + rank_text() + ": word of a batch checked clean failed (" + *settle_off_ +
        "); from here on the ranks meet at every boundary");
  }
}

// ---- the boundary

void Coordinator::boundary(std::optional<int64_t> jump, bool close, bool settled) {
  if (closed_) return;
  {
    std::unique_lock lock(mu_);
    if (lost_) {
      lock.unlock();
      raise_lost();
    }
  }
  if (rejoin_) {
    // The session pauses on a jump's target whatever its mode; a follower's
    // pauses are rank 0's, so it goes on detached.
    rejoin_ = false;
    host_.detach();
  }
  const int64_t n = n_++;
  if (!leader()) {
    follow(n, close, settled);
    return;
  }
  pass(n);
  gather(n, close, jump.has_value());
  if (jump || close) {
    release(jump, close);
  } else if (settled) {
    bool unsent;
    {
      std::lock_guard lock(mu_);
      unsent = n > sent_;
    }
    if (unsent) {
      // A jump asked for while rank 0 waited here (held for a follower's
      // trip) is carried out here, by every rank.
      try {
        host_.raise_armed_jump();
      } catch (const TimeTravelJump& jump_now) {
        release(jump_now.epoch());
        throw;
      }
    }
    release(std::nullopt, false, /*ahead=*/false);
  }
}

void Coordinator::pass(int64_t n) {
  // Rank 0 at boundary n: past the batches before it, whose updates it
  // applied unless its own pause said otherwise (update_decided), so the
  // followers still holding one do the same.
  std::vector<std::pair<int64_t, bool>> due;
  {
    std::lock_guard lock(mu_);
    past_ = n;
    for (const auto& [k, ranks] : holding_) {
      if (k <= n && !answered_.count(k)) due.emplace_back(k, decided_.count(k) ? decided_[k] : false);
    }
  }
  for (const auto& [k, skip] : due) answer(k, skip, main_);
}

void Coordinator::gather(int64_t n, bool close, bool jump) {
  if (!host_.trip_news().is_null()) {
    std::lock_guard lock(mu_);
    own_trip_at_.insert(n);
  }
  pending_ = n;
  bool let_past;
  {
    std::lock_guard lock(mu_);
    gathering_ = n;
    clean_.erase(clean_.begin(), clean_.upper_bound(n));
    let_past = n <= sent_;
  }
  if (let_past && !(close || jump)) return;  // let past a batch ahead: the readers take the news as it comes
  // Every rank waits here: a jump armed meanwhile is made here (a decision
  // prepared but never sent held it).
  host_.hold_jumps(false);
  auto everyone = [this, n] {
    return std::all_of(seen_.begin(), seen_.end(), [n](const auto& seen) { return seen.second >= n; });
  };
  bool timed_out = false;
  if (close && let_past) {
    // Let past this boundary, a follower still in its loop (a longer one
    // than rank 0's) would never say so here: rank 0 waits for the
    // followers' last news for as long as for a lost rank.
    timed_out = !await(everyone, timeout_);
  } else {
    await(everyone);
  }
  if (close) {
    // A follower whose word of this boundary came without its end runs on
    // (a longer loop than rank 0's).
    std::vector<int> silent, going;
    {
      std::lock_guard lock(mu_);
      const auto ended = closed_at_.count(n) ? closed_at_[n] : std::vector<int>{};
      for (const auto& [r, seen] : seen_) {
        if (seen < n) {
          silent.push_back(r);
        } else if (std::find(ended.begin(), ended.end(), r) == ended.end()) {
          going.push_back(r);
        }
      }
    }
    if (!silent.empty() || !going.empty()) {
      std::vector<int> all = silent;
      all.insert(all.end(), going.begin(), going.end());
      std::sort(all.begin(), all.end());
      std::string reasons;
      if (!silent.empty()) reasons = "no word within " + seconds_text(timeout_) + " s (" + kTimeoutEnv + ")";
      if (!going.empty()) {
        reasons += (reasons.empty() ? "" : "; ") + std::string("its loop went on past rank 0's last batch");
      }
      say("rank(s) " + join_ranks(all) + " did not reach the end of the loop with rank 0 (" + reasons +
          "): every rank must run the same batches; rank 0 closes without their last statistics");
    }
    if (timed_out) return;
  }
  std::vector<int> closed;
  std::map<int, json> tripped;
  bool hold, own;
  {
    std::lock_guard lock(mu_);
    if (auto it = closed_at_.find(n); it != closed_at_.end()) {
      closed = std::move(it->second);
      closed_at_.erase(it);
    }
    if (auto it = tripped_at_.find(n); it != tripped_at_.end()) {
      tripped = std::move(it->second);
      tripped_at_.erase(it);
    }
    hold = hold_wanted_;
    hold_wanted_ = false;
    own = own_trip_at_.count(n) > 0;
    tripped_at_.erase(tripped_at_.begin(), tripped_at_.lower_bound(n));
    own_trip_at_.erase(own_trip_at_.begin(), own_trip_at_.upper_bound(n));
  }
  if (!closed.empty() && !close) {
    const std::string why = "rank " + std::to_string(closed.front()) + " of " + std::to_string(world_) +
                            " closed its session while rank 0 was still in its loop: every rank must run the same "
                            "batches";
    {
      std::lock_guard lock(mu_);
      if (!lost_) lost_ = why;
    }
    host_.mark_lost(why);
    raise_lost();
  }
  if ((!tripped.empty() || hold) && !own && host_.served()) {
    // A follower tripped (rank 0, which did not, has not paused for it):
    // every rank stands here, before the next batch, until the UI resumes
    // rank 0.
    host_.hold_at_boundary();
    bool lost;
    {
      std::lock_guard lock(mu_);
      lost = lost_.has_value();
    }
    if (lost) raise_lost();
  }
}

void Coordinator::release(std::optional<int64_t> jump, bool close, bool ahead) {
  if (!leader() || !pending_) return;
  const int64_t n = *pending_;
  pending_.reset();
  if (jump || close) {
    host_.hold_jumps(false);
    {
      std::lock_guard lock(mu_);
      sent_ = n;
      if (ready_ && ready_->first == n) {
        // Prepared, never sent: what it told the followers is told again
        // with the next decision.
        ready_.reset();
        stats_version_.reset();
        stats_sent_.reset();
        clean_sent_.reset();
        if (halt_at_ == n) halt_at_.reset();
      }
    }
    const std::string value = jump ? json{{"jump", *jump}}.dump() : end_decision();
    try {
      main_->set("g/" + std::to_string(n), to_bytes(value));
    } catch (const std::exception& e) {
      lose(store_gone(e));
      raise_lost();
    }
    if (close) this->close();
    return;
  }
  bool send;
  std::optional<std::string> ready;
  {
    std::lock_guard lock(mu_);
    send = n > sent_;
    if (send) {
      sent_ = n;
      // Prepared when rank 0's batch checked clean (it may carry a halt).
      if (ready_ && ready_->first == n) ready = std::move(ready_->second);
      ready_.reset();
    }
  }
  if (send) sender_->post("g/" + std::to_string(n), ready ? *ready : decision(n));
  if (ahead) {
    release_ahead();
  } else {
    host_.hold_jumps(true);
  }
}

void Coordinator::release_ahead() {
  if (!leader() || closed_) return;
  bool ahead;
  {
    std::lock_guard lock(mu_);
    ahead = !hold_wanted_ && !lost_;
  }
  ahead = ahead && options_.batch_ahead && host_.runs_through_next_boundary();
  // Held while the followers may pass the next boundary: a jump armed
  // meanwhile is raised a batch later, where every rank waits.
  host_.hold_jumps(ahead);
  const int64_t following = n_.load();
  bool send;
  {
    std::lock_guard lock(mu_);
    send = ahead && following > sent_;
    if (send) sent_ = following;
  }
  if (send) sender_->post("g/" + std::to_string(following), decision(following));
}

// ---- a follower's side

void Coordinator::follow(int64_t n, bool close, bool settled) {
  json news = json::object();
  if (json trip = host_.trip_news(); !trip.is_null()) news["trip"] = std::move(trip);
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
  bool ahead;
  {
    // In hand already: rank 0 let this rank past a batch ahead, and does
    // not wait for its word here (only for news).
    std::lock_guard lock(mu_);
    ahead = decisions_.count(n) > 0;
  }
  if (!ahead) ++waited_;
  if (!news.empty() || !ahead) {
    news["b"] = n;
    try {
      main_->set("q/" + rank_text() + "/" + std::to_string(posted_++), to_bytes(news.dump()));
    } catch (const std::exception& e) {
      lose(store_gone(e));
      raise_lost();
    }
  }
  await([this, n] { return decisions_.count(n) > 0; });
  std::string value;
  {
    std::lock_guard lock(mu_);
    value = std::move(decisions_[n]);
    decisions_.erase(n);
  }
  if (close) {
    this->close();
    return;
  }
  if (value.empty()) return;
  const json decision = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!decision.is_object()) {
    say("rank " + rank_text() + ": rank 0's decision of boundary " + std::to_string(n) + " is not JSON: " + value);
    return;
  }
  if (decision.value("close", false)) {
    const int by = decision.value("by", 0);
    const std::string why = decision.contains("left")
                                ? "rank " + std::to_string(by) + " of " + std::to_string(world_) +
                                      " left the run: " + decision["left"].get<std::string>()
                                : "rank " + std::to_string(by) + " closed its session while rank " + rank_text() +
                                      " was still in its loop: every rank must run the same batches";
    leave(why);
    throw DistributedError("nansense (rank " + rank_text() + "): " + why);
  }
  if (decision.value("halt", false)) {
    std::lock_guard lock(mu_);
    halt_at_ = n;
  }
  if (decision.contains("report_clean")) report_clean_ = decision["report_clean"].get<bool>();
  // Collected from this batch on, as rank 0 collects (a failure is printed; training goes on).
  if (decision.contains("stats_settings")) host_.apply_stats_settings(decision["stats_settings"]);
  if (decision.contains("jump")) {
    const int64_t jump = decision["jump"].get<int64_t>();
    // Armed here, the jump is raised by this rank's next batch start.
    try {
      host_.request_time_travel(jump);
      rejoin_ = true;
    } catch (const std::exception& e) {
      const std::string why = "rank " + rank_text() + " cannot jump to epoch " + std::to_string(jump) + ": " + e.what();
      leave(why);
      throw DistributedError("nansense: " + why);
    }
    if (settled) host_.raise_armed_jump();
  }
}

// ---- the end

void Coordinator::leave(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    left_ = why;
  }
  if (!main_) return;
  try {
    main_->set("x/" + rank_text(), to_bytes(why));
  } catch (const std::exception& e) {  // any error of the store's client: it is gone
    store_failed("saying that rank " + rank_text() + " left", e);
  }
}

void Coordinator::abandon(const std::string& why) {
  if (closed_) return;
  leave(why);
  close();
}

void Coordinator::close() {
  if (closed_.exchange(true)) return;
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  std::vector<std::string> awaiting;
  if (leader() && main_) {
    // The followers' fetchers wait for the decision after the last one
    // sent: the end. (A follower still in its loop reads it at its next
    // boundary.) Reserved first: no prepared decision goes out under the
    // same key.
    int64_t end_at;
    std::vector<std::pair<int64_t, bool>> due;
    {
      std::lock_guard lock(mu_);
      ready_.reset();
      end_at = ++sent_;
      past_ = std::max(past_, end_at);
      for (const auto& [k, ranks] : holding_) {
        if (!answered_.count(k)) due.emplace_back(k, decided_.count(k) ? decided_[k] : false);
      }
    }
    for (const auto& [k, skip] : due) answer(k, skip, main_);
    try {
      main_->set("g/" + std::to_string(end_at), to_bytes(end_decision()));
    } catch (const std::exception& e) {  // any error of the store's client: it is gone
      store_failed("telling the followers that rank 0 closed", e);
    }
  } else if (main_) {
    // The fetcher waits for the decision after this boundary: unless rank
    // 0 sent it, this rank's end is that decision (a rank still in its loop
    // reads there that this one left).
    try {
      main_->compareSet("g/" + std::to_string(n_.load()), {}, to_bytes(end_decision()));
    } catch (const std::exception& e) {  // any error of the store's client: it is gone
      store_failed("saying that rank " + rank_text() + " closed", e);
    }
  }
  // The feed threads' waits end: a reader's for news that will not come, a
  // fetcher's for a decision past the one it holds (rank 0 may still send
  // it: the key is set only where it is not).
  {
    std::lock_guard lock(mu_);
    for (const auto& [who, keys] : awaiting_) awaiting.insert(awaiting.end(), keys.begin(), keys.end());
  }
  if (main_) {
    try {
      for (const auto& key : awaiting) main_->compareSet(key, {}, to_bytes("!closed"));
    } catch (const std::exception& e) {  // any error of the store's client: it is gone
      store_failed("ending this rank's waits", e);
    }
  }
  if (sender_) sender_->close();  // what it holds goes out before the store connections end
  join_threads(heartbeat_, feeds_);
  // This rank's store connections end before the run's store does (a
  // TCPStore server torn down under live clients aborts the process).
  main_.reset();
  side_.reset();
}

}  // namespace nansense::distributed
