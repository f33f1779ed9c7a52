// The push channel: every open WebSocket gets the run's status as it changes,
// an event when a new snapshot is published and each experiment's progress
// and outcome (as get_experiment_result shows it), so pages never poll; then,
// for each snapshot, the rendered strips its page watches (strip_watch.h).
// On a locked session a page whose visitor has probes of its own (VisitorScope)
// gets that visitor's status, snapshot events and strips; every other page
// gets the shared ones.
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
  // `visitor`: the page's visitor ("" : the shared view).
  WebSocketMessageHandler add(std::shared_ptr<WebSocketPeer> peer, std::string visitor = "");
  size_t peer_count() const;

 private:
  struct Peer {
    std::shared_ptr<WebSocketPeer> socket;
    std::string visitor;
    std::vector<WatchedStrip> watch;
    // The last snapshot announced to it when the watch list was set: a list
    // applies from the next snapshot on.
    uint64_t watch_set_at = 0;
    // Whether the page ever sent a watch message (pages that never do get
    // no strips_done either).
    bool watching = false;
    // What it was last sent: its status, the snapshot announced, the
    // architecture's version.
    std::string last_status;
    uint64_t announced = 0;
    uint64_t architecture_seen = 0;
    // The snapshot whose strips it waits for, and the last one rendered.
    std::shared_ptr<std::atomic<uint64_t>> strips_wanted = std::make_shared<std::atomic<uint64_t>>(0);
    uint64_t strips_done = 0;
  };

  void loop();
  void strip_loop();
  // Sends one peer the strips it watches of snapshot `sequence` (as its
  // visitor sees it), then strips_done; stops early (returns false) once a
  // newer snapshot is out for it.
  bool push_strips(WebSocketPeer& peer, const std::string& visitor, const std::vector<WatchedStrip>& watch,
                   uint64_t sequence, const std::atomic<uint64_t>& wanted);
  void on_message(const std::weak_ptr<WebSocketPeer>& peer, const std::string& text);

  Controller& controller_;
  mutable std::mutex mu_;
  std::vector<Peer> peers_;
  uint64_t architecture_version_ = 1;  // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Renders and sends the watched strips off the status thread, so the pause
  // itself is announced at once; woken (under mu_) when a peer wants strips.
  std::condition_variable strips_cv_;
  std::thread strip_thread_;
};

}  // namespace nansense::server
