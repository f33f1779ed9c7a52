#include "fashion_mnist_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr uint32_t kSide = 28;
// Far above the real 60000: guards the allocation against a corrupt header.
constexpr uint32_t kMaxCount = 1'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": " + why + " (install dataset-fashion-mnist or pass --data-dir)");
}

// One gzip'd IDX file, read front to back.
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)) {
    if (!std::filesystem::exists(path_)) fail(path_, "file not found");
    file_ = gzopen(path_.c_str(), "rb");
    if (!file_) fail(path_, "cannot open");
  }
  ~IdxReader() { gzclose(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // IDX header fields are big-endian.
  uint32_t read_u32() {
    unsigned char b[4];
    read(b, sizeof b);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | uint32_t{b[3]};
  }

  void expect(uint32_t value, uint32_t expected, const char* what) {
    if (value != expected) {
      fail(path_, std::string("bad ") + what + " " + std::to_string(value) + ", expected " + std::to_string(expected));
    }
  }

  void read(void* out, size_t n) {
    auto* dst = static_cast<unsigned char*>(out);
    while (n > 0) {
      // gzread takes an unsigned int length; read in bounded chunks.
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      const int got = gzread(file_, dst, chunk);
      if (got <= 0) fail(path_, "truncated or corrupt gzip data");
      dst += got;
      n -= static_cast<size_t>(got);
    }
  }

  uint32_t read_count() {
    const uint32_t count = read_u32();
    if (count == 0 || count > kMaxCount) fail(path_, "implausible item count " + std::to_string(count));
    return count;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

torch::Tensor read_images(const std::string& path) {
  IdxReader in(path);
  in.expect(in.read_u32(), kImagesMagic, "magic number");
  const uint32_t count = in.read_count();
  in.expect(in.read_u32(), kSide, "row count");
  in.expect(in.read_u32(), kSide, "column count");
  auto bytes = torch::empty({count, 1, kSide, kSide}, torch::kUInt8);
  in.read(bytes.data_ptr<uint8_t>(), bytes.numel());
  return bytes.to(torch::kFloat32).div_(255).sub_(kFashionMnistMean).div_(kFashionMnistStd);
}

torch::Tensor read_labels(const std::string& path) {
  IdxReader in(path);
  in.expect(in.read_u32(), kLabelsMagic, "magic number");
  const uint32_t count = in.read_count();
  auto bytes = torch::empty({count}, torch::kUInt8);
  in.read(bytes.data_ptr<uint8_t>(), bytes.numel());
  if (bytes.max().item<int>() > 9) fail(path, "label outside 0..9");
  return bytes.to(torch::kInt64);
}

}  // namespace

FashionMnist::FashionMnist(const std::string& dir, Split split) {
  const std::string prefix = dir + (split == Split::kTrain ? "/train" : "/t10k");
  images_ = read_images(prefix + "-images-idx3-ubyte.gz");
  labels_ = read_labels(prefix + "-labels-idx1-ubyte.gz");
  if (images_.size(0) != labels_.size(0)) {
    fail(prefix + "-labels-idx1-ubyte.gz",
         std::to_string(labels_.size(0)) + " labels for " + std::to_string(images_.size(0)) + " images");
  }
}

torch::data::Example<> FashionMnist::get(size_t index) {
  return {images_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
}

torch::optional<size_t> FashionMnist::size() const { return static_cast<size_t>(images_.size(0)); }
