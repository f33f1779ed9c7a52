#include "time_travel/restorer.h"

#include <iostream>

#include "nansense/errors.h"
#include "state/fingerprint.h"
#include "state/training_state.h"

namespace nansense::time_travel {

namespace {

constexpr const char* kNoLoop =
    "time travel needs the epoch loop session.epochs(n, body), which checkpoints every epoch start; this run does "
    "not use it";
constexpr const char* kLoopEnded = "the epoch loop has ended: time travel works while session.epochs() runs";

// "0–2, 5, 7–9"
std::string ranges(const std::vector<int64_t>& epochs) {
  std::string out;
  for (size_t i = 0; i < epochs.size();) {
    size_t j = i;
    while (j + 1 < epochs.size() && epochs[j + 1] == epochs[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(epochs[i]);
    if (j > i) out += (j == i + 1 ? ", " : "–") + std::to_string(epochs[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

// Why a checkpoint's description does not fit the live fingerprint; empty
// when it does.
std::string mismatch(const nlohmann::json& meta, const nlohmann::json& live) {
  return state::first_mismatch(meta.value("fingerprint", nlohmann::json()), live, "the cache");
}

}  // namespace

TrainingRestorer::TrainingRestorer(torch::nn::Module& model, std::vector<torch::optim::Optimizer*> optimizers,
                                   torch::optim::LRScheduler* scheduler, Host host)
    : model_(model),
      optimizers_(std::move(optimizers)),
      default_adapter_(scheduler ? adapt_scheduler(*scheduler) : nullptr),
      adapter_(default_adapter_),
      host_(std::move(host)) {}

TrainingRestorer::~TrainingRestorer() {
  // Before any member goes: a failing background commit reports here.
  if (store_) store_->wait_idle();
}

state::LiveState TrainingRestorer::live() const { return {&model_, optimizers_, scheduler()}; }

void TrainingRestorer::set_default_adapter(std::shared_ptr<SchedulerAdapter> adapter) {
  std::lock_guard lock(mu_);
  if (active_) throw UsageError("the state adapter cannot change while an epochs() loop runs");
  default_adapter_ = std::move(adapter);
  adapter_ = default_adapter_;
}

int64_t TrainingRestorer::open(int64_t epochs, const EpochOptions& options) {
  const int64_t start = options.start_epoch();
  if (start < 0 || start >= epochs) {
    throw TimeTravelError("start_epoch " + std::to_string(start) + " is out of range: the loop has " +
                          std::to_string(epochs) + " epochs (0.." + std::to_string(epochs - 1) + ")");
  }
  if (options.cache_budget_bytes() && *options.cache_budget_bytes() == 0) {
    throw TimeTravelError("cache_budget_bytes must be positive (nullopt means no limit)");
  }
  adapter_ = options.scheduler() ? options.scheduler() : default_adapter_;
  nlohmann::json live_fingerprint = state::fingerprint(live());

  std::shared_ptr<CheckpointStore> store;
  std::string unavailable;
  std::vector<std::string> problems;
  try {
    store = std::make_shared<CheckpointStore>(options.cache_dir(), options.cache_budget_bytes());
    store->set_problem_handler([this](const std::string& problem) {
      report(problem);
      host_.changed();
    });
    problems = store->adopt(epochs, [&](int64_t epoch, const nlohmann::json& meta) -> std::string {
      auto why = mismatch(meta, live_fingerprint);
      return why.empty() ? std::string() : "epoch_" + std::to_string(epoch) + ".ckpt is ignored: " + why;
    });
  } catch (const state::StateError& e) {
    if (start > 0) throw TimeTravelError("cannot resume at epoch " + std::to_string(start) + ": " + e.what());
    unavailable = std::string("time travel is off: ") + e.what() + " (training goes on without checkpoints)";
  }
  std::shared_ptr<CheckpointStore> previous;  // a former loop's: let go outside the lock
  {
    std::lock_guard lock(mu_);
    previous = std::move(store_);
    active_ = true;
    ended_ = false;
    unavailable_ = unavailable;
    epochs_ = epochs;
    current_ = start;
    cache_dir_ = store ? store->folder().string() : options.cache_dir();
    budget_ = options.cache_budget_bytes();
    fingerprint_ = std::move(live_fingerprint);
    store_ = store;
    pending_.reset();
    in_flight_.reset();
    restored_epoch_.reset();
    last_error_.clear();
    update_armed_locked();
  }
  if (!unavailable.empty()) report(unavailable);
  if (!problems.empty()) {
    report(problems.front() + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : ""));
  }
  if (start > 0) {
    try {
      if (!store->has(start)) {
        throw TimeTravelError("cannot resume at epoch " + std::to_string(start) + ": " + store->folder().string() +
                              " has no usable checkpoint of it (cached epochs: " + ranges(store->epochs()) + ")" +
                              (problems.empty() ? "" : "; " + problems.front()));
      }
      restore_file(*load_validated(start), start);
    } catch (...) {
      close();
      throw;
    }
  }
  host_.changed();
  return start;
}

std::shared_ptr<const state::StateFile> TrainingRestorer::load_validated(int64_t epoch) {
  std::shared_ptr<CheckpointStore> store;
  nlohmann::json expected;
  {
    std::lock_guard lock(mu_);
    store = store_;
    expected = fingerprint_;
  }
  const std::string which = "the checkpoint of epoch " + std::to_string(epoch);
  if (!store) throw TimeTravelError(which + " cannot be read: no cache folder is open");
  state::StateFile file;
  try {
    file = store->read(epoch);
  } catch (const state::StateError& e) {
    report(e.what());
    host_.changed();
    throw TimeTravelError(which + " cannot be used: " + e.what() + "; it is no longer offered");
  }
  if (auto why = mismatch(file.meta, expected); !why.empty()) {
    throw TimeTravelError(which + " was written for a different setup: " + why);
  }
  return std::make_shared<const state::StateFile>(std::move(file));
}

void TrainingRestorer::restore_file(const state::StateFile& file, int64_t epoch) {
  try {
    state::restore_state(file, live());
  } catch (const std::exception& e) {
    throw TimeTravelError("restoring epoch " + std::to_string(epoch) + " failed: " + e.what());
  }
  std::lock_guard lock(mu_);
  current_ = epoch;
  restored_epoch_ = epoch;
}

void TrainingRestorer::save_epoch_start(int64_t epoch) {
  std::shared_ptr<CheckpointStore> store;
  {
    std::lock_guard lock(mu_);
    current_ = epoch;
    // Just restored from this very file: the state on disk is the state now.
    if (std::exchange(restored_epoch_, std::nullopt) == epoch) return;
    store = store_;
    if (!store || !unavailable_.empty()) return;
  }
  const bool had_file = store->has(epoch);
  try {
    store->write(epoch, [&](state::StateFile& file) { state::save_state(live(), file); });
  } catch (const std::exception& e) {
    report("the checkpoint of epoch " + std::to_string(epoch) + " was not written: " + e.what() +
           (had_file ? "; the previous file of that epoch stays" : "; the epoch is not a jump target"));
  }
  host_.changed();
}

std::optional<int64_t> TrainingRestorer::take_jump() {
  std::lock_guard lock(mu_);
  if (!in_flight_ && pending_) {
    in_flight_ = std::move(pending_);
    pending_.reset();
  }
  if (!in_flight_) return std::nullopt;
  return in_flight_->epoch;
}

bool TrainingRestorer::jump_in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_.has_value();
}

void TrainingRestorer::restore_jump() {
  std::optional<Jump> jump;
  {
    std::lock_guard lock(mu_);
    jump = in_flight_;
  }
  if (!jump) throw TimeTravelError("no jump is under way");
  restore_file(*jump->file, jump->epoch);
}

void TrainingRestorer::complete_jump() {
  {
    std::lock_guard lock(mu_);
    in_flight_.reset();
    ++jumps_;
    update_armed_locked();
    if (!pending_) host_.clear_interrupt();
  }
  host_.changed();
}

bool TrainingRestorer::finish() {
  std::shared_ptr<CheckpointStore> store;
  {
    std::lock_guard lock(mu_);
    if (pending_ || in_flight_) return false;
    active_ = false;
    ended_ = true;
    update_armed_locked();
    store = store_;
  }
  // When epochs() returns, its checkpoints are on disk (another process may
  // resume from them next).
  if (store) store->wait_idle();
  host_.changed();
  return true;
}

void TrainingRestorer::close() {
  std::shared_ptr<CheckpointStore> store;
  {
    std::lock_guard lock(mu_);
    active_ = false;
    ended_ = true;
    pending_.reset();
    in_flight_.reset();
    update_armed_locked();
    host_.clear_interrupt();
    store = store_;
  }
  if (store) store->wait_idle();
  host_.changed();
}

void TrainingRestorer::request_jump(int64_t epoch) {
  {
    std::lock_guard lock(mu_);
    if (!active_) throw TimeTravelError(ended_ ? kLoopEnded : kNoLoop);
    if (!unavailable_.empty()) throw TimeTravelError(unavailable_);
    if (epoch < 0 || epoch >= epochs_) {
      throw TimeTravelError("epoch " + std::to_string(epoch) + " is out of range: the loop has " +
                            std::to_string(epochs_) + " epochs (0.." + std::to_string(epochs_ - 1) + ")");
    }
    if (!store_->has(epoch)) {
      throw TimeTravelError("epoch " + std::to_string(epoch) +
                            " is not cached (cached epochs: " + ranges(store_->epochs()) +
                            "); an epoch becomes a jump target once training has passed its start");
    }
  }
  auto file = load_validated(epoch);
  {
    std::lock_guard lock(mu_);
    if (!active_) throw TimeTravelError(kLoopEnded);
    pending_ = Jump{epoch, std::move(file)};
    update_armed_locked();
    host_.interrupt();
  }
  host_.changed();
}

bool TrainingRestorer::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

TimeTravelStatus TrainingRestorer::status() const {
  std::lock_guard lock(mu_);
  TimeTravelStatus s;
  s.available = active_ && unavailable_.empty();
  if (!active_)
    s.reason = ended_ ? kLoopEnded : kNoLoop;
  else
    s.reason = unavailable_;
  if (store_) {
    for (int64_t e : store_->epochs()) {
      if (e < epochs_) s.cached_epochs.push_back(e);
    }
    s.bytes_used = store_->bytes_used();
  }
  if (active_ || ended_) {
    s.total_epochs = epochs_;
    s.cache_dir = cache_dir_;
    s.budget_bytes = budget_;
  }
  if (active_) s.current_epoch = current_;
  if (pending_)
    s.pending_epoch = pending_->epoch;
  else if (in_flight_)
    s.pending_epoch = in_flight_->epoch;
  s.jumps = jumps_;
  s.last_error = last_error_;
  return s;
}

std::map<int64_t, uint64_t> TrainingRestorer::checkpoint_sizes() const {
  std::shared_ptr<CheckpointStore> store;
  {
    std::lock_guard lock(mu_);
    store = store_;
  }
  return store ? store->sizes() : std::map<int64_t, uint64_t>{};
}

CheckpointStore* TrainingRestorer::store() {
  std::lock_guard lock(mu_);
  return store_.get();
}

void TrainingRestorer::report(const std::string& problem) {
  std::cerr << "[nansense] time travel: " << problem << "\n";
  std::lock_guard lock(mu_);
  last_error_ = problem;
}

void TrainingRestorer::update_armed_locked() {
  armed_.store(pending_.has_value() || in_flight_.has_value(), std::memory_order_release);
}

}  // namespace nansense::time_travel
