// A session's side of a distributed run (StartOptions::distributed): joining
// it, the per-rank settings, and what the boundary exchange
// (distributed/coordinator.h) asks of the session.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "nansense/errors.h"
#include "nansense/session.h"
#include "session/session_core.h"
#if NANSENSE_DISTRIBUTED
#include "distributed/coordinator.h"
#include "distributed/run.h"
#endif

namespace nansense {

StartOptions& StartOptions::distributed(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size) {
#if NANSENSE_DISTRIBUTED
  auto run = std::make_shared<detail::DistributedRun>();
  run->store = store;
  run->rank = rank;
  run->world_size = world_size;
  distributed_ = std::move(run);
  return *this;
#else
  throw UsageError(
      "StartOptions().distributed(): this nansense was built against a torch without c10d (torch.distributed, "
      "USE_DISTRIBUTED), so it cannot coordinate ranks; build it against a torch that has it (PyTorch's pip wheel "
      "does)");
#endif
}

namespace detail {

namespace {

// How note_rank_trip marks the ranks' trips in a root cause.
const std::string kPeerMark = "[distributed] ";

// Where rank `rank` keeps what is its own: <path>/rank_<r>, or path itself
// when it already ends so.
std::string rank_dir(const std::string& path, int rank) {
  const std::string tail = "rank_" + std::to_string(rank);
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (p.filename() == tail) return path;
  return (std::filesystem::path(path) / tail).string();
}

}  // namespace

DebugSettings SessionCore::settings_for_rank(DebugSettings settings) const {
  if (!rank_) return settings;
  if (!settings.capsule_dir().empty()) settings.capsule_dir(rank_dir(settings.capsule_dir(), *rank_));
  settings.rerun_to_trace(false);
  return settings;
}

void SessionCore::set_rank(int rank) {
  if (rank < 0) throw UsageError("a rank is >= 0, got " + std::to_string(rank));
  rank_ = rank;
  debug().set_settings(settings_for_rank(debug().settings()));
  debug().refuse_skip(
      "this is a distributed run: every rank steps with the same averaged gradients, and the other ranks make "
      "this batch's optimizer step with them, so skipping it on rank " +
      std::to_string(rank) +
      " alone would leave the model replicas different; apply it, and rewind with time travel "
      "(session.epochs) to undo it on every rank");
}

EpochOptions SessionCore::options_for_rank(EpochOptions options) const {
  if (rank_) options.cache_dir(rank_dir(options.cache_dir(), *rank_));
  return options;
}

void SessionCore::hold_at_boundary() {
  if (auto pos = live_position()) {
    control_.pause();
    control_.pause_at(schedule_.with_flags(*pos));
  }
}

void SessionCore::note_rank_trip(const std::string& note, const std::vector<std::string>& reasons,
                                 const std::vector<std::string>& checks, const std::string& capsule,
                                 const std::optional<BatchPosition>& at) {
  auto edit = [&](DebugError& e) {
    if (!e.root_cause) e.root_cause = RootCause{};
    auto& summary = e.root_cause->summary;
    if (const auto at = summary.find(kPeerMark); at != std::string::npos) summary.erase(at);
    while (!summary.empty() && summary.back() == ' ') summary.pop_back();
    summary += (summary.empty() ? "" : " ") + kPeerMark + note;
  };
  if (debug().error()) {
    debug().amend([&](DebugError& e) {
      edit(e);
      // Rank 0's own batch replays finite (the NaN reached it through the
      // averaging): the capsule that replays this NaN is the peer's.
      if (e.capsule.empty()) e.capsule = capsule;
    });
    return;
  }
  DebugError e;
  if (at) {
    e.position = schedule_.with_flags(*at);
  } else if (auto pos = live_position()) {
    e.position = schedule_.with_flags(*pos);
  }
  e.reasons = reasons;
  e.checks_used = checks;
  e.capsule = capsule;
  edit(e);
  numerics_->peer_noted();  // before it stands: the training thread reads both
  debug().record(e);
}

nlohmann::json SessionCore::standing_trip() const {
  const auto e = debug().error();
  if (!e) return nullptr;
  if (rank_ == 0 && e->root_cause && e->root_cause->summary.rfind(kPeerMark, 0) == 0) return nullptr;
  return {{"position", e->position.to_string()},
          {"at", {e->position.phase, e->position.epoch, e->position.batch_idx}},
          {"reasons", e->reasons},
          {"checks_used", e->checks_used},
          {"capsule", e->capsule},
          {"own", !standing_found_in_average()}};
}

nlohmann::json SessionCore::trip_news() {
  auto trip = standing_trip();
  if (trip.is_null()) {
    trip_told_.reset();
    return nullptr;
  }
  std::string key = trip["capsule"].get<std::string>() + "|" + trip["position"].get<std::string>() + "|";
  for (const auto& reason : trip["reasons"]) key += reason.get<std::string>() + ",";
  if (key == trip_told_) return nullptr;
  trip_told_ = std::move(key);
  return trip;
}

void SessionCore::note_rank_trips(const std::map<int, nlohmann::json>& trips,
                                  const std::map<int, nlohmann::json>& fresh, int world) {
  if (fresh.empty()) return;
  auto own_values = [](const nlohmann::json& trip) { return trip.value("own", true); };
  auto listed = [](const std::vector<int>& ranks) {
    std::string out = ranks.size() > 1 ? "ranks " : "rank ";
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
    return out;
  };
  std::vector<int> own, averaged;
  std::string parts;
  for (const auto& [r, trip] : trips) {
    if (!own_values(trip)) {
      averaged.push_back(r);
      continue;
    }
    own.push_back(r);
    const auto at = trip.find("position");
    const std::string position = at != trip.end() && at->is_string() ? at->get<std::string>() : std::string();
    const auto held = trip.find("capsule");
    const std::string capsule = held != trip.end() && held->is_string() ? held->get<std::string>() : std::string();
    parts += (parts.empty() ? "" : "; ") + ("rank " + std::to_string(r)) + (position.empty() ? "" : " at " + position) +
             (capsule.empty() ? "" : " (capsule " + capsule + ")");
  }
  const std::string of = " of " + std::to_string(world);
  std::string note;
  if (!own.empty()) {
    note = "The checks tripped on " + listed(own) + of + ": " + parts + ".";
    if (!averaged.empty()) {
      note += " The own gradients of " + listed(averaged) +
              " were finite: the non-finite values reached them through the gradient averaging.";
    }
  } else {
    note = "The averaged gradients went non-finite on " + listed(averaged) + of +
           ", whose own were finite: the rank where the NaN arose has its checks off or did not check that batch.";
  }
  note += attachment_ ? " Every rank stops at that batch: before its optimizer step where its checks saw the averaged "
                        "gradients, else at the batch's boundary"
                      : " No UI is served, so no rank pauses";
  note += "; a tripped rank's capsule replays that rank's batch.";
  const nlohmann::json* first = &fresh.begin()->second;
  for (const auto& [r, trip] : fresh) {
    if (own_values(trip)) {
      first = &trip;
      break;
    }
  }
  auto strings_or = [&](const char* key, std::vector<std::string> fallback) {
    const auto it = first->find(key);
    if (it == first->end() || !it->is_array() || it->empty()) return fallback;
    return it->get<std::vector<std::string>>();
  };
  std::optional<BatchPosition> at;
  if (const auto it = first->find("at"); it != first->end() && it->is_array() && it->size() == 3) {
    at = BatchPosition{
        .phase = (*it)[0].get<std::string>(), .epoch = (*it)[1].get<int64_t>(), .batch_idx = (*it)[2].get<int64_t>()};
  }
  const auto capsule = first->find("capsule");
  note_rank_trip(note, strings_or("reasons", {"nan"}), strings_or("checks_used", {"nan_inf"}),
                 capsule != first->end() && capsule->is_string() ? capsule->get<std::string>() : std::string(), at);
}

nlohmann::json SessionCore::stats_settings_for_followers() const {
  const auto p = stats_->performance();
  return nlohmann::json{{"scope", std::string(to_string(stats_->scope()))},
                        {"watched", stats_->watched()},
                        {"performance",
                         {{"channel_limit_enabled", p.channel_limit_enabled()},
                          {"channel_limit", p.channel_limit()},
                          {"histogram_sample", p.histogram_sample()}}}};
}

void SessionCore::apply_stats_settings(const nlohmann::json& settings) {
  try {
    const std::string scope = settings.at("scope").get<std::string>();
    stats_->set_scope(scope == "all" ? StatsScope::kAll : scope == "none" ? StatsScope::kNone : StatsScope::kWatched);
    const auto want = settings.at("watched").get<std::vector<std::string>>();
    const auto have = stats_->watched();
    std::vector<std::string> gone, added;
    for (const auto& name : have) {
      if (std::find(want.begin(), want.end(), name) == want.end()) gone.push_back(name);
    }
    for (const auto& name : want) {
      if (std::find(have.begin(), have.end(), name) == have.end()) added.push_back(name);
    }
    if (!gone.empty()) stats_->unwatch(gone, architecture_.load().get());
    if (!added.empty()) stats_->watch(added, architecture_.load().get());
    const auto& p = settings.at("performance");
    auto performance = stats_->performance();
    performance.channel_limit_enabled(p.at("channel_limit_enabled").get<bool>())
        .channel_limit(p.at("channel_limit").get<int64_t>())
        .histogram_sample(p.at("histogram_sample").get<int64_t>())
        .samples_per_channel(0)
        .average_patches(false);
    stats_->set_performance(performance);
  } catch (const std::exception& e) {  // training goes on; rank 0's statistics then lack this rank's shard
    std::cerr << "[nansense] rank " << rank_.value_or(0)
              << " could not apply rank 0's statistics settings: " << e.what() << "\n";
  }
}

#if NANSENSE_DISTRIBUTED

void SessionCore::join_run(const DistributedRun& run) {
  const std::string call =
      "StartOptions().distributed(store, " + std::to_string(run.rank) + ", " + std::to_string(run.world_size) + ")";
  if (!run.store) throw UsageError(call + ": the store is null: pass the run's c10d::TCPStore");
  if (run.world_size < 1) {
    throw UsageError(call + ": world_size is the number of ranks (processes) of the run, >= 1");
  }
  if (run.rank < 0 || run.rank >= run.world_size) {
    throw UsageError(call + ": rank must be in [0, world_size), i.e. 0.." + std::to_string(run.world_size - 1));
  }
  if (run.world_size == 1) return;  // a run of one: a plain session
  const auto address = distributed::address_of(run.store);
  start_coordinator(address.host, address.port, run.rank, run.world_size, /*python=*/false);
}

void SessionCore::join_python_run(const std::string& host, int port, int rank, int world) {
  if (world < 2 || rank < 0 || rank >= world) {
    throw UsageError("join_python_run: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                     " is no rank of a run of 2+ ranks");
  }
  start_coordinator(host, port, rank, world, /*python=*/true);
}

void SessionCore::start_coordinator(const std::string& host_name, int port, int rank, int world, bool python) {
  if (coordinator_) throw UsageError("this session joined a distributed run already");
  distributed::Coordinator::Options options;
  options.store = {host_name, port};
  options.rank = rank;
  options.world = world;
  options.timeout = distributed::timeout_from_env();
  // A Python run averages the gradients inside backward (DDP): every rank
  // checks them once averaged too and holds a tripped batch's update before
  // its optimizer step. A C++ program averages them after backward.
  options.hold_before_step = python;
  // The batch ahead for Python runs, whose collectives are DDP's inside
  // backward; a C++ program's own collective after backward would hold a
  // follower let into the next batch while rank 0 pauses after this one.
  options.batch_ahead = python;
  options.start_call = python ? "nansense.start()" : "nansense::start()";
  options.start_advice = python ? "call nansense.start() on every rank of the process group (enabled=False on every "
                                  "rank turns it off)"
                                : "call nansense::start() with StartOptions().distributed(store, rank, world_size) on "
                                  "every rank of the run (enabled(false) on every rank turns it off)";
  set_rank(rank);
  if (rank != 0) {
    // Followers never pause on their own: rank 0 decides at every boundary.
    control_.detach();
    if (python) {
      set_unserved_nan_note("rank " + std::to_string(rank) +
                            " follows rank 0, which stops every rank in this batch: before its optimizer step where "
                            "the averaged gradients are checked, else at its boundary");
    } else {
      unserved_reason_ = "rank " + std::to_string(rank) + " follows rank 0, which serves the UI for every rank";
      set_unserved_nan_note("rank " + std::to_string(rank) +
                            " follows rank 0, which pauses every rank at this batch's boundary");
    }
  }
  distributed::Coordinator::Host host;
  host.standing_trip = [this] { return standing_trip(); };
  host.trip_news = [this] { return trip_news(); };
  host.mark_lost = [this](const std::string& why) { mark_lost(why); };
  host.hold_at_boundary = [this] { hold_at_boundary(); };
  host.note_rank_trips = [this, world](const std::map<int, nlohmann::json>& trips,
                                       const std::map<int, nlohmann::json>& fresh) {
    note_rank_trips(trips, fresh, world);
  };
  host.take_stats_shard = [this] { return stats_->take_shard(); };
  host.add_stats_shard = [this](int r, int64_t ranks, const std::string& shard) { stats_->add_shard(r, ranks, shard); };
  host.set_peer_checkpoints = [this](int r, std::vector<int64_t> epochs, std::string where) {
    set_peer_checkpoints(r, std::move(epochs), std::move(where));
  };
  host.time_travel_status = [this] { return restorer_->status(); };
  host.request_time_travel = [this](int64_t epoch) { request_time_travel(epoch); };
  host.raise_armed_jump = [this] { raise_armed_jump(); };
  host.detach = [this] { control_.detach(); };
  host.served = [this] { return attachment_ != nullptr; };
  host.runs_through_next_boundary = [this] { return runs_through_next_boundary(); };
  host.hold_jumps = [this](bool held) { hold_jumps(held); };
  host.checks_can_pause = [this] { return checks_can_pause(); };
  host.refuse_skip = [this](const std::string& why) { debug().refuse_skip(why); };
  host.stats_settings_version = [this] { return static_cast<uint64_t>(stats_->settings_version()); };
  host.stats_settings = [this] { return stats_settings_for_followers(); };
  host.apply_stats_settings = [this](const nlohmann::json& settings) { apply_stats_settings(settings); };
  auto coordinator = std::make_shared<distributed::Coordinator>(std::move(options), std::move(host));
  // The engine's callbacks from the backward's final callback; never throw.
  auto* c = coordinator.get();
  set_on_settled([c] { c->settled(); });
  if (python) {
    check_after_reduction(true);
    if (rank == 0) {
      set_on_update_decided([c](bool skipped) { c->update_decided(skipped); });
    } else {
      set_on_await_leader([c] { return c->await_leader(); });
    }
  }
  coordinator_ = std::move(coordinator);
}

bool SessionCore::begin_batch(const std::string& phase, std::optional<int64_t> epoch, bool settled) {
  if (closed_) throw UsageError("batches() was used after session.close()");
  if (!coordinator_) return open_batch(phase, epoch);
  if (settled) {
    // The ranks met when the last batch ended (meet_after_batch).
    bool capture;
    try {
      capture = open_batch(phase, epoch);
    } catch (const std::exception& e) {
      coordinator_->abandon(std::string("its batch could not begin: ") + e.what());
      throw;
    }
    coordinator_->release_ahead();
    return capture;
  }
  // Every rank meets here before the batch: rank 0's decision (go on, a
  // pause held, a jump) applies to all. Rank 0 sends it once its own batch
  // has begun (or raised a jump requested meanwhile).
  coordinator_->boundary();
  bool capture;
  try {
    capture = open_batch(phase, epoch);
  } catch (const TimeTravelJump& jump) {
    coordinator_->release(jump.epoch());
    throw;
  } catch (const std::exception& e) {
    coordinator_->abandon(std::string("its batch could not begin: ") + e.what());
    throw;
  }
  coordinator_->release();
  return capture;
}

void SessionCore::meet_after_batch() {
  if (coordinator_) coordinator_->boundary(std::nullopt, false, /*settled=*/true);
}

void SessionCore::request_halt() {
  if (coordinator_) coordinator_->request_halt();
}

bool SessionCore::halted() const { return coordinator_ && coordinator_->halted(); }

void SessionCore::set_gradients_averaged(bool averaged) {
  if (coordinator_) coordinator_->set_averaged(averaged);
}

std::array<int64_t, 4> SessionCore::run_counts() const {
  if (!coordinator_) return {0, 0, 0, 0};
  const auto c = coordinator_->counts();
  return {c.boundaries, c.waited, c.cleans, c.sent_clean};
}

bool SessionCore::end_batch(bool can_repeat) {
  if (!coordinator_) return finish_batch(can_repeat);
  try {
    return finish_batch(can_repeat);
  } catch (const TimeTravelJump& jump) {
    // Rank 0's jump, requested in its pause: every rank makes it.
    coordinator_->boundary(jump.epoch());
    throw;
  }
}

void SessionCore::leave_run(const std::string& why) {
  if (coordinator_) coordinator_->abandon(why);
}

void SessionCore::close_run() {
  // The ranks finish together (rank 0 may still be paused on the last batch).
  if (coordinator_ && !closed_) coordinator_->boundary(std::nullopt, /*close=*/true);
}

void SessionCore::end_run() {
  // The callbacks go first: they call into the coordinator.
  set_on_settled(nullptr);
  set_on_await_leader(nullptr);
  set_on_update_decided(nullptr);
  coordinator_.reset();
}

#else

void SessionCore::join_run(const DistributedRun&) {
  throw UsageError("StartOptions().distributed(): this nansense was built without c10d");
}
void SessionCore::join_python_run(const std::string&, int, int, int) {
  throw UsageError(
      "nansense.start() in a torch.distributed process group: this nansense was built without c10d, so it cannot "
      "coordinate ranks");
}
void SessionCore::start_coordinator(const std::string&, int, int, int, bool) {}
void SessionCore::meet_after_batch() {}
void SessionCore::request_halt() {}
bool SessionCore::halted() const { return false; }
void SessionCore::set_gradients_averaged(bool) {}
std::array<int64_t, 4> SessionCore::run_counts() const { return {0, 0, 0, 0}; }
bool SessionCore::begin_batch(const std::string& phase, std::optional<int64_t> epoch, bool) {
  if (closed_) throw UsageError("batches() was used after session.close()");
  return open_batch(phase, epoch);
}
bool SessionCore::end_batch(bool can_repeat) { return finish_batch(can_repeat); }
void SessionCore::leave_run(const std::string&) {}
void SessionCore::close_run() {}
void SessionCore::end_run() {}

#endif

}  // namespace detail

}  // namespace nansense
