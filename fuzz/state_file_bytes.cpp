#include "fuzz/state_file_bytes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace nansense::fuzz {

namespace {

std::string seed_section(const state::StateFile& seed, const std::string& name) {
  const std::string* bytes = seed.find(name);
  return bytes ? *bytes : std::string();
}

}  // namespace

std::string file_of(const uint8_t* data, size_t size, const state::StateFile& seed) {
  if (size == 0) return {};
  if (!(data[0] & 1)) return std::string(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t at = 1;
  const size_t edits = at < size ? std::min<size_t>(data[at++], 8) : 0;
  struct Section {
    std::string name, bytes;
  };
  std::vector<Section> sections;
  for (const auto& name : seed.section_names()) sections.push_back({name, seed_section(seed, name)});
  std::string kind = seed.kind();
  for (size_t e = 0; e < edits && at + 3 <= size && !sections.empty(); ++e, at += 3) {
    const uint8_t what = data[at] % 5, arg = data[at + 2];
    Section& s = sections[data[at + 1] % sections.size()];
    switch (what) {
      case 0:
        sections.erase(sections.begin() + (&s - sections.data()));
        break;
      case 1:
        s.bytes = sections[arg % sections.size()].bytes;
        break;
      case 2:
        s.bytes.resize(s.bytes.size() * arg / 256);
        break;
      case 3: {
        const auto names = seed.section_names();
        const std::string name = arg % (names.size() + 1) == names.size() ? "extra" : names[arg % (names.size() + 1)];
        const bool taken =
            std::any_of(sections.begin(), sections.end(), [&](const Section& o) { return o.name == name; });
        if (!taken) s.name = name;
        break;
      }
      case 4:
        kind = arg % 3 == 0 ? "checkpoint" : arg % 3 == 1 ? "nan-capsule" : "other";
        break;
    }
  }
  state::StateFile file(kind);
  file.meta = seed.meta;
  if (at < size) {
    auto meta = nlohmann::json::parse(data + at, data + size, nullptr, /*allow_exceptions=*/false);
    if (!meta.is_discarded()) file.meta = std::move(meta);
  }
  for (const auto& s : sections) file.add(s.name) = s.bytes;
  return state::encode(file);
}

TrainedModel::TrainedModel() {
  torch::manual_seed(0);
  model = torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
  optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto loss = model->forward(torch::randn({5, 4})).sum();
  loss.backward();
  optimizer->step();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void maybe_write_seeds(const std::string& name, const state::StateFile& seed) {
  const char* dir = std::getenv("NANSENSE_FUZZ_WRITE_SEEDS");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  const std::string meta = seed.meta.dump();
  write_file(std::string(dir) + "/" + name + "-raw", std::string(1, '\0') + state::encode(seed));
  write_file(std::string(dir) + "/" + name + "-meta", std::string("\1\0", 2) + meta);
  // Drop section 1; give section 2 section 1's bytes.
  write_file(std::string(dir) + "/" + name + "-dropped", std::string("\1\1\0\1\0", 5) + meta);
  write_file(std::string(dir) + "/" + name + "-swapped", std::string("\1\1\1\2\1", 5) + meta);
}

}  // namespace nansense::fuzz
