// A fragmented MP4 (ISO/IEC 14496-12 and -15) of one H.264 video track,
// written as the frames come: ftyp and a moov that holds no samples (only the
// stream's parameter sets, in avcC) before the first frame, then one
// moof+mdat per frame, each handed to the operating system before
// write_frame returns. A process killed mid-recording leaves a file that
// players open up to its last frame; finish() only fills in the duration
// (mehd) and appends the random access index (mfra). The layout is the one
// FFmpeg writes with movflags=frag_keyframe+empty_moov+default_base_moof,
// which browsers, players and slide software open.
// Not thread-safe: one thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nansense::record {

class Mp4Writer {
 public:
  // Opens `path` (the caller picked a free name; emptied) for a video of
  // width x height at `fps` frames a second. Throws std::runtime_error
  // naming the path and the system's reason.
  Mp4Writer(const std::string& path, int width, int height, int fps);
  ~Mp4Writer();  // closes the file; does not finish it
  Mp4Writer(const Mp4Writer&) = delete;
  Mp4Writer& operator=(const Mp4Writer&) = delete;

  // The stream's sequence and picture parameter sets (NAL units without
  // start codes), written once before the first frame.
  void write_header(std::span<const uint8_t> sps, std::span<const uint8_t> pps);
  // One frame: its NAL units, each prefixed by its 4-byte big-endian length
  // (the avcC layout). A keyframe is an IDR picture players can seek to.
  void write_frame(std::span<const uint8_t> sample, bool keyframe);
  // Writes the duration and the random access index, then fsyncs. Throws
  // std::runtime_error; the file then still holds every frame written.
  void finish();

  bool has_header() const { return header_written_; }

 private:
  void write_all(const std::vector<uint8_t>& bytes);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  int width_, height_;
  uint32_t timescale_;        // the track's ticks a second
  uint32_t frame_ticks_;      // one frame's duration in them
  uint64_t offset_ = 0;       // bytes written so far
  uint64_t mehd_offset_ = 0;  // where the fragment duration is patched in
  bool header_written_ = false;
  uint32_t frames_ = 0;
  struct Keyframe {
    uint64_t time, moof_offset;
  };
  std::vector<Keyframe> keyframes_;
};

}  // namespace nansense::record
