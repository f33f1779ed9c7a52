// A served session whose loop runs session.epochs(3, ...) on its own thread,
// checkpointing into a temporary folder (time travel and what it rewinds).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "integration/training_fixture.h"

namespace nansense::testing {

class EpochLoopServerTest : public TrainingServerTest {
 protected:
  // Starts the loop: 4 train and 2 val batches per epoch, three epochs.
  // `name` keeps each fixture's cache folder apart.
  void start_epoch_loop(const std::string& name, const nansense::StartOptions& options) {
    dir_ = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    serve_session(4, 2, options);
    if (HasFatalFailure()) return;
    trainer_ = std::thread([this] {
      try {
        session_->epochs(
            3, [&](int64_t) { run_epoch(); }, nansense::EpochOptions().cache_dir(dir_.string()));
        session_->close();
      } catch (const std::exception&) {
      }
    });
  }
  void TearDown() override {
    TrainingServerTest::TearDown();
    std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
};

}  // namespace nansense::testing
