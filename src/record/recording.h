// One recording in progress: frames handed over by the thread that draws
// them go through a bounded queue to an encoder thread of its own, so a slow
// encoder (or disk) drops frames, counted, instead of holding anyone up. The
// video's size is fixed by the first frame (record/frame.h). An I/O error
// (a full disk) stops the recording and keeps its message; what was written
// until then stays a playable fragmented MP4.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "render/image.h"

namespace nansense::record {

class VideoEncoder;

// Lowers the calling thread's CPU priority (nice 10): a recording's drawing
// and encoding yield to the training loop when cores are short, and fall
// behind (dropping frames) instead of slowing it.
void yield_to_training();

struct RecordingInfo {
  std::string path;
  int64_t frames = 0;         // written to the file
  int64_t dropped = 0;        // not written: the queue was full, or the recording had failed
  int width = 0, height = 0;  // 0 before the first frame
  std::string error;          // empty while sound
  bool finished = false;
};

class Recording {
 public:
  // Frames per second of the video, and how many frames may wait for the encoder.
  static constexpr int kFps = 10;
  static constexpr size_t kQueueCapacity = 8;

  // Nothing is created until the first frame.
  explicit Recording(std::string path, int fps = kFps, size_t queue_capacity = kQueueCapacity);
  ~Recording();  // finish()
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  // Hands a page over (record/frame.h's compose()); false when it was dropped.
  bool push(render::Image page);
  // Encodes what is queued, writes the closing index and joins the encoder
  // thread. Idempotent. The info's error says what went wrong, if anything.
  RecordingInfo finish();
  // Stops at once, dropping what is queued, and removes the file.
  void discard();
  RecordingInfo info() const;

 private:
  void encode_loop();

  const int fps_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<render::Image> queue_;
  bool stopping_ = false;
  bool discarding_ = false;
  RecordingInfo info_;
  std::unique_ptr<VideoEncoder> encoder_;  // the encoder thread's only
  std::thread thread_;
};

}  // namespace nansense::record
