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
  prerender_thread_ = std::thread([this] { prerender_loop(); });
}

PushChannel::~PushChannel() {
  stop_ = true;
  controller_.wake_watchers();
  {
    std::lock_guard lock(prerender_mu_);
    prerender_cv_.notify_all();
  }
  thread_.join();
  prerender_thread_.join();
}

void PushChannel::prerender_loop() {
  uint64_t done = 0;
  while (true) {
    {
      std::unique_lock lock(prerender_mu_);
      prerender_cv_.wait(lock, [&] { return stop_ || prerender_wanted_ != done; });
      if (stop_) return;
      done = prerender_wanted_;
    }
    controller_.prerender_recent_views();
  }
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
        // The batch size lets a page ask for its chosen sample's pictures
        // before it has fetched the snapshot's summary.
        broadcast(dump({{"type", "snapshot"},
                        {"sequence", sequence},
                        {"position", status["snapshot_position"]},
                        {"batch_size", status["snapshot_batch_size"]},
                        {"architecture_changed", changed}}));
        // Pages ask for the same strips of the new batch: have them ready.
        std::lock_guard lock(prerender_mu_);
        prerender_wanted_ = sequence;
        prerender_cv_.notify_all();
      }
    } catch (const std::exception& e) {
      // A failed view must not end the channel: pages keep their last state.
      std::cerr << "[nansense] push channel: " << e.what() << "\n";
    }
  }
}

}  // namespace nansense::server
