// --device and --dtype for the example programs: where the model runs and
// the precision its forward autocasts to (torch.autocast, in C++).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

// "float32" -> nullopt (no autocast), "float16", "bfloat16". Throws
// std::invalid_argument naming the accepted values.
std::optional<c10::ScalarType> parse_autocast_dtype(const std::string& name);

// "cpu", "cuda", "cuda:1"; throws std::invalid_argument when the device is
// not usable in this process (a CPU-only LibTorch, an index past the last GPU).
torch::Device parse_device(const std::string& name);

// Autocast on `device` to `dtype` for its lifetime, as `with
// torch.autocast(device, dtype):` does; nullopt leaves precision alone.
// Wrap the forward and the loss, never backward (autograd runs each op's
// backward in the precision its forward chose). The enclosing state is
// restored on exit, and the cast cache cleared when the outermost one ends.
// Throws c10::Error when LibTorch cannot autocast that device to that dtype
// (an older LibTorch's CPU autocast takes bfloat16 only).
class Autocast {
 public:
  Autocast(torch::Device device, std::optional<c10::ScalarType> dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  torch::DeviceType device_type_;
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Undefined;
};
