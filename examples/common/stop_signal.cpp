#include "stop_signal.h"

#include <pthread.h>

StopSignal::StopSignal() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

StopSignal::~StopSignal() {
  if (!watcher_.joinable()) return;
  if (!requested_) {
    shutting_down_ = true;
    pthread_kill(watcher_.native_handle(), SIGTERM);
  }
  watcher_.join();
}

void StopSignal::watch(std::function<void()> on_stop) {
  watcher_ = std::thread([this, on_stop = std::move(on_stop)] {
    int signal = 0;
    sigwait(&signals_, &signal);
    if (shutting_down_) return;
    requested_ = true;
    on_stop();
  });
}

void StopSignal::wait() {
  if (watcher_.joinable()) watcher_.join();
}
