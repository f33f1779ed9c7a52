// An epoch checkpoint found in the cache folder when a loop resumes
// (EpochOptions().start_epoch(1)): the time-travel restorer adopts the
// folder (each file's header and description, checked against the live
// model's fingerprint), reads and verifies epoch 1's file and restores it
// into a live model and optimizer. The input is the file's bytes, or edits
// of a checkpoint this model's loop wrote (fuzz/state_file_bytes.h). Only
// TimeTravelError may come out.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "fuzz/served_session.h"
#include "fuzz/state_file_bytes.h"
#include "nansense/time_travel.h"
#include "state/state_file.h"
#include "time_travel/restorer.h"

using namespace nansense;

namespace {

struct Fixture {
  fuzz::TrainedModel trained;
  time_travel::TrainingRestorer restorer{*trained.model, {trained.optimizer.get()}, nullptr, {[] {}, [] {}, [] {}}};
  std::string folder = fuzz::scratch_dir() + "/cache";
  state::StateFile seed;

  Fixture() {
    // The seed: the checkpoint this model's loop writes at epoch 1's start.
    const std::string seeds = fuzz::scratch_dir() + "/seed-cache";
    restorer.open(2, EpochOptions().cache_dir(seeds));
    restorer.save_epoch_start(1);
    restorer.store()->wait_idle();
    seed = state::read_state_file(seeds + "/epoch_1.ckpt");
    fuzz::maybe_write_seeds("epoch_1.ckpt", seed);
    restorer.close();
    std::filesystem::create_directories(folder);
  }
};

Fixture& fixture() {
  static auto* f = new Fixture;
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& f = fixture();
  fuzz::write_file(f.folder + "/epoch_1.ckpt", fuzz::file_of(data, size, f.seed));
  try {
    f.restorer.open(2, EpochOptions().cache_dir(f.folder).start_epoch(1));
    (void)f.restorer.status();
    f.restorer.close();
  } catch (const TimeTravelError&) {
    // Refused with a reason: what a bad file must get.
  }
  return 0;
}
