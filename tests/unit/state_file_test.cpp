// The one state file format and the one atomic writer: round trips, the
// cheap head read, truncation, flipped bits, older formats, write failures.
#include <gtest/gtest.h>
#include <torch/version.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "state/atomic_file.h"
#include "state/state_file.h"
#include "test_models.h"

namespace nansense::state {
namespace {

namespace fs = std::filesystem;
using test::message_of;

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("nansense_state_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void overwrite(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& item : fs::directory_iterator(dir)) out.push_back(item.path().filename().string());
  return out;
}

StateFile sample(const std::string& big = std::string(3 << 20, 'x')) {
  StateFile file{std::string(kCheckpointKind)};
  file.meta["epoch"] = 1;
  file.add("model") = big;
  file.add("rng") = "rng state";
  return file;
}

TEST(AtomicFile, WritesTheWholeFileAndLeavesNoTempFile) {
  auto dir = fresh_dir("atomic");
  write_file_atomic(dir / "a.bin", {"first ", "second ", "third"});
  EXPECT_EQ(contents(dir / "a.bin"), "first second third");
  write_file_atomic(dir / "a.bin", {"replaced"});
  EXPECT_EQ(contents(dir / "a.bin"), "replaced");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"a.bin"}) << "no temp file is left behind";
}

TEST(AtomicFile, AFailedWriteLeavesThePreviousFileIntact) {
  auto dir = fresh_dir("full_disk");
  write_file_atomic(dir / "a.bin", {"old"});
  // A disk that fills up half way through the new file.
  WriteFault full = [](uint64_t written, size_t) { return written > 0; };
  auto why = message_of<StateError>([&] { write_file_atomic(dir / "a.bin", {"new ", "bytes"}, full); });
  EXPECT_NE(why.find("No space left on device"), std::string::npos) << why;
  EXPECT_EQ(contents(dir / "a.bin"), "old");
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"a.bin"}) << "the temp file is removed";
  why = message_of<StateError>([&] { write_file_atomic(dir / "gone" / "a.bin", {"x"}); });
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
}

TEST(StateFile, RoundTripsMetaAndSections) {
  auto dir = fresh_dir("roundtrip");
  const auto file = sample();
  write_state_file(dir / "a.state", file);
  EXPECT_EQ(file.encoded_size(), fs::file_size(dir / "a.state"));
  EXPECT_EQ(contents(dir / "a.state"), encode(file));
  auto back = read_state_file(dir / "a.state");
  EXPECT_EQ(back.kind(), kCheckpointKind);
  EXPECT_EQ(back.meta.value(kTorchVersionKey, ""), TORCH_VERSION) << "the file records the PyTorch that wrote it";
  back.meta.erase(kTorchVersionKey);
  EXPECT_EQ(back.meta, file.meta);
  EXPECT_EQ(back.section_names(), (std::vector<std::string>{"model", "rng"}));
  EXPECT_EQ(back.at("model"), *file.find("model"));
  EXPECT_EQ(back.at("rng"), "rng state");
  EXPECT_EQ(back.origin, (dir / "a.state").string());
  EXPECT_NE(message_of<StateError>([&] { back.at("optimizers"); }).find("has no section 'optimizers'"),
            std::string::npos);
  auto head = read_state_head(dir / "a.state");
  EXPECT_EQ(head.kind, kCheckpointKind);
  head.meta.erase(kTorchVersionKey);
  EXPECT_EQ(head.meta, file.meta);
  EXPECT_EQ(head.size, fs::file_size(dir / "a.state"));
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"a.state"});
}

// A file from another PyTorch: an older one's (PyTorch 1.13, or a file from
// before the version was recorded) is read; a newer one's is refused, naming
// both versions, by the full read and the head read alike.
TEST(StateFile, ReadsFilesOfAnOlderPyTorchAndRefusesANewerOnesSayingWhich) {
  auto dir = fresh_dir("torch_version");
  const auto file = sample("weights");
  overwrite(dir / "old.state", encode_as_written_by(file, "1.13.0"));
  auto old = read_state_file(dir / "old.state");
  EXPECT_EQ(old.meta.value(kTorchVersionKey, ""), "1.13.0");
  EXPECT_EQ(old.at("model"), "weights");
  EXPECT_EQ(read_state_head(dir / "old.state").meta.value("epoch", -1), 1);

  overwrite(dir / "unrecorded.state", encode_as_written_by(file, ""));
  EXPECT_EQ(read_state_file(dir / "unrecorded.state").at("rng"), "rng state");

  overwrite(dir / "new.state", encode_as_written_by(file, "9.1.0"));
  for (const auto& message : {message_of<StateError>([&] { read_state_file(dir / "new.state"); }),
                              message_of<StateError>([&] { read_state_head(dir / "new.state"); })}) {
    EXPECT_NE(message.find("written by nansense on PyTorch 9.1.0, newer than this one's " + std::string(TORCH_VERSION)),
              std::string::npos)
        << message;
    EXPECT_NE(message.find((dir / "new.state").string()), std::string::npos) << message;
  }
  // The same release with another build tag is not newer.
  overwrite(dir / "same.state", encode_as_written_by(file, std::string(TORCH_VERSION) + "+cu132"));
  EXPECT_EQ(read_state_file(dir / "same.state").at("model"), "weights");
  fs::remove_all(dir);
}

TEST(StateFile, AResetFileStartsOverEmpty) {
  auto file = sample();
  file.reset(std::string(kCapsuleKind));
  EXPECT_EQ(file.kind(), kCapsuleKind);
  EXPECT_TRUE(file.section_names().empty());
  EXPECT_TRUE(file.meta.empty());
  file.add("batch") = "b";
  EXPECT_EQ(decode(encode(file), "mem").at("batch"), "b");
}

TEST(StateFile, DetectsTruncationAnywhere) {
  auto dir = fresh_dir("truncated");
  const std::string whole = encode(sample(std::string(1000, 'y')));
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, size_t{40}, whole.size() / 2, whole.size() - 1}) {
    overwrite(dir / "a.state", whole.substr(0, cut));
    auto why = message_of<StateError>([&] { read_state_file(dir / "a.state"); });
    EXPECT_NE(why.find("is truncated"), std::string::npos) << "cut at " << cut << ": " << why;
    why = message_of<StateError>([&] { read_state_head(dir / "a.state"); });
    EXPECT_NE(why.find("is truncated"), std::string::npos) << "cut at " << cut << ": " << why;
  }
  overwrite(dir / "a.state", whole + "extra");
  EXPECT_NE(message_of<StateError>([&] { read_state_file(dir / "a.state"); }).find("5 unexpected bytes"),
            std::string::npos);
}

TEST(StateFile, NamesTheSectionAFlippedBitIsIn) {
  auto dir = fresh_dir("flipped");
  std::string bytes = encode(sample(std::string(1000, 'y')));
  const auto at = bytes.find(std::string(1000, 'y'));
  bytes[at + 500] ^= 0x20;
  overwrite(dir / "a.state", bytes);
  auto why = message_of<StateError>([&] { read_state_file(dir / "a.state"); });
  EXPECT_NE(why.find("is corrupted (checksum mismatch in section 'model')"), std::string::npos) << why;
  // The cheap head read cannot see it; the full read before use does.
  EXPECT_EQ(read_state_head(dir / "a.state").meta["epoch"], 1);
  // In the header, or in the description: both reads see it.
  bytes = encode(sample(std::string(1000, 'y')));
  bytes[bytes.find("checkpoint")] ^= 0x01;
  overwrite(dir / "a.state", bytes);
  EXPECT_NE(message_of<StateError>([&] { read_state_head(dir / "a.state"); }).find("checksum mismatch in its header"),
            std::string::npos);
  bytes = encode(sample(std::string(1000, 'y')));
  bytes[bytes.find("\"epoch\"") + 1] ^= 0x01;
  overwrite(dir / "a.state", bytes);
  EXPECT_NE(message_of<StateError>([&] { read_state_head(dir / "a.state"); }).find("section 'meta'"),
            std::string::npos);
}

TEST(StateFile, RefusesOlderFormatsSayingSo) {
  auto dir = fresh_dir("old");
  overwrite(dir / "old.capsule", std::string("NANSENSE-CAPSULE") + std::string(100, '\1'));
  auto why = message_of<StateError>([&] { read_state_file(dir / "old.capsule"); });
  EXPECT_NE(why.find("is a NaN capsule in an older nansense format"), std::string::npos) << why;
  overwrite(dir / "epoch_0.ckpt", std::string("NSCKPT01") + std::string(100, '\1'));
  why = message_of<StateError>([&] { read_state_head(dir / "epoch_0.ckpt"); });
  EXPECT_NE(why.find("is a time-travel checkpoint in an older nansense format"), std::string::npos) << why;
  // A newer format version is refused too, naming both versions.
  std::string bytes = encode(sample("x"));
  bytes[16] = 9;
  overwrite(dir / "new.state", bytes);
  why = message_of<StateError>([&] { read_state_file(dir / "new.state"); });
  EXPECT_NE(why.find("has state format version 9; this nansense reads version 1 (it was written by a newer one)"),
            std::string::npos)
      << why;
}

TEST(StateFile, RefusesForeignAndMissingFiles) {
  auto dir = fresh_dir("foreign");
  overwrite(dir / "a.state", std::string(200, 'q'));
  EXPECT_NE(message_of<StateError>([&] { read_state_file(dir / "a.state"); }).find("is not a nansense state file"),
            std::string::npos);
  EXPECT_NE(message_of<StateError>([&] { read_state_file(dir / "missing.state"); }).find("cannot open"),
            std::string::npos);
  // A header that claims to be 4 GiB long.
  const std::string_view huge("NANSENSE-STATE\r\n\1\0\0\0\xff\xff\xff\xff", 24);
  EXPECT_NE(message_of<StateError>([&] { decode(huge, "mem"); }).find("mem is corrupted (bad header size)"),
            std::string::npos);
}

}  // namespace
}  // namespace nansense::state
