// The one file format nansense writes training state in: epoch checkpoints
// (time travel) and NaN capsules (numerics) alike. A file is a kind, a JSON
// description ("meta") and named binary sections, each with its own CRC-32,
// so a reader can list a file by its description without reading the rest,
// and a damaged file names the section that is damaged.
//
//   "NANSENSE-STATE\r\n"                      16 bytes
//   u32 format version (kFormatVersion)
//   u32 header size (bytes from the start of the file to the end of the header CRC)
//   u16 kind length | kind
//   u32 section count
//   per section: u16 name length | name | u64 size | u32 CRC-32 of its bytes
//   u32 CRC-32 of every header byte before it
//   the sections' bytes, back to back in table order ("meta" first)
//
// Integers are little-endian; CRC-32 is zlib's. The file's size is the header
// size plus the sections' sizes: a shorter file is truncated, a longer one
// corrupted.
//
// Older formats are refused, not read: a NaN capsule that starts with
// "NANSENSE-CAPSULE" and an epoch checkpoint that starts with "NSCKPT01" (both
// from before this shared format) get a StateError that says the file is in
// an older nansense format and what to do instead.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "state/atomic_file.h"
#include "state/state_error.h"

namespace nansense::state {

inline constexpr uint32_t kFormatVersion = 1;

// Every file's description records the PyTorch that wrote it ("2.15.0").
// A reader refuses a file from a newer PyTorch (its tensor archives may not
// parse) with a StateError that names both; older ones are read.
inline constexpr const char* kTorchVersionKey = "torch";

// The kinds of file in this format.
inline constexpr std::string_view kCheckpointKind = "checkpoint";
inline constexpr std::string_view kCapsuleKind = "nan-capsule";
inline constexpr std::string_view kMomentKind = "moment";

// A state file in memory: what is written, and what a verified read returns.
class StateFile {
 public:
  StateFile() = default;
  explicit StateFile(std::string kind) : kind_(std::move(kind)) {}

  const std::string& kind() const { return kind_; }
  // Starts over as an empty file of `kind`, keeping the sections' memory for
  // the next fill (a checkpoint per epoch reuses the last one's pages).
  void reset(std::string kind);

  // The description, written as the section "meta".
  nlohmann::json meta = nlohmann::json::object();

  // Adds a section and returns its bytes to fill. Names are unique; "meta"
  // is reserved.
  std::string& add(const std::string& name);
  // The section's bytes, or null when the file has none of that name.
  const std::string* find(const std::string& name) const;
  // The section's bytes; StateError naming the file when it is missing.
  const std::string& at(const std::string& name) const;
  std::vector<std::string> section_names() const;

  // The size encode() and write_state_file() make of it.
  uint64_t encoded_size() const;

  // Set by a read: the file's path, for error messages.
  std::string origin;

 private:
  struct Section {
    std::string name;
    std::string bytes;
  };
  std::string kind_;
  std::vector<Section> sections_;
  size_t used_ = 0;  // sections_[used_..] are spare buffers from before reset()
};

// The whole file as bytes.
std::string encode(const StateFile& file);
// The bytes another PyTorch's nansense would write (its version recorded
// instead of this one's): how the version check is tested.
std::string encode_as_written_by(const StateFile& file, std::string_view torch_version);
// Verifies and parses bytes read from `origin` (a path, for messages).
// Throws StateError.
StateFile decode(std::string_view bytes, const std::string& origin);

// Writes `file` to `path` atomically (see atomic_file.h for the durability
// rule). Throws StateError; `path` is then left as it was.
void write_state_file(const std::filesystem::path& path, const StateFile& file, const WriteFault& fault = {});

// Reads `path` whole and verifies every checksum. Throws StateError.
StateFile read_state_file(const std::filesystem::path& path);

// Reads only the header and the "meta" section, verified: catches a truncated,
// foreign or old-format file and a damaged description without reading the
// rest (listing a folder), not a flipped bit in another section.
struct StateFileHead {
  std::string kind;
  nlohmann::json meta;
  uint64_t size = 0;  // the file's size in bytes
};
StateFileHead read_state_head(const std::filesystem::path& path);

// The kind said as a person would ("a time-travel checkpoint").
std::string describe_kind(std::string_view kind);

}  // namespace nansense::state
