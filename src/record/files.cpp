#include "record/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <stdexcept>

namespace nansense::record {

namespace fs = std::filesystem;

std::string run_folder(std::time_t started) {
  const char* parent = std::getenv("NANSENSE_RECORDINGS_DIR");
  std::tm local{};
  localtime_r(&started, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return (fs::path(parent && *parent ? parent : "nansense_recordings") / stamp).string();
}

std::string file_part(const std::string& key) {
  std::string out;
  for (char c : key) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    out += keep ? c : '_';
  }
  return out.empty() ? "view" : out;
}

std::string free_path(const std::string& folder, const std::string& stem, const std::string& ext) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw std::runtime_error("cannot create the recordings folder " + folder + ": " + ec.message());
  for (int n = 1;; ++n) {
    const fs::path p = fs::path(folder) / (stem + (n == 1 ? "" : "-" + std::to_string(n)) + "." + ext);
    // Created exclusively: two callers can never be handed the same name.
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return p.string();
    }
    if (errno != EEXIST) throw std::runtime_error("cannot create " + p.string() + ": " + std::strerror(errno));
  }
}

std::string snapshot_stem(const std::string& key, int64_t epoch, const std::string& phase, int64_t batch) {
  char numbers[64];
  std::snprintf(numbers, sizeof numbers, "_ep%03lld_%s_b%05lld", static_cast<long long>(epoch),
                file_part(phase).c_str(), static_cast<long long>(batch));
  return file_part(key) + numbers;
}

}  // namespace nansense::record
