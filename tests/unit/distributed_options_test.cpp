// StartOptions::distributed: what start() refuses, and a run of one. The
// coordinated runs themselves are tests/integration/ddp_test.cpp (real
// processes).
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "local_store.h"
#include "nansense/nansense.h"

namespace {

// start()'s UsageError for `options`, or "" when it started.
std::string refusal(nansense::StartOptions options) {
  torch::nn::Linear model(2, 2);
  try {
    auto session = nansense::start(model, options.open_browser(false));
    session.close();
    return "";
  } catch (const nansense::UsageError& e) {
    return e.what();
  }
}

TEST(DistributedOptions, BadValuesAreRefusedNamingThem) {
  auto store = nansense::testing::local_store();
  EXPECT_NE(refusal(nansense::StartOptions().distributed(nullptr, 0, 2)).find("the store is null"), std::string::npos);
  const std::string rank = refusal(nansense::StartOptions().distributed(store, 2, 2));
  EXPECT_NE(rank.find("distributed(store, 2, 2): rank must be in [0, world_size)"), std::string::npos) << rank;
  EXPECT_NE(refusal(nansense::StartOptions().distributed(store, -1, 2)).find("rank must be in"), std::string::npos);
  const std::string world = refusal(nansense::StartOptions().distributed(store, 0, 0));
  EXPECT_NE(world.find("world_size is the number of ranks"), std::string::npos) << world;
  const std::string hash = refusal(nansense::StartOptions().distributed(c10::make_intrusive<c10d::HashStore>(), 0, 2));
  EXPECT_NE(hash.find("over a c10d::TCPStore"), std::string::npos) << hash;
}

TEST(DistributedOptions, BadTimeoutIsRefused) {
  auto store = nansense::testing::local_store();
  ::setenv("NANSENSE_DDP_TIMEOUT", "soon", 1);
  const std::string why = refusal(nansense::StartOptions().distributed(store, 0, 2));
  ::unsetenv("NANSENSE_DDP_TIMEOUT");
  EXPECT_NE(why.find("NANSENSE_DDP_TIMEOUT must be a number of seconds > 0, got \"soon\""), std::string::npos) << why;
}

TEST(DistributedOptions, ARunOfOneIsAPlainSessionThatServes) {
  auto store = nansense::testing::local_store();
  torch::nn::Linear model(2, 2);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("job/", store);
  auto session = nansense::start(model, nansense::StartOptions()
                                            .distributed(prefixed, 0, 1)
                                            .port(0)
                                            .open_browser(false)
                                            .print_banner(false)
                                            .debug(nansense::DebugSettings().capsule_dir("caps")));
  EXPECT_FALSE(session.url().empty());
  EXPECT_EQ(session.debug_settings().capsule_dir(), "caps");  // no rank_0 folder outside a coordinated run
  EXPECT_TRUE(session.debug_settings().rerun_to_trace());
  session.close();
}

}  // namespace
