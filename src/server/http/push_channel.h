// The push channel: every open WebSocket gets the run's status as it changes,
// an event when a new snapshot is published and each experiment's progress
// and outcome (as get_experiment_result shows it), so pages never poll; then,
// for each snapshot, the rendered strips its page watches (strip_watch.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/controller/controller.h"
#include "server/http/http_server.h"
#include "server/http/strip_watch.h"

namespace nansense::server {

class PushChannel {
 public:
  explicit PushChannel(Controller& controller);
  ~PushChannel();
  PushChannel(const PushChannel&) = delete;
  PushChannel& operator=(const PushChannel&) = delete;

  // A new page: it gets the current status at once, then every change.
  // Returns the handler for what the page sends (its watch messages).
  WebSocketMessageHandler add(std::shared_ptr<WebSocketPeer> peer);
  size_t peer_count() const;

 private:
  struct Peer {
    std::shared_ptr<WebSocketPeer> socket;
    std::vector<WatchedStrip> watch;
    // The last snapshot announced when the watch list was set: a list
    // applies from the next snapshot on.
    uint64_t watch_set_at = 0;
    // Whether the page ever sent a watch message (pages that never do get
    // no strips_done either).
    bool watching = false;
  };

  void loop();
  void strip_loop();
  // Sends one peer the strips it watches of snapshot `sequence`, then
  // strips_done; stops early (returns false) once a newer snapshot is out.
  bool push_strips(WebSocketPeer& peer, const std::vector<WatchedStrip>& watch, uint64_t sequence);
  void on_message(const std::weak_ptr<WebSocketPeer>& peer, const std::string& text);
  // Sends `text` to every open peer; a snapshot event also records the
  // announced sequence (under the same lock, so a watch set after the event
  // was queued waits for the next snapshot).
  void broadcast(const std::string& text, uint64_t announced_sequence = 0);

  Controller& controller_;
  mutable std::mutex mu_;
  std::vector<Peer> peers_;
  uint64_t announced_ = 0;  // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Renders and sends the watched strips off the status thread, so the pause
  // itself is announced at once.
  std::mutex strips_mu_;
  std::condition_variable strips_cv_;
  std::atomic<uint64_t> strips_wanted_{0};  // written under strips_mu_
  std::thread strip_thread_;
};

}  // namespace nansense::server
