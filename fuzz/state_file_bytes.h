// Helpers of the checkpoint and capsule harnesses (state/state_file.h's
// format): what file an input stands for, and a small trained model to
// restore files into.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "state/state_file.h"

namespace nansense::fuzz {

// The file an input stands for. Byte 0 even: the rest is the file's bytes as
// they are (the framing, its checksums and limits). Byte 0 odd: the rest
// edits `seed`, a valid file the harness made with the code under test:
// byte 1 is a count of edits (at most 8) of 3 bytes each (what, section,
// argument: drop a section, give it another section's bytes, cut it short,
// rename it, change the file's kind), then comes the description's JSON
// text; state::encode then writes the file, checksums right. So mutations
// reach the description's readers and the choice of sections, while every
// section's bytes stay whole LibTorch archives: LibTorch's archive reader
// crashed on crafted archive bytes (1.13: fuzz/findings/, docs/contributing.md), which no check of ours can prevent.
std::string file_of(const uint8_t* data, size_t size, const state::StateFile& seed);

// A two-layer model with an SGD optimizer (momentum) after one step, the
// same on every run (seeded).
struct TrainedModel {
  TrainedModel();
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::SGD> optimizer;
};

void write_file(const std::string& path, const std::string& bytes);
// Writes seeds for `seed` (as raw bytes; as edits: none, a dropped section,
// a section given another's bytes) into the folder named by
// $NANSENSE_FUZZ_WRITE_SEEDS, if set: how the committed seeds were made.
void maybe_write_seeds(const std::string& name, const state::StateFile& seed);

}  // namespace nansense::fuzz
