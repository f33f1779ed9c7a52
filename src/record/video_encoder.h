// One H.264 MP4 file written frame by frame, in-process: pictures encoded by
// OpenH264 (Cisco's BSD-licensed encoder; Constrained Baseline profile, which
// every browser decodes), stored by Mp4Writer as a fragmented MP4 (an empty
// moov, then one moof+mdat per frame) handed to the operating system after
// every frame: a process killed mid-recording leaves a file players open up
// to the last frame written, and finish() only adds the closing index.
// Neither is GPL code (FFmpeg's libx264 path was): the binary wheel bundles
// them under an MIT package (docs/install.md, "What the wheel bundles").
// Not thread-safe: one thread (a Recording's encoder thread) owns it.
#pragma once

#include <memory>
#include <string>

#include "render/image.h"

namespace nansense::record {

class VideoEncoder {
 public:
  // Creates `path` (replacing nothing: the caller picks a free name) for
  // frames of width x height (both even) at `fps`. Throws
  // std::runtime_error naming the path and the reason.
  VideoEncoder(const std::string& path, int width, int height, int fps);
  ~VideoEncoder();  // finishes when finish() was not called, ignoring errors
  VideoEncoder(const VideoEncoder&) = delete;
  VideoEncoder& operator=(const VideoEncoder&) = delete;

  // Encodes one frame of exactly width x height (alpha is composited over
  // white) and writes it out. Throws std::runtime_error (a full disk, an
  // unwritable file) after which the encoder takes no more frames.
  void add(const render::Image& frame);
  // Writes the closing index, flushes and fsyncs. Throws std::runtime_error;
  // the file then still holds every frame written.
  void finish();

  int width() const;
  int height() const;
  int64_t frames() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace nansense::record
