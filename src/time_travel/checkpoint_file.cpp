#include "time_travel/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

namespace nansense::time_travel {

namespace {

constexpr char kMagic[8] = {'N', 'S', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kEndMagic[8] = {'N', 'S', 'C', 'K', 'E', 'N', 'D', '1'};
constexpr size_t kHeaderSize = 8 + 4;
constexpr size_t kTrailerSize = 8 + 4 + 4 + 8;
constexpr size_t kBufferSize = size_t{1} << 20;
constexpr uint32_t kMaxMeta = 64u << 20;

void put_u32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

std::string errno_text(int err) { return std::strerror(err); }

// A temp file that removes itself unless committed; buffers small writes and
// keeps the running CRC.
class TempFile : public PendingCheckpointFile {
 public:
  TempFile(const std::filesystem::path& target, const WriteFault& fault) : target_(target), fault_(fault) {
    static std::atomic<uint64_t> counter{0};
    temp_ = target;
    temp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create " + temp_.string() + ": " + errno_text(errno));
    buffer_.reserve(kBufferSize);
  }
  ~TempFile() override {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  uint64_t size() const override { return final_size_; }

  void write(const void* data, size_t size) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(data), size);
    if (buffer_.size() + size <= kBufferSize) {
      buffer_.insert(buffer_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
      return;
    }
    flush();
    if (size >= kBufferSize) {
      raw_write(data, size);
    } else {
      buffer_.insert(buffer_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    }
  }
  // Bytes handed to write() so far.
  uint64_t written() const { return written_ + buffer_.size(); }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }
  // Appends the trailer unchecksummed.
  void write_trailer(const char* data, size_t size) {
    flush();
    raw_write(data, size);
    final_size_ = written_;
  }

  // fsync, rename over the target. The folder is not synced: after a crash
  // the rename may be lost, leaving the previous file, which is whole.
  void commit() override {
    flush();
    if (::fdatasync(fd_) != 0) fail("cannot flush " + temp_.string() + " to disk: " + errno_text(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close " + temp_.string() + ": " + errno_text(errno));
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      fail("cannot rename " + temp_.string() + " to " + target_.string() + ": " + errno_text(errno));
    }
    committed_ = true;
  }

 private:
  void flush() {
    if (buffer_.empty()) return;
    raw_write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void raw_write(const void* data, size_t size) {
    if (fault_ && fault_(written_, size)) {
      fail("cannot write " + temp_.string() + ": " + errno_text(ENOSPC) + " (injected)");
    }
    const char* p = static_cast<const char*>(data);
    size_t left = size;
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write " + temp_.string() + ": " + errno_text(errno));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    written_ += size;
  }
  [[noreturn]] void fail(const std::string& why) const { throw CheckpointFileError(why); }

  std::filesystem::path target_;
  std::filesystem::path temp_;
  WriteFault fault_;
  uint64_t final_size_ = 0;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> buffer_;
  uint64_t written_ = 0;
  uLong crc_ = crc32_z(0L, Z_NULL, 0);
};

// Reads exactly `size` bytes at `offset`; false at end of file.
bool read_at(int fd, char* out, size_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

class ReadFile {
 public:
  explicit ReadFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw CheckpointFileError("cannot open " + path.string() + ": " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw CheckpointFileError("cannot stat " + path.string() + ": " + errno_text(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ReadFile() { ::close(fd_); }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Layout {
  uint64_t body_len = 0;
  uint32_t crc = 0;
  uint32_t meta_len = 0;
};

// Checks the header and trailer of a file of `file_size` bytes.
Layout check_frame(const std::filesystem::path& path, const char* header, const char* trailer, uint64_t file_size) {
  auto bad = [&](const std::string& why) { throw CheckpointFileError(path.string() + " " + why); };
  if (file_size < kHeaderSize + kTrailerSize) {
    bad("is truncated (" + std::to_string(file_size) + " bytes, shorter than any checkpoint)");
  }
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) bad("is not a nansense checkpoint (wrong header)");
  if (std::memcmp(trailer + 16, kEndMagic, sizeof kEndMagic) != 0) {
    bad("is truncated or corrupted (no end marker: the write did not complete)");
  }
  Layout l;
  l.body_len = get_u64(trailer);
  l.crc = get_u32(trailer + 8);
  l.meta_len = get_u32(header + 8);
  if (l.body_len + kTrailerSize != file_size) {
    bad("is truncated or corrupted (" + std::to_string(file_size) + " bytes, the trailer says " +
        std::to_string(l.body_len + kTrailerSize) + ")");
  }
  if (l.meta_len > kMaxMeta || kHeaderSize + l.meta_len > l.body_len) bad("is corrupted (bad header length)");
  return l;
}

}  // namespace

uint64_t checkpoint_file_size(size_t meta_size, size_t payload_size) {
  return kHeaderSize + meta_size + payload_size + kTrailerSize;
}

std::unique_ptr<PendingCheckpointFile> write_checkpoint_temp(const std::filesystem::path& path,
                                                             const std::string& meta, const PayloadWriter& payload,
                                                             const WriteFault& fault) {
  auto temp = std::make_unique<TempFile>(path, fault);
  TempFile& file = *temp;
  char header[kHeaderSize];
  std::memcpy(header, kMagic, sizeof kMagic);
  put_u32(header + 8, static_cast<uint32_t>(meta.size()));
  file.write(header, sizeof header);
  file.write(meta.data(), meta.size());
  try {
    payload([&](const void* data, size_t size) { file.write(data, size); });
  } catch (const CheckpointFileError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointFileError("cannot serialize the checkpoint for " + path.string() + ": " + e.what());
  }
  const uint64_t body_len = file.written();
  char trailer[kTrailerSize];
  put_u64(trailer, body_len);
  put_u32(trailer + 8, file.crc());
  put_u32(trailer + 12, 0);
  std::memcpy(trailer + 16, kEndMagic, sizeof kEndMagic);
  file.write_trailer(trailer, sizeof trailer);
  return temp;
}

uint64_t write_checkpoint_file(const std::filesystem::path& path, const std::string& meta,
                               const PayloadWriter& payload, const WriteFault& fault) {
  auto file = write_checkpoint_temp(path, meta, payload, fault);
  file->commit();
  return file->size();
}

CheckpointFile read_checkpoint_file(const std::filesystem::path& path) {
  ReadFile in(path);
  CheckpointFile out;
  out.bytes.resize(in.size());
  if (!read_at(in.fd(), out.bytes.data(), out.bytes.size(), 0)) {
    throw CheckpointFileError("cannot read " + path.string() + ": it changed while being read");
  }
  const uint64_t size = out.bytes.size();
  if (size < kHeaderSize + kTrailerSize) check_frame(path, out.bytes.data(), out.bytes.data(), size);
  const Layout l = check_frame(path, out.bytes.data(), out.bytes.data() + size - kTrailerSize, size);
  const uint32_t crc = static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(out.bytes.data()), l.body_len));
  if (crc != l.crc) {
    throw CheckpointFileError(path.string() + " is corrupted (checksum mismatch)");
  }
  out.meta = out.bytes.substr(kHeaderSize, l.meta_len);
  out.payload_offset = kHeaderSize + l.meta_len;
  out.payload_size = l.body_len - out.payload_offset;
  return out;
}

std::string read_checkpoint_meta(const std::filesystem::path& path) {
  ReadFile in(path);
  char header[kHeaderSize] = {};
  char trailer[kTrailerSize] = {};
  const uint64_t size = in.size();
  if (size >= kHeaderSize + kTrailerSize) {
    if (!read_at(in.fd(), header, sizeof header, 0) || !read_at(in.fd(), trailer, sizeof trailer, size - kTrailerSize)) {
      throw CheckpointFileError("cannot read " + path.string());
    }
  }
  const Layout l = check_frame(path, header, trailer, size);
  std::string meta(l.meta_len, '\0');
  if (!read_at(in.fd(), meta.data(), meta.size(), kHeaderSize)) throw CheckpointFileError("cannot read " + path.string());
  return meta;
}

}  // namespace nansense::time_travel
