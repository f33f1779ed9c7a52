#include "record/recording.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include "record/frame.h"
#include "record/video_encoder.h"

namespace nansense::record {

void yield_to_training() {
  // On Linux a nice value is per thread (its id as the "process").
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

Recording::Recording(std::string path, int fps, size_t queue_capacity) : fps_(fps), capacity_(queue_capacity) {
  info_.path = std::move(path);
  thread_ = std::thread([this] { encode_loop(); });
}

Recording::~Recording() { finish(); }

bool Recording::push(render::Image page) {
  std::lock_guard lock(mu_);
  if (stopping_ || !info_.error.empty() || queue_.size() >= capacity_) {
    ++info_.dropped;
    return false;
  }
  queue_.push_back(std::move(page));
  wake_.notify_one();
  return true;
}

void Recording::encode_loop() {
  yield_to_training();
  std::unique_lock lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (discarding_) break;
    if (queue_.empty()) break;  // stopping, nothing left
    render::Image page = std::move(queue_.front());
    queue_.pop_front();
    if (!info_.error.empty()) {
      ++info_.dropped;
      continue;
    }
    lock.unlock();
    std::string error;
    int width = 0, height = 0;
    try {
      if (!encoder_) {
        frame_size_for(page, width, height);
        encoder_ = std::make_unique<VideoEncoder>(info_.path, width, height, fps_);
      }
      encoder_->add(fit_frame(page, encoder_->width(), encoder_->height()));
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (encoder_) {
      info_.width = encoder_->width();
      info_.height = encoder_->height();
      info_.frames = encoder_->frames();
    }
    if (!error.empty()) {
      info_.error = error;
      ++info_.dropped;
    }
  }
  // Finishing happens here, on the thread that owns the encoder.
  if (!discarding_ && encoder_ && info_.error.empty()) {
    lock.unlock();
    std::string error;
    try {
      encoder_->finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty()) info_.error = error;
  }
  lock.unlock();
  encoder_.reset();
}

RecordingInfo Recording::finish() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  info_.finished = true;
  return info_;
}

void Recording::discard() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    discarding_ = true;
    info_.dropped += static_cast<int64_t>(queue_.size());
    queue_.clear();
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  std::filesystem::remove(info_.path, ec);
  std::lock_guard lock(mu_);
  info_.finished = true;
}

RecordingInfo Recording::info() const {
  std::lock_guard lock(mu_);
  return info_;
}

}  // namespace nansense::record
