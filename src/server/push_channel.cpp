#include "server/push_channel.h"

#include <algorithm>
#include <chrono>
#include <iostream>

namespace nansense::server {

namespace {

// While the loop runs, its live position changes every batch: pages get it at
// most this often. Any other change is pushed at once.
constexpr std::chrono::milliseconds kRunningInterval{100};
constexpr std::chrono::milliseconds kIdleInterval{1000};

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

PushChannel::PushChannel(Controller& controller) : controller_(controller) {
  thread_ = std::thread([this] { loop(); });
}

PushChannel::~PushChannel() {
  stop_ = true;
  controller_.wake_watchers();
  thread_.join();
}

void PushChannel::add(std::shared_ptr<WebSocketPeer> peer) {
  peer->send(dump({{"type", "status"}, {"status", controller_.get_status()}}));
  std::lock_guard lock(mu_);
  peers_.push_back(std::move(peer));
}

size_t PushChannel::peer_count() const {
  std::lock_guard lock(mu_);
  return peers_.size();
}

void PushChannel::broadcast(const std::string& text) {
  std::lock_guard lock(mu_);
  peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [](const auto& p) { return !p->is_open(); }),
               peers_.end());
  for (const auto& peer : peers_) peer->send(text);
}

void PushChannel::loop() {
  uint64_t seen = 0;
  std::string last_status;
  uint64_t last_sequence = 0;
  std::string last_architecture;
  bool running = true;
  while (!stop_) {
    seen = controller_.wait_for_change(seen, running ? kRunningInterval : kIdleInterval);
    if (stop_) break;
    try {
      json status = controller_.get_status();
      running = status["state"] == "running";
      std::string text = dump({{"type", "status"}, {"status", status}});
      if (text != last_status) {
        broadcast(text);
        last_status = std::move(text);
      }
      const uint64_t sequence = status["snapshot_sequence"].get<uint64_t>();
      if (sequence != last_sequence) {
        last_sequence = sequence;
        std::string architecture = dump(controller_.get_architecture());
        const bool changed = architecture != last_architecture;
        last_architecture = std::move(architecture);
        broadcast(dump({{"type", "snapshot"},
                        {"sequence", sequence},
                        {"position", status["snapshot_position"]},
                        {"architecture_changed", changed}}));
      }
    } catch (const std::exception& e) {
      // A failed view must not end the channel: pages keep their last state.
      std::cerr << "[nansense] push channel: " << e.what() << "\n";
    }
  }
}

}  // namespace nansense::server
