#include "state/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace nansense::state {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The temp file: removed by the destructor unless renamed into place.
class TempFile {
 public:
  TempFile(const std::filesystem::path& target, const WriteFault& fault) : target_(target), fault_(fault) {
    // Unique per process and per write, so concurrent writers of one target
    // (a checkpoint rewritten while its last write lands) never share one.
    static std::atomic<uint64_t> counter{0};
    temp_ = target;
    temp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create " + temp_.string() + ": " + errno_text(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!placed_) ::unlink(temp_.c_str());
  }

  void write(std::string_view bytes) {
    if (fault_ && fault_(written_, bytes.size())) {
      fail("cannot write " + temp_.string() + ": " + errno_text(ENOSPC) + " (injected)");
    }
    const char* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write " + temp_.string() + ": " + errno_text(errno));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    written_ += bytes.size();
  }

  void place() {
    if (::fsync(fd_) != 0) fail("cannot flush " + temp_.string() + " to disk: " + errno_text(errno));
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot close " + temp_.string() + ": " + errno_text(errno));
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      fail("cannot rename " + temp_.string() + " to " + target_.string() + ": " + errno_text(errno));
    }
    placed_ = true;
    sync_folder();
  }

 private:
  // The rename survives a crash only once the folder's entry is on disk.
  void sync_folder() const {
    const auto folder = target_.parent_path();
    const int dfd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("cannot open the folder of " + target_.string() + " to sync it: " + errno_text(errno));
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    // EINVAL: a file system that cannot sync folders (some network and FUSE
    // ones); the rename is as durable there as it can be made.
    if (rc != 0 && err != EINVAL) {
      fail(target_.string() + " is in place but its folder could not be synced: " + errno_text(err));
    }
  }

  [[noreturn]] void fail(const std::string& why) const { throw StateError(why); }

  std::filesystem::path target_;
  std::filesystem::path temp_;
  WriteFault fault_;
  int fd_ = -1;
  bool placed_ = false;
  uint64_t written_ = 0;
};

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::vector<std::string_view>& parts,
                       const WriteFault& fault) {
  TempFile file(path, fault);
  for (const auto& part : parts) file.write(part);
  file.place();
}

}  // namespace nansense::state
