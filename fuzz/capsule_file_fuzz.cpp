// A NaN capsule handed to nansense::replay_capsule (the public way back into
// one): read and verified, its description, batch and gradients read, then
// checked against and restored into a live model (with its optimizer, or
// without when byte 0 bit 1 is set). The input is the file's bytes, or edits
// of a capsule of this model made by make_capsule (fuzz/state_file_bytes.h).
// Only CapsuleError may come out.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nansense/debug.h>

#include "fuzz/served_session.h"
#include "fuzz/state_file_bytes.h"
#include "numerics/capsule.h"
#include "state/state_file.h"

using namespace nansense;

namespace {

struct Fixture {
  fuzz::TrainedModel trained;
  std::string path = fuzz::scratch_dir() + "/fuzzed.capsule";
  int threads = torch::get_num_threads();
  state::StateFile seed;

  Fixture() {
    // The seed: a capsule of this model's state, as the flight recorder
    // hands it over at a trip.
    numerics::CapsuleInput in;
    in.live = {trained.model.ptr().get(), {trained.optimizer.get()}, nullptr};
    in.position.phase = "train";
    in.position.epoch = 0;
    in.position.batch_idx = 3;
    in.error = {{"reasons", {"nan in fc1"}}};
    in.batch = {torch::randn({5, 4}), torch::randint(0, 3, {5})};
    in.rng = state::RngState::capture();
    in.notes = {"seed"};
    seed = numerics::make_capsule(in);
    fuzz::maybe_write_seeds("nan.capsule", seed);
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
  fuzz::write_file(f.path, fuzz::file_of(data, size, f.seed));
  const bool with_optimizer = size == 0 || !(data[0] & 2);
  try {
    auto capsule = with_optimizer ? replay_capsule(f.path, *f.trained.model, f.trained.optimizer.get())
                                  : replay_capsule(f.path, *f.trained.model);
    (void)capsule;
  } catch (const CapsuleError&) {
    // Refused with a reason: what a bad file must get.
  }
  // A replay sets the capsule's thread count; the next input starts afresh.
  if (torch::get_num_threads() != f.threads) torch::set_num_threads(f.threads);
  return 0;
}
