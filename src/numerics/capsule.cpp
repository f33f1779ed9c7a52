#include "numerics/capsule.h"

#include <ATen/record_function.h>
#include <c10/util/Type.h>
#include <fcntl.h>
#include <torch/version.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_values.h"
#include "numerics/debug_json.h"

namespace nansense::numerics {

namespace {

constexpr char kMagic[] = "NANSENSE-CAPSULE";  // 16 bytes, no terminator written
constexpr size_t kMagicSize = 16;
constexpr size_t kHeaderSize = kMagicSize + 4 + 4 + 8;
constexpr size_t kTrailerSize = 4;

template <class T>
void put(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <class T>
T get(const std::string& in, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string optimizer_type(const torch::optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

torch::Tensor cpu_copy(const torch::Tensor& t) {
  return t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

void write_tensors(torch::serialize::OutputArchive& parent, const std::string& key, const std::string& prefix,
                   const std::vector<torch::Tensor>& tensors) {
  torch::serialize::OutputArchive nested(parent.compilation_unit());
  for (size_t i = 0; i < tensors.size(); ++i) nested.write(prefix + std::to_string(i), tensors[i], /*is_buffer=*/true);
  parent.write(key, nested);
}

std::vector<torch::Tensor> read_tensors(torch::serialize::InputArchive& parent, const std::string& key,
                                        const std::string& prefix, size_t count) {
  torch::serialize::InputArchive nested;
  parent.read(key, nested);
  std::vector<torch::Tensor> out(count);
  for (size_t i = 0; i < count; ++i) nested.read(prefix + std::to_string(i), out[i], /*is_buffer=*/true);
  return out;
}

}  // namespace

uint32_t crc32(const char* data, size_t size) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ static_cast<unsigned char>(data[i])) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string encode_capsule(const CapsuleInput& in) {
  at::DisableRecordFunctionGuard no_record;
  torch::NoGradGuard no_grad;
  using nlohmann::json;
  json params = json::array();
  std::vector<torch::Tensor> weights, grads;
  size_t index = 0;
  for (const auto& p : in.model->named_parameters()) {
    const auto& w = p.value();
    const bool grad_now = w.grad().defined();
    params.push_back({{"name", p.key()},
                      {"shape", w.sizes().vec()},
                      {"dtype", std::string(c10::toString(w.scalar_type()))},
                      {"grad_defined", index < in.grad_defined.size() ? bool(in.grad_defined[index]) : grad_now},
                      {"grad_saved", grad_now}});
    weights.push_back(cpu_copy(w));
    if (grad_now) grads.push_back(cpu_copy(w.grad()));
    ++index;
  }
  json buffers = json::array();
  std::vector<torch::Tensor> buffer_values;
  index = 0;
  for (const auto& b : in.model->named_buffers()) {
    const auto& value = index < in.buffers.size() && in.buffers[index].defined() ? in.buffers[index] : b.value();
    buffers.push_back({{"name", b.key()},
                       {"shape", b.value().sizes().vec()},
                       {"dtype", std::string(c10::toString(b.value().scalar_type()))}});
    buffer_values.push_back(cpu_copy(value));
    ++index;
  }
  json batch = json::array();
  std::vector<torch::Tensor> batch_values;
  for (const auto& t : in.batch) {
    batch.push_back({{"shape", t.sizes().vec()}, {"dtype", std::string(c10::toString(t.scalar_type()))}});
    batch_values.push_back(cpu_copy(t));
  }

  std::vector<std::string> notes = in.notes;
  torch::serialize::OutputArchive archive;
  json optimizer = nullptr;
  if (in.optimizer) {
    json lrs = json::array();
    for (auto& group : in.optimizer->param_groups()) {
      try {
        lrs.push_back(group.options().get_lr());
      } catch (const std::exception&) {
        lrs.push_back(nullptr);
      }
    }
    bool saved = false;
    try {
      torch::serialize::OutputArchive state(archive.compilation_unit());
      in.optimizer->save(state);
      archive.write("optimizer", state);
      saved = true;
    } catch (const std::exception& e) {
      notes.push_back(std::string("the optimizer state could not be saved: ") + e.what());
    }
    optimizer = {{"type", optimizer_type(*in.optimizer)}, {"saved", saved}, {"lr", lrs}};
  }

  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  json meta = {{"format", "nansense-capsule"},
               {"version", kCapsuleVersion},
               {"torch", TORCH_VERSION},
               {"position", common::to_json(in.position)},
               {"settings", to_json(in.settings)},
               {"error", in.error},
               {"parameters", params},
               {"buffers", buffers},
               {"batch", batch},
               {"optimizer", optimizer},
               {"num_threads", torch::get_num_threads()},
               {"cuda_generators", in.rng_cuda.size()},
               {"notes", notes},
               {"created_unix_ms", now}};
  archive.write("meta", c10::IValue(meta.dump()));
  write_tensors(archive, "weights", "w", weights);
  write_tensors(archive, "gradients", "g", grads);
  write_tensors(archive, "buffers", "b", buffer_values);
  write_tensors(archive, "batch", "t", batch_values);
  std::vector<torch::Tensor> rng = {in.rng_cpu.defined() ? cpu_copy(in.rng_cpu) : torch::empty({0}, torch::kUInt8)};
  for (const auto& s : in.rng_cuda) rng.push_back(cpu_copy(s));
  write_tensors(archive, "rng", "r", rng);

  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  const std::string payload = payload_stream.str();
  std::string out;
  out.reserve(kHeaderSize + payload.size() + kTrailerSize);
  out.append(kMagic, kMagicSize);
  put<uint32_t>(out, kCapsuleVersion);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, payload.size());
  out += payload;
  put<uint32_t>(out, crc32(payload.data(), payload.size()));
  return out;
}

CapsuleContents decode_capsule(const std::string& bytes, const std::string& name) {
  if (bytes.size() < kMagicSize || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    throw CapsuleError(name + " is not a nansense NaN capsule (it does not start with \"NANSENSE-CAPSULE\")");
  }
  if (bytes.size() < kHeaderSize) {
    throw CapsuleError(name + " is truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                       std::to_string(kHeaderSize) + "-byte header");
  }
  const auto version = get<uint32_t>(bytes, kMagicSize);
  if (version != kCapsuleVersion) {
    throw CapsuleError(name + " has capsule format version " + std::to_string(version) +
                       "; this nansense reads version " + std::to_string(kCapsuleVersion));
  }
  const auto size = get<uint64_t>(bytes, kMagicSize + 8);
  const uint64_t held = bytes.size() - kHeaderSize;
  if (held < size + kTrailerSize) {
    throw CapsuleError(name + " is truncated: its header announces " + std::to_string(size) +
                       " payload bytes and a 4-byte checksum, the file holds " + std::to_string(held) +
                       " bytes after the header");
  }
  if (held > size + kTrailerSize) {
    throw CapsuleError(name + " is corrupt: " + std::to_string(held - size - kTrailerSize) +
                       " unexpected bytes after the checksum");
  }
  const uint32_t stored = get<uint32_t>(bytes, kHeaderSize + size);
  const uint32_t computed = crc32(bytes.data() + kHeaderSize, size);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " is corrupt: checksum mismatch (stored %08x, computed %08x)", stored, computed);
    throw CapsuleError(name + buf);
  }

  CapsuleContents c;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data() + kHeaderSize, size, torch::Device(torch::kCPU));
    c10::IValue meta;
    archive.read("meta", meta);
    c.meta = nlohmann::json::parse(meta.toStringRef());
    if (c.meta.value("format", "") != "nansense-capsule") throw CapsuleError(name + " holds no capsule metadata");
    c.weights = read_tensors(archive, "weights", "w", c.meta["parameters"].size());
    size_t saved = 0;
    for (const auto& p : c.meta["parameters"]) saved += p.value("grad_saved", false) ? 1 : 0;
    auto grads = read_tensors(archive, "gradients", "g", saved);
    size_t k = 0;
    for (const auto& p : c.meta["parameters"]) {
      if (p.value("grad_saved", false)) c.gradients.emplace_back(p["name"].get<std::string>(), grads[k++]);
    }
    c.buffers = read_tensors(archive, "buffers", "b", c.meta["buffers"].size());
    c.batch = read_tensors(archive, "batch", "t", c.meta["batch"].size());
    auto rng = read_tensors(archive, "rng", "r", 1 + c.meta.value("cuda_generators", size_t{0}));
    c.rng_cpu = rng[0];
    c.rng_cuda.assign(rng.begin() + 1, rng.end());
    if (c.meta["optimizer"].is_object() && c.meta["optimizer"].value("saved", false)) {
      c.optimizer.emplace();
      archive.read("optimizer", *c.optimizer);
    }
  } catch (const CapsuleError&) {
    throw;
  } catch (const std::exception& e) {
    throw CapsuleError(name + " passed its checksum but could not be parsed: " + e.what());
  }
  return c;
}

void write_atomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + temp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(temp.c_str());
      throw std::runtime_error("cannot write " + temp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot flush " + temp + ": " + why);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot rename " + temp + " to " + path + ": " + why);
  }
  // The rename itself survives a crash only once the directory is synced.
  const auto dir = fs::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CapsuleError("cannot open the capsule " + path + ": " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string capsule_path(const std::string& dir, const BatchPosition& position) {
  std::filesystem::create_directories(dir);
  std::string phase;
  for (char ch : position.phase) phase += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return (std::filesystem::absolute(dir) / ("nan-epoch" + std::to_string(position.epoch) + "-" + phase + "-batch" +
                                        std::to_string(position.batch_idx) + ".capsule"))
      .string();
}

void check_compatible(const CapsuleContents& c, const std::string& name, const torch::nn::Module& model,
                      const torch::optim::Optimizer* optimizer) {
  std::vector<std::string> problems;
  auto compare = [&](const char* what, const nlohmann::json& recorded,
                     const torch::OrderedDict<std::string, torch::Tensor>& live) {
    std::map<std::string, const nlohmann::json*> by_name;
    for (const auto& r : recorded) by_name[r["name"].get<std::string>()] = &r;
    for (const auto& item : live) {
      auto it = by_name.find(item.key());
      if (it == by_name.end()) {
        problems.push_back(std::string(what) + " '" + item.key() + "' is in this model but not in the capsule");
        continue;
      }
      const auto shape = (*it->second)["shape"].get<std::vector<int64_t>>();
      const auto dtype = (*it->second)["dtype"].get<std::string>();
      if (shape != item.value().sizes().vec()) {
        problems.push_back(std::string(what) + " '" + item.key() + "' has shape " + shape_text(shape) +
                           " in the capsule but " + shape_text(item.value().sizes().vec()) + " in this model");
      } else if (dtype != c10::toString(item.value().scalar_type())) {
        problems.push_back(std::string(what) + " '" + item.key() + "' is " + dtype + " in the capsule but " +
                           c10::toString(item.value().scalar_type()) + " in this model");
      }
      by_name.erase(it);
    }
    for (const auto& [missing, _] : by_name) {
      problems.push_back(std::string(what) + " '" + missing + "' is in the capsule but not in this model");
    }
  };
  compare("parameter", c.meta["parameters"], model.named_parameters());
  compare("buffer", c.meta["buffers"], model.named_buffers());
  if (!problems.empty()) {
    std::string text = name + " was recorded for another model: ";
    for (size_t i = 0; i < problems.size() && i < 3; ++i) text += (i ? "; " : "") + problems[i];
    if (problems.size() > 3) text += "; and " + std::to_string(problems.size() - 3) + " more differences";
    throw CapsuleError(text);
  }
  const auto& opt = c.meta["optimizer"];
  if (optimizer && opt.is_object() && opt.value("saved", false)) {
    const std::string recorded = opt["type"].get<std::string>();
    if (recorded != optimizer_type(*optimizer)) {
      throw CapsuleError(name + " holds " + recorded + " state, but the optimizer given is " +
                         optimizer_type(*optimizer));
    }
  }
}

void restore(CapsuleContents& c, const std::string& name, torch::nn::Module& model,
             torch::optim::Optimizer* optimizer) {
  check_compatible(c, name, model, optimizer);
  at::DisableRecordFunctionGuard no_record;
  torch::NoGradGuard no_grad;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < c.meta["parameters"].size(); ++i) index[c.meta["parameters"][i]["name"]] = i;
  for (auto& p : model.named_parameters()) {
    const size_t i = index.at(p.key());
    auto& w = p.value();
    w.copy_(c.weights[i]);
    // The body's zero_grad() then meets gradients in the state it met when
    // the batch first ran: present (zeroed) or absent.
    if (c.meta["parameters"][i].value("grad_defined", false)) {
      w.mutable_grad() = torch::zeros_like(w);
    } else {
      w.mutable_grad() = torch::Tensor();
    }
  }
  index.clear();
  for (size_t i = 0; i < c.meta["buffers"].size(); ++i) index[c.meta["buffers"][i]["name"]] = i;
  for (auto& b : model.named_buffers()) b.value().copy_(c.buffers[index.at(b.key())]);
  if (optimizer && c.optimizer) {
    try {
      optimizer->state().clear();
      optimizer->load(*c.optimizer);
      const auto& lrs = c.meta["optimizer"]["lr"];
      auto& groups = optimizer->param_groups();
      for (size_t g = 0; g < groups.size() && g < lrs.size(); ++g) {
        if (lrs[g].is_number()) groups[g].options().set_lr(lrs[g].get<double>());
      }
    } catch (const std::exception& e) {
      throw CapsuleError(name + ": its optimizer state does not fit the optimizer given: " + e.what());
    }
  }
  if (c.rng_cpu.defined() && c.rng_cpu.numel() > 0) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard lock(gen.mutex());
    gen.set_state(c.rng_cpu);
  }
  for (size_t i = 0; i < c.rng_cuda.size() && at::hasCUDA(); ++i) {
    auto gen = at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, static_cast<int8_t>(i)));
    std::lock_guard lock(gen.mutex());
    gen.set_state(c.rng_cuda[i]);
  }
}

}  // namespace nansense::numerics
