// The cache folder of epoch checkpoints: the byte budget, adopting a folder
// another process wrote (damaged, foreign and old-format files skipped, with
// the reason), and a folder that cannot be created.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "time_travel/checkpoint_store.h"
#include "test_models.h"

namespace nansense::time_travel {
namespace {

namespace fs = std::filesystem;
using test::message_of;

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("nansense_tt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A checkpoint whose training state is a section of `size` bytes.
std::function<void(state::StateFile&)> state_of(size_t size) {
  return [size](state::StateFile& file) { file.add("model") = std::string(size, 'p'); };
}

TEST(CheckpointStore, EvictsOldestFirstAndKeepsEpochZero) {
  auto dir = fresh_dir("budget");
  uint64_t one = 0;
  {
    CheckpointStore probe(fresh_dir("probe"), std::nullopt);
    probe.write(0, state_of(1000));
    probe.wait_idle();
    one = fs::file_size(probe.path_of(0));
    EXPECT_EQ(probe.bytes_used(), one) << "the size listed is the size on disk";
  }
  CheckpointStore store(dir, one * 3 + one / 2);
  for (int64_t e = 0; e < 6; ++e) store.write(e, state_of(1000));
  store.wait_idle();  // files are put in place in the background
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 4, 5}));
  EXPECT_LE(store.bytes_used(), one * 3 + one / 2);
  EXPECT_FALSE(fs::exists(store.path_of(3)));
  EXPECT_TRUE(fs::exists(store.path_of(0)));
  // Rewriting an old epoch makes it the newest: the oldest written goes.
  store.write(4, state_of(1000));
  store.write(1, state_of(1000));
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 1, 4}));
  // A budget below one checkpoint still keeps epoch 0.
  CheckpointStore tiny(fresh_dir("tiny"), 10);
  tiny.write(0, state_of(1000));
  tiny.write(1, state_of(1000));
  EXPECT_EQ(tiny.epochs(), (std::vector<int64_t>{0}));
}

TEST(CheckpointStore, ReadsBackWhatItWrote) {
  CheckpointStore store(fresh_dir("read"), std::nullopt);
  store.write(2, state_of(3 << 20));
  auto file = store.read(2);  // waits for the background write
  EXPECT_EQ(file.kind(), state::kCheckpointKind);
  EXPECT_EQ(file.meta["epoch"], 2);
  EXPECT_EQ(file.at("model"), std::string(3 << 20, 'p'));
  // A fill that throws changes nothing.
  auto why = message_of<state::StateError>(
      [&] { store.write(3, [](state::StateFile&) { throw std::runtime_error("boom"); }); });
  EXPECT_NE(why.find("cannot serialize the checkpoint of epoch 3: boom"), std::string::npos) << why;
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{2}));
}

TEST(CheckpointStore, AdoptsAnExistingFolderAndSkipsBadFilesSayingWhy) {
  auto dir = fresh_dir("adopt");
  {
    CheckpointStore writer(dir, std::nullopt);
    for (int64_t e = 0; e < 5; ++e) writer.write(e, state_of(100));
  }
  fs::resize_file(dir / "epoch_2.ckpt", 10);
  fs::rename(dir / "epoch_4.ckpt", dir / "epoch_1.ckpt.moved");
  fs::copy_file(dir / "epoch_0.ckpt", dir / "epoch_4.ckpt");  // says epoch 0 inside
  std::ofstream(dir / "epoch_5.ckpt") << "NSCKPT01" << std::string(100, '\1');
  std::ofstream(dir / "notes.txt") << "not a checkpoint";
  CheckpointStore store(dir, std::nullopt);
  auto problems = store.adopt(10, [](int64_t epoch, const nlohmann::json&) {
    return epoch == 3 ? std::string("epoch 3 is for another model") : std::string();
  });
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(problems.size(), 4u);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("epoch_2.ckpt is truncated"), std::string::npos) << all;
  EXPECT_NE(all.find("epoch 3 is for another model"), std::string::npos) << all;
  EXPECT_NE(all.find("epoch_4.ckpt is not a checkpoint of epoch 4 (its description says epoch 0)"), std::string::npos)
      << all;
  EXPECT_NE(all.find("epoch_5.ckpt is a time-travel checkpoint in an older nansense format"), std::string::npos) << all;
  // Out of the loop's range: not listed.
  CheckpointStore short_loop(dir, std::nullopt);
  short_loop.adopt(1, [](int64_t, const nlohmann::json&) { return std::string(); });
  EXPECT_EQ(short_loop.epochs(), (std::vector<int64_t>{0}));
  // A file that fails its full check is dropped from the list when read.
  {
    std::fstream f(dir / "epoch_1.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);
    f.put('!');
  }
  auto why = message_of<state::StateError>([&] { store.read(1); });
  EXPECT_NE(why.find("checksum mismatch in section 'model'"), std::string::npos) << why;
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0}));
}

// A process killed while writing leaves its temp file; adopting the folder
// removes those of writers that are gone, saying so, and keeps those of
// processes still running (their write may yet land).
TEST(CheckpointStore, AdoptingRemovesTheTempFilesOfWritersThatAreGone) {
  auto dir = fresh_dir("orphans");
  const pid_t gone = ::fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const auto orphan = "epoch_1.ckpt.tmp." + std::to_string(gone) + ".0";
  const auto running = "epoch_2.ckpt.tmp." + std::to_string(::getppid()) + ".3";
  const auto mine = "epoch_3.ckpt.tmp." + std::to_string(::getpid()) + ".7";
  for (const auto& name : {orphan, running, mine, std::string("epoch_4.ckpt.tmp.x.1")}) {
    std::ofstream(dir / name) << "half a checkpoint";
  }
  CheckpointStore store(dir, std::nullopt);
  auto problems = store.adopt(10, [](int64_t, const nlohmann::json&) { return std::string(); });
  EXPECT_FALSE(fs::exists(dir / orphan));
  EXPECT_TRUE(fs::exists(dir / running));
  EXPECT_TRUE(fs::exists(dir / mine));
  EXPECT_TRUE(fs::exists(dir / "epoch_4.ckpt.tmp.x.1"));  // not a name nansense writes
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "removed " + orphan + ", left by a checkpoint write that never finished (its process is gone)");
  EXPECT_TRUE(store.epochs().empty());
  fs::remove_all(dir);
}

TEST(CheckpointStore, AFailedWriteKeepsThePreviousFile) {
  auto dir = fresh_dir("full_disk");
  CheckpointStore store(dir, std::nullopt);
  std::vector<std::string> reports;
  std::mutex mu;
  store.set_problem_handler([&](const std::string& p) {
    std::lock_guard lock(mu);
    reports.push_back(p);
  });
  store.write(0, state_of(100));
  store.wait_idle();
  store.set_write_fault([](uint64_t written, size_t) { return written > 0; });
  store.write(0, state_of(5000));
  store.write(1, state_of(5000));
  store.wait_idle();
  EXPECT_EQ(store.epochs(), (std::vector<int64_t>{0}));
  EXPECT_EQ(store.read(0).at("model"), std::string(100, 'p'));
  std::lock_guard lock(mu);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_NE(reports[0].find("No space left on device"), std::string::npos) << reports[0];
  int files = 0;
  for ([[maybe_unused]] const auto& _ : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1) << "no temp file is left behind";
}

TEST(CheckpointStore, ReportsAFolderThatCannotBeCreated) {
  auto dir = fresh_dir("blocked");
  std::ofstream(dir / "file") << "x";
  auto why = message_of<state::StateError>([&] { CheckpointStore store(dir / "file" / "cache", std::nullopt); });
  EXPECT_NE(why.find("cannot create the cache folder"), std::string::npos) << why;
}

}  // namespace
}  // namespace nansense::time_travel
