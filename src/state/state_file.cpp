#include "state/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/version.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>

namespace nansense::state {

namespace {

constexpr std::string_view kMagic("NANSENSE-STATE\r\n", 16);
// The formats before this one, recognised by their first bytes.
constexpr std::string_view kOldCapsuleMagic("NANSENSE-CAPSULE", 16);
constexpr std::string_view kOldCheckpointMagic("NSCKPT01", 8);
constexpr size_t kFixedSize = 16 + 4 + 4;  // magic, version, header size
// Bounds that keep a damaged header from asking for absurd allocations.
constexpr uint32_t kMaxHeader = 1u << 20;
constexpr uint32_t kMaxSections = 256;
constexpr size_t kMaxName = 255;
const std::string kMetaName = "meta";

uint32_t crc_of(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

template <class T>
void put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads little-endian integers and names from the header, refusing to read
// past its end.
class HeaderReader {
 public:
  HeaderReader(std::string_view bytes, const std::string& origin) : bytes_(bytes), origin_(origin) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<T>(static_cast<unsigned char>(bytes_[at_ + i])) << (8 * i);
    }
    at_ += sizeof(T);
    return v;
  }
  std::string name() {
    const auto size = get<uint16_t>();
    if (size > kMaxName) corrupt();
    need(size);
    std::string out(bytes_.substr(at_, size));
    at_ += size;
    return out;
  }
  size_t offset() const { return at_; }
  void skip(size_t n) { at_ += n; }
  [[noreturn]] void corrupt() const { throw StateError(origin_ + " is corrupted (its header does not parse)"); }

 private:
  void need(size_t n) const {
    if (at_ + n > bytes_.size()) corrupt();
  }
  std::string_view bytes_;
  const std::string& origin_;
  size_t at_ = 0;
};

struct TableEntry {
  std::string name;
  uint64_t size = 0;
  uint32_t crc = 0;
};

struct Header {
  uint32_t size = 0;  // bytes up to and including the header CRC
  std::string kind;
  std::vector<TableEntry> sections;
  uint64_t file_size = 0;  // what the header says the whole file takes
};

// Checks the fixed start (magic, older formats, version) of `start` (at
// least kFixedSize bytes, or the whole file when shorter) and returns the
// header size.
uint32_t check_start(std::string_view start, uint64_t file_size, const std::string& origin) {
  if (start.substr(0, kOldCapsuleMagic.size()) == kOldCapsuleMagic) {
    throw StateError(origin +
                     " is a NaN capsule in an older nansense format (\"NANSENSE-CAPSULE\", before the "
                     "shared state file); this nansense does not read it: run the training again to "
                     "record the NaN in the current format");
  }
  if (start.substr(0, kOldCheckpointMagic.size()) == kOldCheckpointMagic) {
    throw StateError(origin +
                     " is a time-travel checkpoint in an older nansense format (\"NSCKPT01\", before the "
                     "shared state file); this nansense does not read it: delete the file (or the cache "
                     "folder) and it is written afresh at the next epoch start");
  }
  const size_t compared = std::min(start.size(), kMagic.size());
  if (start.substr(0, compared) != kMagic.substr(0, compared)) {
    throw StateError(origin + " is not a nansense state file (it does not start with \"NANSENSE-STATE\")");
  }
  if (file_size < kFixedSize) {
    throw StateError(origin + " is truncated (" + std::to_string(file_size) + " bytes, shorter than any header)");
  }
  HeaderReader r(start, origin);
  r.skip(kMagic.size());
  const auto version = r.get<uint32_t>();
  if (version != kFormatVersion) {
    throw StateError(origin + " has state format version " + std::to_string(version) +
                     "; this nansense reads version " + std::to_string(kFormatVersion) +
                     (version > kFormatVersion ? " (it was written by a newer one)" : ""));
  }
  const auto size = r.get<uint32_t>();
  if (size < kFixedSize || size > kMaxHeader) throw StateError(origin + " is corrupted (bad header size)");
  if (file_size < size) {
    throw StateError(origin + " is truncated (" + std::to_string(file_size) + " bytes, its header alone takes " +
                     std::to_string(size) + ")");
  }
  return size;
}

// Parses and verifies the whole header (`bytes` holds at least its size).
Header parse_header(std::string_view bytes, uint32_t size, uint64_t file_size, const std::string& origin) {
  Header h;
  h.size = size;
  const std::string_view header = bytes.substr(0, size);
  HeaderReader r(header, origin);
  r.skip(kFixedSize);
  h.kind = r.name();
  const auto count = r.get<uint32_t>();
  if (count == 0 || count > kMaxSections) r.corrupt();
  uint64_t total = size;
  for (uint32_t i = 0; i < count; ++i) {
    TableEntry e;
    e.name = r.name();
    e.size = r.get<uint64_t>();
    e.crc = r.get<uint32_t>();
    if (e.size > std::numeric_limits<uint64_t>::max() - total) r.corrupt();
    for (const auto& seen : h.sections) {
      if (seen.name == e.name) r.corrupt();
    }
    total += e.size;
    h.sections.push_back(std::move(e));
  }
  const size_t crc_at = r.offset();
  const auto stored = r.get<uint32_t>();
  if (r.offset() != size) r.corrupt();
  if (stored != crc_of(header.substr(0, crc_at))) {
    throw StateError(origin + " is corrupted (checksum mismatch in its header)");
  }
  if (h.sections.front().name != kMetaName) r.corrupt();
  h.file_size = total;
  if (file_size < total) {
    throw StateError(origin + " is truncated (" + std::to_string(file_size) + " bytes, its header says " +
                     std::to_string(total) + ")");
  }
  if (file_size > total) {
    throw StateError(origin + " is corrupted (" + std::to_string(file_size - total) +
                     " unexpected bytes after its last section)");
  }
  return h;
}

void check_section(const TableEntry& e, std::string_view bytes, const std::string& origin) {
  if (crc_of(bytes) != e.crc) {
    throw StateError(origin + " is corrupted (checksum mismatch in section '" + e.name + "')");
  }
}

// "2.15.0+cu132" -> (2, 15); (0, 0) when it does not parse.
std::pair<int, int> major_minor(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

// The tensors in a state file are torch archives: a torch reads what an
// older one wrote, not always what a newer one did. A file from a newer
// torch is refused before its tensors are parsed; a file without the field
// (written before it was recorded, by PyTorch 1.13) is read as any older one.
void check_torch_version(const nlohmann::json& meta, const std::string& origin) {
  const auto it = meta.find(kTorchVersionKey);
  if (it == meta.end() || !it->is_string()) return;
  const auto written = it->get<std::string>();
  const auto ours = major_minor(TORCH_VERSION);
  if (major_minor(written) > ours) {
    throw StateError(origin + " was written by nansense on PyTorch " + written + ", newer than this one's " +
                     TORCH_VERSION +
                     ": its tensors may be in a format this PyTorch cannot read; open it where "
                     "nansense runs PyTorch " +
                     written + " or later");
  }
}

// The description as written: the caller's, plus the torch that wrote it.
nlohmann::json written_meta(nlohmann::json meta, std::string_view torch_version = TORCH_VERSION) {
  meta[kTorchVersionKey] = torch_version;
  return meta;
}

nlohmann::json parse_meta(std::string_view bytes, const std::string& origin) {
  auto meta = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) {
    throw StateError(origin + " is corrupted (its description is not a JSON object)");
  }
  check_torch_version(meta, origin);
  return meta;
}

// The header, the meta text and the sections in file order.
struct Framing {
  std::string header;
  std::string meta;
  std::vector<std::string_view> parts;
};

Framing frame(const StateFile& file, const std::vector<std::pair<std::string, const std::string*>>& sections,
              std::string_view torch_version = TORCH_VERSION) {
  Framing f;
  f.meta = written_meta(file.meta, torch_version).dump();
  std::string table;
  put<uint16_t>(table, static_cast<uint16_t>(file.kind().size()));
  table += file.kind();
  put<uint32_t>(table, static_cast<uint32_t>(sections.size() + 1));
  auto entry = [&](const std::string& name, std::string_view bytes) {
    put<uint16_t>(table, static_cast<uint16_t>(name.size()));
    table += name;
    put<uint64_t>(table, bytes.size());
    put<uint32_t>(table, crc_of(bytes));
  };
  entry(kMetaName, f.meta);
  for (const auto& [name, bytes] : sections) entry(name, *bytes);
  f.header.append(kMagic);
  put<uint32_t>(f.header, kFormatVersion);
  put<uint32_t>(f.header, static_cast<uint32_t>(kFixedSize + table.size() + 4));
  f.header += table;
  put<uint32_t>(f.header, crc_of(f.header));
  f.parts.push_back(f.header);
  f.parts.push_back(f.meta);
  for (const auto& [_, bytes] : sections) f.parts.push_back(*bytes);
  return f;
}

std::vector<std::pair<std::string, const std::string*>> sections_of(const StateFile& file) {
  std::vector<std::pair<std::string, const std::string*>> out;
  for (const auto& name : file.section_names()) out.emplace_back(name, file.find(name));
  return out;
}

std::string errno_text() { return std::strerror(errno); }

// An open file, closed on scope exit.
class ReadFile {
 public:
  explicit ReadFile(const std::filesystem::path& path) : path_(path.string()) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw StateError("cannot open " + path_ + ": " + errno_text());
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw StateError("cannot stat " + path_ + ": " + errno_text());
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadFile() { ::close(fd_); }
  uint64_t size() const { return size_; }
  // Exactly `size` bytes at `offset`.
  void read(char* out, size_t size, uint64_t offset) const {
    while (size > 0) {
      const ssize_t n = ::pread(fd_, out, size, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw StateError("cannot read " + path_ + ": " + errno_text());
      if (n == 0) throw StateError("cannot read " + path_ + ": it changed while being read");
      out += n;
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace

void StateFile::reset(std::string kind) {
  kind_ = std::move(kind);
  meta = nlohmann::json::object();
  origin.clear();
  used_ = 0;
}

std::string& StateFile::add(const std::string& name) {
  if (name == kMetaName || find(name)) throw std::logic_error("state file section '" + name + "' added twice");
  if (used_ == sections_.size()) sections_.emplace_back();
  auto& s = sections_[used_++];
  s.name = name;
  s.bytes.clear();
  return s.bytes;
}

const std::string* StateFile::find(const std::string& name) const {
  for (size_t i = 0; i < used_; ++i) {
    if (sections_[i].name == name) return &sections_[i].bytes;
  }
  return nullptr;
}

const std::string& StateFile::at(const std::string& name) const {
  if (const auto* bytes = find(name)) return *bytes;
  throw StateError((origin.empty() ? std::string("the state") : origin) + " has no section '" + name + "'");
}

std::vector<std::string> StateFile::section_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < used_; ++i) out.push_back(sections_[i].name);
  return out;
}

uint64_t StateFile::encoded_size() const {
  uint64_t size = kFixedSize + 2 + kind_.size() + 4 + 4;
  auto entry = [&](const std::string& name, uint64_t bytes) { size += 2 + name.size() + 8 + 4 + bytes; };
  entry(kMetaName, written_meta(meta).dump().size());
  for (size_t i = 0; i < used_; ++i) entry(sections_[i].name, sections_[i].bytes.size());
  return size;
}

std::string encode(const StateFile& file) { return encode_as_written_by(file, TORCH_VERSION); }

std::string encode_as_written_by(const StateFile& file, std::string_view torch_version) {
  const auto framing = frame(file, sections_of(file), torch_version);
  std::string out;
  size_t total = 0;
  for (const auto& part : framing.parts) total += part.size();
  out.reserve(total);
  for (const auto& part : framing.parts) out += part;
  return out;
}

StateFile decode(std::string_view bytes, const std::string& origin) {
  const uint32_t size = check_start(bytes.substr(0, kFixedSize), bytes.size(), origin);
  const Header h = parse_header(bytes, size, bytes.size(), origin);
  StateFile file(h.kind);
  file.origin = origin;
  uint64_t at = h.size;
  for (const auto& e : h.sections) {
    const auto section = bytes.substr(at, e.size);
    check_section(e, section, origin);
    if (e.name == kMetaName) {
      file.meta = parse_meta(section, origin);
    } else {
      file.add(e.name).assign(section);
    }
    at += e.size;
  }
  return file;
}

void write_state_file(const std::filesystem::path& path, const StateFile& file, const WriteFault& fault) {
  const auto framing = frame(file, sections_of(file));
  write_file_atomic(path, framing.parts, fault);
}

StateFile read_state_file(const std::filesystem::path& path) {
  ReadFile in(path);
  std::string bytes(in.size(), '\0');
  in.read(bytes.data(), bytes.size(), 0);
  return decode(bytes, path.string());
}

StateFileHead read_state_head(const std::filesystem::path& path) {
  const std::string origin = path.string();
  ReadFile in(path);
  std::string start(std::min<uint64_t>(in.size(), kFixedSize), '\0');
  in.read(start.data(), start.size(), 0);
  const uint32_t size = check_start(start, in.size(), origin);
  std::string header(size, '\0');
  in.read(header.data(), header.size(), 0);
  const Header h = parse_header(header, size, in.size(), origin);
  const auto& meta_entry = h.sections.front();
  std::string meta(meta_entry.size, '\0');
  in.read(meta.data(), meta.size(), h.size);
  check_section(meta_entry, meta, origin);
  return {h.kind, parse_meta(meta, origin), in.size()};
}

std::string describe_kind(std::string_view kind) {
  if (kind == kCheckpointKind) return "a time-travel checkpoint";
  if (kind == kCapsuleKind) return "a NaN capsule";
  if (kind == kMomentKind) return "a frozen moment";
  return "a state file of kind '" + std::string(kind) + "'";
}

}  // namespace nansense::state
