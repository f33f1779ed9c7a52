#include "time_travel/checkpoint_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

namespace nansense::time_travel {

namespace fs = std::filesystem;

namespace {

// "epoch_12.ckpt" -> 12; anything else -> nullopt.
std::optional<int64_t> epoch_of(const fs::path& file) {
  const std::string name = file.filename().string();
  const std::string prefix = "epoch_", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 12 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

// "epoch_12.ckpt.tmp.<pid>.<n>" (state/atomic_file.cpp's temp file) whose
// writer, process <pid>, is gone: a write that never landed, killed before
// its rename. Nothing will finish or remove it.
bool is_orphaned_temp(const fs::path& file) {
  const std::string name = file.filename().string();
  const std::string marker = ".ckpt.tmp.";
  const auto at = name.find(marker);
  if (at == std::string::npos || !epoch_of(fs::path(name.substr(0, at + 5)))) return false;
  const std::string rest = name.substr(at + marker.size());  // "<pid>.<n>"
  const auto dot = rest.find('.');
  const std::string digits = rest.substr(0, dot);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  const auto pid = static_cast<pid_t>(std::stol(digits));
  return pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Why a file's description is not that of a checkpoint of `epoch`; empty
// when it is.
std::string not_a_checkpoint_of(const std::string& file, const std::string& kind, const nlohmann::json& meta,
                                int64_t epoch) {
  if (kind != state::kCheckpointKind) {
    return file + " is " + state::describe_kind(kind) + ", not a time-travel checkpoint";
  }
  const auto* saved = meta.contains("epoch") ? &meta["epoch"] : nullptr;
  if (!saved || !saved->is_number_integer() || saved->get<int64_t>() != epoch) {
    return file + " is not a checkpoint of epoch " + std::to_string(epoch) + " (its description says epoch " +
           (saved ? saved->dump() : std::string("none")) + ")";
  }
  return {};
}

}  // namespace

CheckpointStore::CheckpointStore(fs::path folder, std::optional<uint64_t> budget_bytes)
    : folder_(fs::absolute(folder).lexically_normal()), budget_(budget_bytes) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec || !fs::is_directory(folder_)) {
    throw state::StateError("cannot create the cache folder " + folder_.string() + ": " +
                            (ec ? ec.message() : std::string("a file is in the way")));
  }
}

fs::path CheckpointStore::path_of(int64_t epoch) const {
  return folder_ / ("epoch_" + std::to_string(epoch) + ".ckpt");
}

std::vector<std::string> CheckpointStore::adopt(
    int64_t epochs, const std::function<std::string(int64_t, const nlohmann::json&)>& accept) {
  struct Found {
    int64_t epoch;
    uint64_t bytes;
    fs::file_time_type time;
  };
  std::vector<Found> found;
  std::vector<std::string> problems;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(folder_, ec)) {
    if (item.is_regular_file() && is_orphaned_temp(item.path())) {
      std::error_code removed;
      fs::remove(item.path(), removed);
      problems.push_back(removed ? "cannot remove " + item.path().string() +
                                       ", left by a write that never finished: " + removed.message()
                                 : "removed " + item.path().filename().string() +
                                       ", left by a checkpoint write that never finished (its process is gone)");
      continue;
    }
    auto epoch = epoch_of(item.path());
    if (!epoch || *epoch >= epochs || !item.is_regular_file()) continue;
    try {
      const auto head = state::read_state_head(item.path());
      auto why = not_a_checkpoint_of(item.path().string(), head.kind, head.meta, *epoch);
      if (why.empty()) why = accept(*epoch, head.meta);
      if (!why.empty()) {
        problems.push_back(why);
        continue;
      }
      found.push_back({*epoch, head.size, item.last_write_time()});
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (ec) problems.push_back("cannot list " + folder_.string() + ": " + ec.message());
  // Oldest written first, so eviction order follows the files' history.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.time != b.time ? a.time < b.time : a.epoch < b.epoch; });
  std::lock_guard lock(mu_);
  for (const auto& f : found) entries_[f.epoch] = {f.bytes, next_order_++, {}};
  return problems;
}

CheckpointStore::~CheckpointStore() { wait_idle(); }

void CheckpointStore::wait_idle() {
  std::vector<std::shared_future<void>> pending;
  {
    std::lock_guard lock(mu_);
    pending.swap(in_flight_);
  }
  for (auto& f : pending) f.wait();
}

std::vector<int64_t> CheckpointStore::write(int64_t epoch, const std::function<void(state::StateFile&)>& fill) {
  state::WriteFault fault;
  std::shared_future<void> previous;
  std::optional<Entry> replaced;
  // Reuse the last checkpoint's memory: touching fresh pages costs more than
  // the serialization itself.
  std::shared_ptr<state::StateFile> file;
  {
    std::lock_guard lock(mu_);
    fault = fault_;
    if (auto it = entries_.find(epoch); it != entries_.end()) {
      previous = it->second.placed;
      replaced = it->second;
    }
    file = std::move(spare_);
  }
  if (!file) file = std::make_shared<state::StateFile>();
  file->reset(std::string(state::kCheckpointKind));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  file->meta["epoch"] = epoch;
  file->meta["written_at_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  try {
    fill(*file);
  } catch (const std::exception& e) {
    throw state::StateError("cannot serialize the checkpoint of epoch " + std::to_string(epoch) + ": " + e.what());
  }
  // The same file's earlier write lands first.
  if (previous.valid()) previous.wait();
  uint64_t order = 0;
  {
    std::lock_guard lock(mu_);
    order = next_order_++;
  }
  if (replaced) replaced->placed = {};
  const auto path = path_of(epoch);
  const uint64_t size = file->encoded_size();
  std::packaged_task<void()> task([this, path, file, fault, epoch, order, replaced] {
    try {
      state::write_state_file(path, *file, fault);
    } catch (const std::exception& e) {
      commit_failed(epoch, order, replaced, e.what());
    }
    std::lock_guard lock(mu_);
    spare_ = file;
  });
  std::shared_future<void> placed = task.get_future().share();
  std::vector<std::pair<int64_t, Entry>> victims;
  {
    std::lock_guard lock(mu_);
    entries_[epoch] = {size, order, placed};
    std::erase_if(in_flight_, [](const std::shared_future<void>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    in_flight_.push_back(placed);
    victims = evict_locked();
  }
  // Listed before it starts, so a failure finds its entry to undo. wait_idle()
  // (the destructor too) waits for its future, set at its very end.
  std::thread(std::move(task)).detach();
  std::vector<int64_t> evicted;
  for (auto& [victim, entry] : victims) {
    if (entry.placed.valid()) entry.placed.wait();
    std::error_code ec;
    fs::remove(path_of(victim), ec);
    evicted.push_back(victim);
  }
  return evicted;
}

void CheckpointStore::commit_failed(int64_t epoch, uint64_t order, std::optional<Entry> replaced,
                                    const std::string& why) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard lock(mu_);
    handler = on_problem_;
    auto it = entries_.find(epoch);
    if (it != entries_.end() && it->second.order == order) {
      // The rename never happened: the previous file, if any, is still there.
      if (replaced)
        it->second = *replaced;
      else
        entries_.erase(it);
    }
  }
  if (handler) {
    handler("the checkpoint of epoch " + std::to_string(epoch) + " was not written: " + why +
            (replaced ? "; the previous file of that epoch stays" : "; the epoch is not a jump target"));
  }
}

void CheckpointStore::set_problem_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard lock(mu_);
  on_problem_ = std::move(handler);
}

std::vector<std::pair<int64_t, CheckpointStore::Entry>> CheckpointStore::evict_locked() {
  std::vector<std::pair<int64_t, Entry>> evicted;
  if (!budget_) return evicted;
  auto used = [&] {
    uint64_t total = 0;
    for (const auto& [_, e] : entries_) total += e.bytes;
    return total;
  };
  while (used() > *budget_) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == 0) continue;
      if (oldest == entries_.end() || it->second.order < oldest->second.order) oldest = it;
    }
    if (oldest == entries_.end()) break;  // only epoch 0 is left: it stays
    evicted.emplace_back(oldest->first, oldest->second);
    entries_.erase(oldest);
  }
  return evicted;
}

state::StateFile CheckpointStore::read(int64_t epoch) {
  std::shared_future<void> placed;
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(epoch); it != entries_.end()) placed = it->second.placed;
  }
  if (placed.valid()) placed.wait();
  try {
    auto file = state::read_state_file(path_of(epoch));
    if (auto why = not_a_checkpoint_of(file.origin, file.kind(), file.meta, epoch); !why.empty()) {
      throw state::StateError(why);
    }
    return file;
  } catch (const state::StateError&) {
    std::lock_guard lock(mu_);
    entries_.erase(epoch);
    throw;
  }
}

bool CheckpointStore::has(int64_t epoch) const {
  std::lock_guard lock(mu_);
  return entries_.count(epoch) > 0;
}

std::vector<int64_t> CheckpointStore::epochs() const {
  std::lock_guard lock(mu_);
  std::vector<int64_t> out;
  for (const auto& [epoch, _] : entries_) out.push_back(epoch);
  return out;
}

std::map<int64_t, uint64_t> CheckpointStore::sizes() const {
  std::lock_guard lock(mu_);
  std::map<int64_t, uint64_t> out;
  for (const auto& [epoch, e] : entries_) out[epoch] = e.bytes;
  return out;
}

uint64_t CheckpointStore::bytes_used() const {
  std::lock_guard lock(mu_);
  uint64_t total = 0;
  for (const auto& [_, e] : entries_) total += e.bytes;
  return total;
}

void CheckpointStore::set_write_fault(state::WriteFault fault) {
  std::lock_guard lock(mu_);
  fault_ = std::move(fault);
}

}  // namespace nansense::time_travel
