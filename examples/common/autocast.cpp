#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>

// LibTorch 2.4 (pytorch#124359) made autocast's state per device type
// (set_autocast_enabled(device_type, …), set_autocast_dtype(device_type, …))
// and deprecated the CUDA- and CPU-named calls that 2.2 and 2.3 have.
// This file is the examples' only version-dependent code; the library's is
// src/common/torch_compat.h.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define NANSENSE_EXAMPLES_AUTOCAST_PER_DEVICE 1
#endif

namespace {

bool autocast_enabled(torch::DeviceType type) {
#ifdef NANSENSE_EXAMPLES_AUTOCAST_PER_DEVICE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast_enabled(torch::DeviceType type, bool enabled) {
#ifdef NANSENSE_EXAMPLES_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == torch::kCUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

c10::ScalarType autocast_dtype(torch::DeviceType type) {
#ifdef NANSENSE_EXAMPLES_AUTOCAST_PER_DEVICE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast_dtype(torch::DeviceType type, c10::ScalarType dtype) {
#ifdef NANSENSE_EXAMPLES_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == torch::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

std::optional<c10::ScalarType> parse_autocast_dtype(const std::string& name) {
  if (name == "float32") return std::nullopt;
  if (name == "float16") return c10::ScalarType::Half;
  if (name == "bfloat16") return c10::ScalarType::BFloat16;
  throw std::invalid_argument("unknown dtype '" + name + "': use float32, float16 or bfloat16");
}

torch::Device parse_device(const std::string& name) {
  std::optional<torch::Device> device;
  try {
    device.emplace(name);
  } catch (const c10::Error&) {
    throw std::invalid_argument("unknown device '" + name + "': use cpu, cuda or cuda:N");
  }
  if (device->is_cpu()) return *device;
  if (!device->is_cuda())
    throw std::invalid_argument("device '" + name + "' is not supported: use cpu, cuda or cuda:N");
  if (!torch::cuda::is_available()) {
    throw std::invalid_argument("--device " + name +
                                ": this LibTorch has no CUDA device (a CPU-only build, or no GPU " +
                                "visible); use --device cpu");
  }
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (device->has_index() && device->index() >= count) {
    throw std::invalid_argument("--device " + name + ": this machine has " + std::to_string(count) + " CUDA device(s)");
  }
  return *device;
}

Autocast::Autocast(torch::Device device, std::optional<c10::ScalarType> dtype) : device_type_(device.type()) {
  if (!dtype) return;
  was_enabled_ = autocast_enabled(device_type_);
  was_dtype_ = autocast_dtype(device_type_);
  set_autocast_dtype(device_type_, *dtype);  // throws where the device cannot autocast to it
  set_autocast_enabled(device_type_, true);
  at::autocast::increment_nesting();
  active_ = true;
}

Autocast::~Autocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(device_type_, was_enabled_);
  set_autocast_dtype(device_type_, was_dtype_);
}
