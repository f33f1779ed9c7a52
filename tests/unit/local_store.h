// A c10d TCPStore served on a free loopback port, for the distributed unit
// tests (no other process connects unless a test makes one).
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace nansense::testing {

inline c10::intrusive_ptr<c10d::TCPStore> local_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;  // a free one
  options.isServer = true;
  options.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

}  // namespace nansense::testing
