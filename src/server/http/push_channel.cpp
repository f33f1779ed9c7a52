#include "server/http/push_channel.h"

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
  strip_thread_ = std::thread([this] { strip_loop(); });
}

PushChannel::~PushChannel() {
  stop_ = true;
  controller_.wake_watchers();
  {
    std::lock_guard lock(strips_mu_);
    strips_cv_.notify_all();
  }
  thread_.join();
  strip_thread_.join();
}

WebSocketMessageHandler PushChannel::add(std::shared_ptr<WebSocketPeer> peer) {
  peer->send(dump({{"type", "status"}, {"status", to_json(controller_.get_status())}}));
  std::weak_ptr<WebSocketPeer> weak = peer;
  {
    std::lock_guard lock(mu_);
    peers_.push_back(Peer{std::move(peer), {}, announced_});
  }
  // Weak: the socket owns its handler.
  return [this, weak](const std::string& text) { on_message(weak, text); };
}

size_t PushChannel::peer_count() const {
  std::lock_guard lock(mu_);
  return peers_.size();
}

void PushChannel::on_message(const std::weak_ptr<WebSocketPeer>& weak, const std::string& text) {
  auto peer = weak.lock();
  if (!peer) return;
  std::vector<WatchedStrip> watch;
  try {
    watch = parse_watch_message(text);
  } catch (const std::exception& e) {
    // The page keeps its previous watch list.
    peer->send(dump({{"type", "error"}, {"message", std::string("message refused: ") + e.what()}}));
    return;
  }
  std::lock_guard lock(mu_);
  for (auto& p : peers_) {
    if (p.socket == peer) {
      p.watch = std::move(watch);
      p.watch_set_at = announced_;
      p.watching = true;
      break;
    }
  }
}

void PushChannel::broadcast(const std::string& text, uint64_t announced_sequence) {
  std::lock_guard lock(mu_);
  if (announced_sequence != 0) announced_ = announced_sequence;
  peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.socket->is_open(); }),
               peers_.end());
  for (const auto& peer : peers_) peer.socket->send(text);
}

void PushChannel::strip_loop() {
  uint64_t done = 0;
  while (true) {
    uint64_t sequence = 0;
    {
      std::unique_lock lock(strips_mu_);
      strips_cv_.wait(lock, [&] { return stop_ || strips_wanted_ != done; });
      if (stop_) return;
      sequence = done = strips_wanted_;
    }
    // A page whose list changed after this snapshot was announced gets only
    // strips_done: it fetches what it was waiting for instead of waiting on.
    std::vector<std::pair<std::shared_ptr<WebSocketPeer>, std::vector<WatchedStrip>>> work;
    {
      std::lock_guard lock(mu_);
      for (const auto& p : peers_) {
        if (!p.socket->is_open() || !p.watching) continue;
        work.emplace_back(p.socket, p.watch_set_at < sequence ? p.watch : std::vector<WatchedStrip>{});
      }
    }
    // Pages watching the same strips share its render (the render cache is
    // single-flight), so later peers mostly find them ready.
    // Once a newer snapshot is out, the remaining peers get only strips_done.
    const std::vector<WatchedStrip> none;
    bool overtaken = false;
    for (const auto& [peer, watch] : work) {
      try {
        if (!push_strips(*peer, overtaken ? none : watch, sequence)) overtaken = true;
      } catch (const std::exception& e) {
        std::cerr << "[nansense] strip push: " << e.what() << "\n";
      }
    }
  }
}

bool PushChannel::push_strips(WebSocketPeer& peer, const std::vector<WatchedStrip>& watch, uint64_t sequence) {
  json failed = json::array();
  bool overtaken = false;
  for (const auto& strip : watch) {
    if (stop_ || !peer.is_open()) return true;
    if (strips_wanted_ != sequence) {
      overtaken = true;
      break;
    }
    try {
      // render_strip draws the newest snapshot: a newer sequence means this
      // one was overtaken while we rendered.
      auto picture = controller_.render_strip(strip.layer, strip.kind, strip.options, sequence);
      if (picture->sequence != sequence) {
        overtaken = true;
        break;
      }
      peer.send_binary(encode_strip_frame(info_json(*picture), picture->png));
    } catch (const SnapshotReplaced&) {
      // A refusal of a newer snapshot (an eval batch without gradients):
      // only this snapshot's own refusals are reported.
      overtaken = true;
      break;
    } catch (const std::exception& e) {
      if (!dynamic_cast<const Refusal*>(&e)) std::cerr << "[nansense] strip push render: " << e.what() << "\n";
      json entry = to_json(strip);
      entry["error"] = e.what();
      failed.push_back(std::move(entry));
    }
  }
  if (peer.is_open()) {
    peer.send(dump({{"type", "strips_done"}, {"sequence", sequence}, {"failed", std::move(failed)}}));
  }
  return !overtaken;
}

void PushChannel::loop() {
  uint64_t seen = 0;
  std::string last_status;
  uint64_t last_sequence = 0;
  std::string last_architecture;
  bool running = true;
  uint64_t experiments_seen = 0;
  while (!stop_) {
    seen = controller_.wait_for_change(seen, running ? kRunningInterval : kIdleInterval);
    if (stop_) break;
    try {
      const Status status = controller_.get_status();
      running = status.state == RunState::kRunning;
      std::string text = dump({{"type", "status"}, {"status", to_json(status)}});
      if (text != last_status) {
        broadcast(text);
        last_status = std::move(text);
      }
      const uint64_t sequence = status.snapshot_sequence;
      if (sequence != last_sequence) {
        last_sequence = sequence;
        std::string architecture = dump(controller_.get_architecture());
        const bool changed = architecture != last_architecture;
        last_architecture = std::move(architecture);
        // The batch size lets a page ask for its chosen sample's pictures
        // before it has fetched the snapshot's summary.
        broadcast(dump({{"type", "snapshot"},
                        {"sequence", sequence},
                        {"position", to_json(status.snapshot_position)},
                        {"batch_size", status.snapshot_batch_size},
                        {"samples_kept", status.snapshot_samples_kept},
                        {"architecture_changed", changed}}),
                  sequence);
        // Then the strips each page watches, rendered off this thread.
        std::lock_guard lock(strips_mu_);
        strips_wanted_ = sequence;
        strips_cv_.notify_all();
      }
      // Experiments' progress and outcomes, each result as it changed.
      for (auto& result : controller_.experiment_changes(experiments_seen)) {
        broadcast(dump({{"type", "experiment"}, {"result", std::move(result)}}));
      }
    } catch (const std::exception& e) {
      // A failed view must not end the channel: pages keep their last state.
      std::cerr << "[nansense] push channel: " << e.what() << "\n";
    }
  }
}

}  // namespace nansense::server
