// The NaN capsule file: everything needed to run the batch that went
// non-finite again, bit for bit. Written atomically, framed with a checksum,
// and validated against the model before anything is restored.
//
// Layout: "NANSENSE-CAPSULE" | u32 format version | u32 0 | u64 payload bytes |
// payload (a torch serialize archive) | u32 CRC-32 of the payload; integers
// little-endian.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "nansense/debug.h"

namespace nansense::numerics {

inline constexpr uint32_t kCapsuleVersion = 1;

// What the flight recorder hands over at a trip, before the optimizer step.
struct CapsuleInput {
  const torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;  // may be null
  BatchPosition position;
  DebugSettings settings;
  nlohmann::json error;                  // the DebugError as JSON
  std::vector<torch::Tensor> buffers;    // pre-batch values, model.named_buffers() order
  std::vector<bool> grad_defined;        // per parameter, at the start of the batch
  std::vector<torch::Tensor> batch;      // ItemTensors of the batch item
  torch::Tensor rng_cpu;
  std::vector<torch::Tensor> rng_cuda;   // one per device
  std::vector<std::string> notes;
};

// A decoded, checked-for-integrity capsule.
struct CapsuleContents {
  nlohmann::json meta;
  std::vector<torch::Tensor> weights, buffers, batch, rng_cuda;
  std::vector<std::pair<std::string, torch::Tensor>> gradients;
  torch::Tensor rng_cpu;
  std::optional<torch::serialize::InputArchive> optimizer;
};

// The framed bytes of a capsule (weights and optimizer state are read now).
std::string encode_capsule(const CapsuleInput& input);
// Checks framing, version and checksum, then parses. `name` (a path) goes
// into error messages. Throws CapsuleError.
CapsuleContents decode_capsule(const std::string& bytes, const std::string& name);

// temp file, fsync, rename, fsync of the directory. Throws std::runtime_error.
void write_atomic(const std::string& path, const std::string& bytes);
std::string read_whole_file(const std::string& path);
// "<dir>/nan-epoch0-train-batch57.capsule", creating `dir`.
std::string capsule_path(const std::string& dir, const BatchPosition& position);

// Throws CapsuleError naming every mismatch (up to a few) between the capsule
// and `model` / `optimizer`.
void check_compatible(const CapsuleContents& capsule, const std::string& name, const torch::nn::Module& model,
                      const torch::optim::Optimizer* optimizer);
// Writes the capsule's weights, buffers, gradient presence, optimizer state and
// RNG states into the live objects (check_compatible first).
void restore(CapsuleContents& capsule, const std::string& name, torch::nn::Module& model,
             torch::optim::Optimizer* optimizer);

uint32_t crc32(const char* data, size_t size);

}  // namespace nansense::numerics
