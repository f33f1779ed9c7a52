// A real LibTorch training loop on its own thread, served on a free loopback
// port: the fixture every transport's integration test drives.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nansense/nansense.h>

#include <atomic>
#include <thread>

#include "integration/http_client.h"
#include "integration/wire_check.h"
#include "server/controller/commands.h"

namespace nansense::testing {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return torch::log_softmax(fc2(torch::relu(fc1(x))), 1); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyNet);

inline int port_of(const std::string& url) {
  auto colon = url.rfind(':');
  return std::stoi(url.substr(colon + 1));
}

// A session serving on a free port, with a training loop of `epochs` x
// (train: train_batches, val: val_batches) on its own thread.
class TrainingServerTest : public ::testing::Test {
 protected:
  void start(int64_t epochs = 2, int64_t train_batches = 4, int64_t val_batches = 2, bool throw_midway = false) {
    serve_session(train_batches, val_batches,
                  nansense::StartOptions().epochs(epochs).phases(
                      nansense::PhaseCounts{{"train", train_batches}, {"val", val_batches}}));
    if (HasFatalFailure()) return;
    trainer_ = std::thread([this, epochs, throw_midway] {
      try {
        for (int64_t e = 0; e < epochs && !ending_; ++e) run_epoch(throw_midway && e == 0);
        session_->close();
      } catch (const std::exception&) {
        // The session reports the loop as lost.
      }
    });
  }

  // The model, its optimizer, the batches and a session served on a free
  // port; the training loop is the caller's (start() or a fixture's own).
  // `serve`: how the UI is served (port, browser and banner are set here).
  void serve_session(int64_t train_batches, int64_t val_batches, nansense::StartOptions options,
                     nansense::ServeOptions serve = {}) {
    torch::manual_seed(0);
    model_ = TinyNet();
    optimizer_ = std::make_unique<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t i = 0; i < train_batches; ++i) train_.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
    for (int64_t i = 0; i < val_batches; ++i) val_.emplace_back(torch::randn({5, 4}), torch::randint(0, 3, {5}));
    session_ = std::make_unique<nansense::Session>(nansense::start(model_, options.optimizer(optimizer_.get())));
    ASSERT_TRUE(nansense::serve(*session_, serve.port(0).open_browser(false).print_banner(false)));
    port_ = port_of(session_->url());
  }

  // One epoch on the training thread: the train batches with SGD steps (the
  // first step throws when `throw_after_first_step`), then the val batches.
  void run_epoch(bool throw_after_first_step = false) {
    for (auto& batch : session_->batches(train_, "train")) {
      optimizer_->zero_grad();
      auto loss = torch::nll_loss(model_->forward(batch.first), batch.second);
      loss.backward();
      optimizer_->step();
      if (throw_after_first_step) throw std::runtime_error("boom");
    }
    torch::NoGradGuard no_grad;
    for (auto& batch : session_->batches(val_, "val")) model_->forward(batch.first);
  }

  void TearDown() override {
    if (session_ && trainer_.joinable()) {
      // Let a paused or running loop finish so the thread can be joined: the
      // rest of its epoch, not the rest of a long run's (start()'s loop ends
      // at the next epoch once the test is over).
      ending_ = true;
      try {
        session_->detach();
      } catch (const std::exception&) {
      }
    }
    if (trainer_.joinable()) trainer_.join();
    session_.reset();
  }

  // Every reply is checked against its command's declared type (refusals
  // against ErrorReply), so each test also holds the declarations to the truth.
  Reply get(const std::string& target) { return expect_declared("GET", target, http_request(port_, "GET", target)); }
  Reply post(const std::string& target, const json& body) {
    return expect_declared("POST", target, http_request(port_, "POST", target, body.dump()));
  }
  static Reply expect_declared(const std::string& method, const std::string& target, Reply reply) {
    const std::string path = target.substr(0, target.find('?'));
    auto serves = [&](const server::Command& c) {
      if (!c.rest || c.rest->method != method) return false;
      if (c.rest->path == path) return true;
      for (const auto& old : c.old_routes) {
        if (old.path == path) return true;
      }
      return false;
    };
    for (const auto& c : server::commands()) {
      if (!serves(c)) continue;
      if (reply.status == 204) {
        // A picture of a replaced snapshot (a request's `sequence`): no body.
        EXPECT_TRUE(reply.body.empty()) << reply.body;
        EXPECT_TRUE(reply.headers.count("X-Nansense-Replaced")) << target;
      } else if (reply.status != 200) {
        expect_wire(reply.json(), "ErrorReply");
      } else if (reply.headers.count("X-Nansense-Render")) {
        expect_wire(json::parse(reply.headers["X-Nansense-Render"]), c.reply);
      } else if (c.reply.empty()) {
        // A file (get_recording_file): its bytes, not JSON.
        EXPECT_NE(reply.headers["Content-Type"], "application/json") << target;
      } else {
        expect_wire(reply.json(), c.reply);
      }
    }
    return reply;
  }
  json wait_paused() {
    EXPECT_EQ(session_->wait_until_stopped(20s), nansense::RunState::kPaused);
    return get("/api/status").json();
  }

  TinyNet model_{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> train_, val_;
  std::unique_ptr<nansense::Session> session_;
  std::thread trainer_;
  std::atomic<bool> ending_{false};  // TearDown: start()'s loop stops at the next epoch
  int port_ = 0;
};

}  // namespace nansense::testing
