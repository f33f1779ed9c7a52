// Ctrl-C / SIGTERM as an ordinary event on a thread of its own.
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

// A signal handler may not take locks, yet stopping means calling into the
// session (to release a paused loop). So SIGINT and SIGTERM are blocked and a
// thread picks them up with sigwait, where any code may run.
class StopSignal {
 public:
  // Blocks SIGINT and SIGTERM in the calling thread. Construct it first thing
  // in main: threads started later inherit the mask, so none of them can
  // receive the signal in the watcher's place.
  StopSignal();
  // Wakes and joins the watcher without running the callback if no signal came.
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Starts the watcher; `on_stop` runs on it once, when a signal arrives.
  void watch(std::function<void()> on_stop);
  bool requested() const { return requested_.load(); }
  // Blocks until a signal has arrived and `on_stop` has returned.
  void wait();

 private:
  sigset_t signals_;
  std::thread watcher_;
  std::atomic<bool> requested_{false};
  std::atomic<bool> shutting_down_{false};
};
