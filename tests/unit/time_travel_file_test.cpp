// The checkpoint file format and the cache folder: atomic writes, checksums,
// truncation, write failures and the byte budget.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "time_travel/checkpoint_file.h"
#include "time_travel/checkpoint_store.h"

namespace nansense::time_travel {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("nansense_tt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

PayloadWriter bytes(std::string text) {
  return [text = std::move(text)](const PayloadSink& sink) { sink(text.data(), text.size()); };
}

std::string payload_of(const CheckpointFile& f) { return std::string(f.payload(), f.payload_size); }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

int files_in(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& _ : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(CheckpointFile, RoundTripsMetaAndPayload) {
  auto dir = fresh_dir("roundtrip");
  const std::string payload(3 << 20, 'x');  // larger than the write buffer
  const auto size = write_checkpoint_file(dir / "a.ckpt", R"({"epoch":1})", bytes(payload));
  EXPECT_EQ(size, fs::file_size(dir / "a.ckpt"));
  auto file = read_checkpoint_file(dir / "a.ckpt");
  EXPECT_EQ(file.meta, R"({"epoch":1})");
  EXPECT_EQ(payload_of(file), payload);
  EXPECT_EQ(read_checkpoint_meta(dir / "a.ckpt"), R"({"epoch":1})");
  EXPECT_EQ(files_in(dir), 1) << "no temp file is left behind";
}

TEST(CheckpointFile, DetectsTruncation) {
  auto dir = fresh_dir("truncated");
  write_checkpoint_file(dir / "a.ckpt", "{}", bytes(std::string(1000, 'y')));
  fs::resize_file(dir / "a.ckpt", 700);
  EXPECT_NE(message_of([&] { read_checkpoint_file(dir / "a.ckpt"); }).find("truncated"), std::string::npos);
  EXPECT_NE(message_of([&] { read_checkpoint_meta(dir / "a.ckpt"); }).find("truncated"), std::string::npos);
  fs::resize_file(dir / "a.ckpt", 5);
  EXPECT_NE(message_of([&] { read_checkpoint_file(dir / "a.ckpt"); }).find("truncated"), std::string::npos);
}

TEST(CheckpointFile, DetectsAFlippedBit) {
  auto dir = fresh_dir("flipped");
  write_checkpoint_file(dir / "a.ckpt", "{}", bytes(std::string(1000, 'y')));
  {
    std::fstream f(dir / "a.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('z');
  }
  EXPECT_NE(message_of([&] { read_checkpoint_file(dir / "a.ckpt"); }).find("checksum mismatch"), std::string::npos);
  // The cheap header check cannot see it; the full read before use does.
  EXPECT_EQ(read_checkpoint_meta(dir / "a.ckpt"), "{}");
}

TEST(CheckpointFile, RefusesForeignFiles) {
  auto dir = fresh_dir("foreign");
  std::ofstream(dir / "a.ckpt") << std::string(200, 'q');
  EXPECT_NE(message_of([&] { read_checkpoint_file(dir / "a.ckpt"); }).find("not a nansense checkpoint"),
            std::string::npos);
  EXPECT_NE(message_of([&] { read_checkpoint_file(dir / "missing.ckpt"); }).find("cannot open"), std::string::npos);
}

TEST(CheckpointFile, AFailedWriteLeavesThePreviousFileIntact) {
  auto dir = fresh_dir("full_disk");
  write_checkpoint_file(dir / "a.ckpt", "old", bytes(std::string(5000, 'o')));
  // A disk that fills up half way through the new file.
  WriteFault full = [](uint64_t written, size_t) { return written > 0; };
  auto why = message_of([&] {
    write_checkpoint_file(dir / "a.ckpt", "new", bytes(std::string(3 << 20, 'n')), full);
  });
  EXPECT_NE(why.find("No space left on device"), std::string::npos) << why;
  auto file = read_checkpoint_file(dir / "a.ckpt");
  EXPECT_EQ(file.meta, "old");
  EXPECT_EQ(payload_of(file), std::string(5000, 'o'));
  EXPECT_EQ(files_in(dir), 1) << "the temp file is removed";
  // A payload writer that throws is reported the same way.
  why = message_of([&] {
    write_checkpoint_file(dir / "a.ckpt", "new", [](const PayloadSink&) { throw std::runtime_error("boom"); });
  });
  EXPECT_NE(why.find("boom"), std::string::npos);
  EXPECT_EQ(read_checkpoint_file(dir / "a.ckpt").meta, "old");
}

TEST(CheckpointFile, AMissingFolderIsAnError) {
  auto dir = fresh_dir("missing_folder");
  auto why = message_of([&] { write_checkpoint_file(dir / "gone" / "a.ckpt", "{}", bytes("x")); });
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
}

TEST(CheckpointStore, EvictsOldestFirstAndKeepsEpochZero) {
  auto dir = fresh_dir("budget");
  const uint64_t one = write_checkpoint_file(dir / "probe", "{}", bytes(std::string(1000, 'p')));
  fs::remove(dir / "probe");
  CheckpointStore store(dir, one * 3 + one / 2);
  for (int64_t e = 0; e < 6; ++e) store.write(e, "{}", bytes(std::string(1000, 'p')));
  store.wait_idle();  // files are put in place in the background
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 4, 5}));
  EXPECT_LE(store.bytes_used(), one * 3 + one / 2);
  EXPECT_FALSE(fs::exists(store.path_of(3)));
  EXPECT_TRUE(fs::exists(store.path_of(0)));
  // Rewriting an old epoch makes it the newest: the oldest written goes.
  store.write(4, "{}", bytes(std::string(1000, 'p')));
  store.write(1, "{}", bytes(std::string(1000, 'p')));
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 1, 4}));
  // A budget below one checkpoint still keeps epoch 0.
  CheckpointStore tiny(fresh_dir("tiny"), 10);
  tiny.write(0, "{}", bytes(std::string(1000, 'p')));
  tiny.write(1, "{}", bytes(std::string(1000, 'p')));
  EXPECT_EQ(tiny.epochs(), (std::vector<int64_t>{0}));
}

TEST(CheckpointStore, AdoptsAnExistingFolderAndDropsBadFiles) {
  auto dir = fresh_dir("adopt");
  {
    CheckpointStore writer(dir, std::nullopt);
    for (int64_t e = 0; e < 4; ++e) writer.write(e, "{\"epoch\":" + std::to_string(e) + "}", bytes("state"));
  }
  fs::resize_file(dir / "epoch_2.ckpt", 10);
  std::ofstream(dir / "notes.txt") << "not a checkpoint";
  CheckpointStore store(dir, std::nullopt);
  auto problems = store.adopt(10, [](int64_t epoch, const std::string& meta) {
    return epoch == 3 ? std::string("epoch 3 is for another model") : std::string();
  });
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(problems.size(), 2u);
  // Out of the loop's range: not listed.
  CheckpointStore short_loop(dir, std::nullopt);
  short_loop.adopt(1, [](int64_t, const std::string&) { return std::string(); });
  EXPECT_EQ(short_loop.epochs(), (std::vector<int64_t>{0}));
  // A file that fails its full check is dropped from the list when read.
  {
    std::fstream f(dir / "epoch_1.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(14);
    f.put('!');
  }
  EXPECT_THROW(store.read(1), CheckpointFileError);
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0}));
}

TEST(CheckpointStore, ReportsAFolderThatCannotBeCreated) {
  auto dir = fresh_dir("blocked");
  std::ofstream(dir / "file") << "x";
  auto why = message_of([&] { CheckpointStore store(dir / "file" / "cache", std::nullopt); });
  EXPECT_NE(why.find("cannot create the cache folder"), std::string::npos) << why;
}

}  // namespace
}  // namespace nansense::time_travel
