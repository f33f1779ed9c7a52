// What StartOptions::distributed() keeps: the run's store and this
// process's place in it. Needs c10d's headers (NANSENSE_DISTRIBUTED builds).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace nansense::detail {

struct DistributedRun {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int world_size = 1;
};

}  // namespace nansense::detail
