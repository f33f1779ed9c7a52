// The cache folder: one checkpoint file per epoch start, a byte budget with
// oldest-first eviction (epoch 0 is kept), and what is in it. Thread-safe:
// the training thread writes while server threads list and read.
//
// An epoch checkpoint is a state file (state/state_file.h) of kind
// "checkpoint" whose meta says its epoch, holding the training state
// (state/training_state.h). A write blocks only while the state is
// serialized into memory; the file itself (checksums, temp file, fsync,
// rename, folder fsync) is made on a background thread, off the training
// loop's time. The epoch is listed at once; reading it waits for its file to
// be in place, and a write that fails there (a full disk) unlists it again
// (or lists the epoch's previous file, which is left intact) and is reported
// to the problem handler.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "state/state_file.h"

namespace nansense::time_travel {

class CheckpointStore {
 public:
  // Creates the folder when missing (state::StateError when it cannot).
  CheckpointStore(std::filesystem::path folder, std::optional<uint64_t> budget_bytes);
  // Waits for the writes still being made durable.
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Adopts the files already in the folder (another process may have written
  // them): every epoch_<n>.ckpt with n < epochs whose header and description
  // are whole, that is a checkpoint of epoch n, and whose meta `accept`
  // approves (empty return) is listed; the others (older formats included)
  // are skipped and their reasons returned.
  std::vector<std::string> adopt(int64_t epochs,
                                 const std::function<std::string(int64_t epoch, const nlohmann::json& meta)>& accept);

  // Makes epoch's checkpoint — `fill` adds the training state to the file,
  // on the calling thread — and has it written atomically in the background,
  // then evicts down to the budget. Throws state::StateError when the state
  // cannot be produced (nothing changes then). Returns the epochs evicted.
  std::vector<int64_t> write(int64_t epoch, const std::function<void(state::StateFile&)>& fill);

  // Reads and verifies epoch's file (checksums, kind, epoch). A file that
  // fails is dropped from the list (left on disk for inspection) and
  // state::StateError rethrown.
  state::StateFile read(int64_t epoch);

  bool has(int64_t epoch) const;
  std::vector<int64_t> epochs() const;
  // Per cached epoch, the file's size.
  std::map<int64_t, uint64_t> sizes() const;
  uint64_t bytes_used() const;
  std::optional<uint64_t> budget_bytes() const { return budget_; }
  const std::filesystem::path& folder() const { return folder_; }
  std::filesystem::path path_of(int64_t epoch) const;

  // Tests: make writes fail as a full disk would.
  void set_write_fault(state::WriteFault fault);
  // Told (from a background thread) when a written file could not be made
  // durable or put in place; the epoch is then unlisted (or its previous file
  // listed again). Called without the store's lock held.
  void set_problem_handler(std::function<void(const std::string&)> handler);
  // Waits until every write is in place (or failed).
  void wait_idle();

 private:
  struct Entry {
    uint64_t bytes = 0;
    uint64_t order = 0;               // write order: lower is older
    std::shared_future<void> placed;  // the background fsync + rename (invalid: on disk already)
  };
  // Expects mu_ held. Unlists the victims; the caller waits for and deletes them.
  std::vector<std::pair<int64_t, Entry>> evict_locked();
  void commit_failed(int64_t epoch, uint64_t order, std::optional<Entry> replaced, const std::string& why);

  std::filesystem::path folder_;
  std::optional<uint64_t> budget_;
  mutable std::mutex mu_;
  std::map<int64_t, Entry> entries_;
  uint64_t next_order_ = 0;
  std::shared_ptr<state::StateFile> spare_;  // a written checkpoint's buffers, for the next
  state::WriteFault fault_;
  std::function<void(const std::string&)> on_problem_;
  std::vector<std::shared_future<void>> in_flight_;  // every background commit, for wait_idle()
};

}  // namespace nansense::time_travel
