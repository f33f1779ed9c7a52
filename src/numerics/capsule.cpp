#include "numerics/capsule.h"

#include <ATen/record_function.h>

#include <cctype>
#include <chrono>
#include <filesystem>

#include "common/json_values.h"
#include "common/json_values.h"
#include "common/own_ops.h"
#include "numerics/debug_json.h"
#include "state/training_state.h"

namespace nansense::numerics {

namespace {

using json = nlohmann::json;

// The capsule as messages name it: its path, or what it is when in memory.
std::string name_of(const state::StateFile& capsule) {
  return capsule.origin.empty() ? "the recorded state" : capsule.origin;
}

void write_tensors(const std::vector<torch::Tensor>& tensors, const char* prefix, std::string& out) {
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.write(prefix + std::to_string(i), tensors[i].detach(), /*is_buffer=*/true);
  }
  archive.save_to([&](const void* data, size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
}

std::vector<torch::Tensor> read_tensors(const state::StateFile& capsule, const std::string& section, const char* prefix,
                                        size_t count) {
  try {
    const auto& bytes = capsule.at(section);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
    std::vector<torch::Tensor> out(count);
    for (size_t i = 0; i < count; ++i) archive.read(prefix + std::to_string(i), out[i], /*is_buffer=*/true);
    return out;
  } catch (const std::exception& e) {
    throw CapsuleError(name_of(capsule) + ": its section '" + section + "' cannot be read: " + e.what());
  }
}

// A field of the capsule's description.
template <class T>
T described(const state::StateFile& capsule, const char* key) {
  try {
    return capsule.meta.at(key).get<T>();
  } catch (const json::exception& e) {
    throw CapsuleError(name_of(capsule) + " has a malformed description: " + e.what());
  }
}

}  // namespace

state::StateFile make_capsule(const CapsuleInput& in) {
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  state::StateFile capsule{std::string(state::kCapsuleKind)};
  state::save_state(in.live, capsule, {in.buffers, &in.rng});

  json grad_defined = json::array();
  json saved_gradients = json::array();
  std::vector<torch::Tensor> gradients;
  size_t index = 0;
  for (const auto& p : in.live.model->named_parameters()) {
    const auto& grad = p.value().grad();
    grad_defined.push_back(index < in.grad_defined.size() ? bool(in.grad_defined[index]) : grad.defined());
    if (grad.defined()) {
      saved_gradients.push_back(p.key());
      // A sparse gradient (nn.Embedding(sparse=True)) is kept in its dense form.
      gradients.push_back(grad.layout() == torch::kStrided ? grad : grad.to_dense());
    }
    ++index;
  }
  write_tensors(gradients, "g", capsule.add("gradients"));
  write_tensors(in.batch, "t", capsule.add("batch"));

  const auto now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  capsule.meta.update({{"position", common::to_json(in.position)},
                       {"settings", to_json(in.settings)},
                       {"error", in.error},
                       {"grad_defined", grad_defined},
                       {"gradients", saved_gradients},
                       {"batch_tensors", in.batch.size()},
                       {"num_threads", torch::get_num_threads()},
                       {"notes", in.notes},
                       {"created_unix_ms", now}});
  return capsule;
}

std::string capsule_path(const std::string& dir, const BatchPosition& position) {
  std::filesystem::create_directories(dir);
  std::string phase;
  for (char ch : position.phase) phase += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return (std::filesystem::absolute(dir) / ("nan-epoch" + std::to_string(position.epoch) + "-" + phase + "-batch" +
                                            std::to_string(position.batch_idx) + ".capsule"))
      .string();
}

state::StateFile read_capsule(const std::string& path) {
  state::StateFile capsule;
  try {
    capsule = state::read_state_file(path);
  } catch (const state::StateError& e) {
    throw CapsuleError(e.what());
  }
  if (capsule.kind() != state::kCapsuleKind) {
    throw CapsuleError(path + " is " + state::describe_kind(capsule.kind()) + ", not a NaN capsule");
  }
  return capsule;
}

void restore_capsule(const state::StateFile& capsule, const state::LiveState& live, state::Parts parts) {
  const std::string name = name_of(capsule);
  if (auto why = state::check_state(capsule, live, "the capsule", parts); !why.empty()) {
    throw CapsuleError(name + " was recorded for another model or optimizer: " + why);
  }
  std::map<std::string, bool> grad_defined;
  try {
    const auto& fp = capsule.meta.at("fingerprint").at("parameters");
    const auto& defined = capsule.meta.at("grad_defined");
    for (size_t i = 0; i < fp.size(); ++i) grad_defined[fp[i][0].get<std::string>()] = defined.at(i).get<bool>();
  } catch (const json::exception& e) {
    throw CapsuleError(name + " has a malformed description: " + e.what());
  }
  try {
    state::restore_state(capsule, live, parts);
  } catch (const state::StateError& e) {
    throw CapsuleError(e.what());
  }
  common::OwnOps own_ops;
  torch::NoGradGuard no_grad;
  // The body's zero_grad() then meets gradients in the state it met when the
  // batch first ran: present (zeroed) or absent.
  for (auto& p : live.model->named_parameters()) {
    auto& w = p.value();
    if (grad_defined[p.key()]) {
      w.mutable_grad() = torch::zeros_like(w);
    } else {
      w.mutable_grad() = torch::Tensor();
    }
  }
}

std::vector<torch::Tensor> capsule_batch(const state::StateFile& capsule) {
  return read_tensors(capsule, "batch", "t", described<size_t>(capsule, "batch_tensors"));
}

std::map<std::string, torch::Tensor> capsule_gradients(const state::StateFile& capsule) {
  const auto names = described<std::vector<std::string>>(capsule, "gradients");
  auto tensors = read_tensors(capsule, "gradients", "g", names.size());
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < names.size(); ++i) out[names[i]] = tensors[i];
  return out;
}

}  // namespace nansense::numerics
