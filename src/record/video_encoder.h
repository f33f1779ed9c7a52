// One H.264 MP4 file written frame by frame with FFmpeg's libraries
// (libavcodec's libx264, libavformat's MP4 muxer), in-process. The file is a
// fragmented MP4 (an empty moov, then one moof+mdat per frame), flushed to
// the operating system after every frame: a process killed mid-recording
// leaves a file players open up to the last frame written, and finish() only
// adds the closing index. Not thread-safe: one thread (a Recording's
// encoder thread) owns it.
#pragma once

#include <memory>
#include <string>

#include "render/image.h"

namespace nansense::record {

class VideoEncoder {
 public:
  // Creates `path` (replacing nothing: the caller picks a free name) for
  // frames of width x height (both even) at `fps`. Throws
  // std::runtime_error naming the path and FFmpeg's reason.
  VideoEncoder(const std::string& path, int width, int height, int fps);
  ~VideoEncoder();  // finishes when finish() was not called, ignoring errors
  VideoEncoder(const VideoEncoder&) = delete;
  VideoEncoder& operator=(const VideoEncoder&) = delete;

  // Encodes one frame of exactly width x height (alpha is composited over
  // white) and writes it out. Throws std::runtime_error (a full disk, an
  // unwritable file) after which the encoder takes no more frames.
  void add(const render::Image& frame);
  // Drains the encoder, writes the trailer, flushes and fsyncs. Throws
  // std::runtime_error; the file then still holds every fragment written.
  void finish();

  int width() const;
  int height() const;
  int64_t frames() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace nansense::record
