// The push channel: every open WebSocket gets the run's status as it changes
// and an event when a new snapshot is published, so pages never poll.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/controller.h"
#include "server/http_server.h"

namespace nansense::server {

class PushChannel {
 public:
  explicit PushChannel(Controller& controller);
  ~PushChannel();
  PushChannel(const PushChannel&) = delete;
  PushChannel& operator=(const PushChannel&) = delete;

  // A new page: it gets the current status at once, then every change.
  void add(std::shared_ptr<WebSocketPeer> peer);
  size_t peer_count() const;

 private:
  void loop();
  void prerender_loop();
  void broadcast(const std::string& text);

  Controller& controller_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<WebSocketPeer>> peers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Renders the strips pages will ask for off the push thread, so the pause
  // itself is announced at once.
  std::mutex prerender_mu_;
  std::condition_variable prerender_cv_;
  uint64_t prerender_wanted_ = 0;
  std::thread prerender_thread_;
};

}  // namespace nansense::server
