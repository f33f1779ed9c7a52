#include "server/http/push_channel.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

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
  controller_.run_control().wake_watchers();
  {
    std::lock_guard lock(mu_);
    strips_cv_.notify_all();
  }
  thread_.join();
  strip_thread_.join();
}

WebSocketMessageHandler PushChannel::add(std::shared_ptr<WebSocketPeer> peer, std::string visitor) {
  Status status;
  {
    VisitorScope scope(visitor);
    status = controller_.run_control().get_status();
  }
  std::string text = dump({{"type", "status"}, {"status", to_json(status)}});
  peer->send(text);
  std::weak_ptr<WebSocketPeer> weak = peer;
  {
    std::lock_guard lock(mu_);
    Peer p;
    p.socket = std::move(peer);
    p.visitor = std::move(visitor);
    p.last_status = std::move(text);
    p.announced = status.snapshot_sequence;
    p.architecture_seen = architecture_version_;
    peers_.push_back(std::move(p));
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
      p.watch_set_at = p.announced;
      p.watching = true;
      break;
    }
  }
}

void PushChannel::strip_loop() {
  struct Work {
    std::shared_ptr<WebSocketPeer> socket;
    std::string visitor;
    std::vector<WatchedStrip> watch;
    uint64_t sequence;
    std::shared_ptr<std::atomic<uint64_t>> wanted;
  };
  while (true) {
    // A page whose list changed after this snapshot was announced gets only
    // strips_done: it fetches what it was waiting for instead of waiting on.
    std::vector<Work> work;
    {
      std::unique_lock lock(mu_);
      const auto due = [&] {
        for (const auto& p : peers_) {
          if (p.watching && p.socket->is_open() && p.strips_wanted->load() != p.strips_done) return true;
        }
        return false;
      };
      strips_cv_.wait(lock, [&] { return stop_ || due(); });
      if (stop_) return;
      for (auto& p : peers_) {
        const uint64_t wanted = p.strips_wanted->load();
        if (!p.watching || !p.socket->is_open() || wanted == p.strips_done) continue;
        p.strips_done = wanted;
        work.push_back(Work{p.socket, p.visitor, p.watch_set_at < wanted ? p.watch : std::vector<WatchedStrip>{},
                            wanted, p.strips_wanted});
      }
    }
    // Pages watching the same strips of the same snapshot share its render
    // (the render cache is single-flight), so later peers mostly find them
    // ready. Once a snapshot is overtaken, the remaining peers waiting for it
    // get only strips_done.
    const std::vector<WatchedStrip> none;
    std::vector<uint64_t> overtaken;
    for (const auto& w : work) {
      const bool skip = std::find(overtaken.begin(), overtaken.end(), w.sequence) != overtaken.end();
      try {
        if (!push_strips(*w.socket, w.visitor, skip ? none : w.watch, w.sequence, *w.wanted)) {
          overtaken.push_back(w.sequence);
        }
      } catch (const std::exception& e) {
        std::cerr << "[nansense] strip push: " << e.what() << "\n";
      }
    }
  }
}

bool PushChannel::push_strips(WebSocketPeer& peer, const std::string& visitor, const std::vector<WatchedStrip>& watch,
                              uint64_t sequence, const std::atomic<uint64_t>& wanted) {
  VisitorScope scope(visitor);
  json failed = json::array();
  bool overtaken = false;
  for (const auto& strip : watch) {
    if (stop_ || !peer.is_open()) return true;
    if (wanted.load() != sequence) {
      overtaken = true;
      break;
    }
    try {
      // render_strip draws the newest snapshot the visitor is shown: a newer
      // sequence means this one was overtaken while we rendered.
      auto picture = controller_.views().render_strip(strip.layer, strip.kind, strip.options, sequence);
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
  uint64_t last_sequence = 0;
  std::string last_architecture;
  bool running = true;
  uint64_t experiments_seen = 0;
  // What one view (the shared one, or a visitor's own) shows now.
  struct View {
    std::string status;
    std::string snapshot;  // the snapshot event
    uint64_t sequence = 0;
  };
  const auto view_of = [](const Status& status) {
    View v;
    v.status = dump({{"type", "status"}, {"status", to_json(status)}});
    v.sequence = status.snapshot_sequence;
    // The batch size lets a page ask for its chosen sample's pictures
    // before it has fetched the snapshot's summary.
    v.snapshot = dump({{"type", "snapshot"},
                       {"sequence", status.snapshot_sequence},
                       {"position", to_json(status.snapshot_position)},
                       {"batch_size", status.snapshot_batch_size},
                       {"samples_kept", status.snapshot_samples_kept}});
    return v;
  };
  while (!stop_) {
    seen = controller_.run_control().wait_for_change(seen, running ? kRunningInterval : kIdleInterval);
    if (stop_) break;
    try {
      const Status status = controller_.run_control().get_status();
      running = status.state == RunState::kRunning;
      const View shared = view_of(status);
      if (shared.sequence != last_sequence) {
        last_sequence = shared.sequence;
        std::string architecture = dump(to_json(controller_.views().get_architecture()));
        if (architecture != last_architecture) {
          last_architecture = std::move(architecture);
          std::lock_guard lock(mu_);
          ++architecture_version_;
        }
      }
      // The visitors shown a view of their own (a locked session's probes).
      std::vector<std::string> visitors;
      {
        std::lock_guard lock(mu_);
        for (const auto& p : peers_) {
          if (!p.visitor.empty() && std::find(visitors.begin(), visitors.end(), p.visitor) == visitors.end()) {
            visitors.push_back(p.visitor);
          }
        }
      }
      std::map<std::string, View> own;
      for (const auto& visitor : visitors) {
        if (!controller_.has_own_view(visitor)) continue;
        VisitorScope scope(visitor);
        own.emplace(visitor, view_of(controller_.run_control().get_status()));
      }
      bool strips = false;
      {
        std::lock_guard lock(mu_);
        peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.socket->is_open(); }),
                     peers_.end());
        for (auto& p : peers_) {
          auto it = own.find(p.visitor);
          const View& v = it != own.end() ? it->second : shared;
          if (v.status != p.last_status) {
            p.socket->send(v.status);
            p.last_status = v.status;
          }
          if (v.sequence != p.announced) {
            json event = json::parse(v.snapshot);
            event["architecture_changed"] = p.architecture_seen != architecture_version_;
            p.architecture_seen = architecture_version_;
            p.socket->send(dump(event));
            // Then the strips it watches, rendered off this thread.
            p.announced = v.sequence;
            p.strips_wanted->store(v.sequence);
            strips = true;
          }
        }
        if (strips) strips_cv_.notify_all();
      }
      // Experiments' progress and outcomes, each result as it changed.
      for (const auto& result : controller_.experiments().experiment_changes(experiments_seen)) {
        const std::string text = dump({{"type", "experiment"}, {"result", to_json(result)}});
        std::lock_guard lock(mu_);
        for (const auto& p : peers_) p.socket->send(text);
      }
    } catch (const std::exception& e) {
      // A failed view must not end the channel: pages keep their last state.
      std::cerr << "[nansense] push channel: " << e.what() << "\n";
    }
  }
}

}  // namespace nansense::server
