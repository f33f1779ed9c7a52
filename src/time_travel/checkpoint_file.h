// The checkpoint file format: a small JSON header (what the file holds and
// for which model), the payload (a torch archive) and a trailer with the
// length and a CRC-32 of everything before it. Written atomically, verified
// before use.
//
//   "NSCKPT01" | u32 meta_len | meta (JSON) | payload | u64 body_len | u32 crc | u32 0 | "NSCKEND1"
//
// Integers are little-endian; body_len counts the bytes before the trailer and
// the CRC covers them all.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace nansense::time_travel {

// A checkpoint file that cannot be written or used: the message says which
// file and why (truncated, checksum mismatch, not a checkpoint, I/O error).
class CheckpointFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Receives the payload in chunks.
using PayloadSink = std::function<void(const void* data, size_t size)>;
// Produces the payload into a sink.
using PayloadWriter = std::function<void(const PayloadSink& sink)>;
// Fault injection for tests: asked before each write with the bytes written
// so far and the chunk's size; returning true fails that write as a full disk
// would (ENOSPC).
using WriteFault = std::function<bool(uint64_t written, size_t chunk)>;

// The size of the file write_checkpoint_file() makes of this meta and payload.
uint64_t checkpoint_file_size(size_t meta_size, size_t payload_size);

// A checkpoint written to its temp file, not yet durable nor in place.
class PendingCheckpointFile {
 public:
  virtual ~PendingCheckpointFile() = default;  // removes the temp file unless committed
  // The final file's size.
  virtual uint64_t size() const = 0;
  // fsync, then rename over the target. Throws CheckpointFileError (the temp
  // file is then removed and the target left as it was).
  virtual void commit() = 0;
};

// The first half of an atomic write: the whole file into a temp file beside
// `path` (so a full disk shows up here). Throws CheckpointFileError, leaving
// nothing behind.
std::unique_ptr<PendingCheckpointFile> write_checkpoint_temp(const std::filesystem::path& path,
                                                             const std::string& meta, const PayloadWriter& payload,
                                                             const WriteFault& fault = {});

// Writes `path` atomically: temp file, fsync, rename. On any failure the temp
// file is removed, an existing `path` is left as it was, and
// CheckpointFileError says why. Returns the file's size.
uint64_t write_checkpoint_file(const std::filesystem::path& path, const std::string& meta,
                               const PayloadWriter& payload, const WriteFault& fault = {});

// A verified file in memory.
struct CheckpointFile {
  std::string meta;
  std::string bytes;  // the whole file
  size_t payload_offset = 0;
  size_t payload_size = 0;
  const char* payload() const { return bytes.data() + payload_offset; }
};

// Reads `path` whole and verifies size, markers and checksum.
CheckpointFile read_checkpoint_file(const std::filesystem::path& path);

// Reads only the header and the trailer: catches a truncated or foreign file
// without reading the payload (listing a folder), not a flipped bit inside.
// Returns the meta JSON text.
std::string read_checkpoint_meta(const std::filesystem::path& path);

}  // namespace nansense::time_travel
