#include "record/mp4_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nansense::record {

namespace {

// Big-endian box bytes; open() starts a box whose size close() fills in.
class Boxes {
 public:
  std::vector<uint8_t> bytes;

  void u8(uint32_t v) { bytes.push_back(static_cast<uint8_t>(v)); }
  void u16(uint32_t v) {
    u8(v >> 8);
    u8(v);
  }
  void u32(uint32_t v) {
    u16(v >> 16);
    u16(v & 0xffff);
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v >> 32));
    u32(static_cast<uint32_t>(v));
  }
  void zeros(size_t n) { bytes.insert(bytes.end(), n, 0); }
  void append(std::span<const uint8_t> data) { bytes.insert(bytes.end(), data.begin(), data.end()); }
  void fourcc(const char* type) { bytes.insert(bytes.end(), type, type + 4); }
  size_t open(const char* type) {
    const size_t start = bytes.size();
    u32(0);
    fourcc(type);
    return start;
  }
  // A "full box": a version and 24 bits of flags after the type.
  size_t open_full(const char* type, uint32_t version, uint32_t flags) {
    const size_t start = open(type);
    u32(version << 24 | flags);
    return start;
  }
  void close(size_t start) {
    const auto size = static_cast<uint32_t>(bytes.size() - start);
    for (int i = 0; i < 4; ++i) bytes[start + i] = static_cast<uint8_t>(size >> (24 - 8 * i));
  }
  void matrix() {  // the identity, in 16.16 and 2.30 fixed point
    for (uint32_t v : {0x00010000u, 0u, 0u, 0u, 0x00010000u, 0u, 0u, 0u, 0x40000000u}) u32(v);
  }
};

constexpr uint32_t kTrackId = 1;
constexpr uint32_t kMovieTimescale = 1000;
// trun/trex sample flags: an IDR picture depends on nothing; any other picture
// depends on others and is no sync sample.
constexpr uint32_t kSyncSample = 0x02000000;
constexpr uint32_t kNonSyncSample = 0x01010000;

}  // namespace

Mp4Writer::Mp4Writer(const std::string& path, int width, int height, int fps)
    : path_(path), width_(width), height_(height) {
  // Ticks of at least 1/10000 s, as FFmpeg's muxer picks, with whole ticks a frame.
  frame_ticks_ = static_cast<uint32_t>((10000 + fps - 1) / fps);
  timescale_ = frame_ticks_ * static_cast<uint32_t>(fps);
  // The caller reserved the name by creating the file (record/files.h).
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("creating");
}

Mp4Writer::~Mp4Writer() {
  if (fd_ >= 0) ::close(fd_);
}

void Mp4Writer::fail(const std::string& what) const {
  throw std::runtime_error(what + " " + path_ + ": " + std::strerror(errno));
}

void Mp4Writer::write_all(const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing");
    done += static_cast<size_t>(n);
  }
  offset_ += bytes.size();
}

void Mp4Writer::write_header(std::span<const uint8_t> sps, std::span<const uint8_t> pps) {
  if (sps.size() < 4 || pps.empty())
    throw std::runtime_error("the H.264 stream of " + path_ + " has no parameter sets");
  Boxes b;
  size_t box = b.open("ftyp");
  b.fourcc("iso5");
  b.u32(512);
  for (const char* brand : {"iso5", "iso6", "avc1", "mp41"}) b.fourcc(brand);
  b.close(box);

  const size_t moov = b.open("moov");
  box = b.open_full("mvhd", 0, 0);
  b.u32(0);  // creation and modification times: none
  b.u32(0);
  b.u32(kMovieTimescale);
  b.u32(0);           // duration: in the fragments (mehd)
  b.u32(0x00010000);  // rate 1.0
  b.u16(0x0100);      // volume 1.0
  b.zeros(10);
  b.matrix();
  b.zeros(24);
  b.u32(kTrackId + 1);  // next track ID
  b.close(box);

  const size_t trak = b.open("trak");
  box = b.open_full("tkhd", 0, 3);  // enabled, in the movie
  b.u32(0);
  b.u32(0);
  b.u32(kTrackId);
  b.u32(0);
  b.u32(0);  // duration
  b.zeros(8);
  b.u16(0);  // layer
  b.u16(0);  // alternate group
  b.u16(0);  // volume: a video track
  b.u16(0);
  b.matrix();
  b.u32(static_cast<uint32_t>(width_) << 16);
  b.u32(static_cast<uint32_t>(height_) << 16);
  b.close(box);

  const size_t mdia = b.open("mdia");
  box = b.open_full("mdhd", 0, 0);
  b.u32(0);
  b.u32(0);
  b.u32(timescale_);
  b.u32(0);
  b.u16(0x55c4);  // language "und"
  b.u16(0);
  b.close(box);
  box = b.open_full("hdlr", 0, 0);
  b.u32(0);
  b.fourcc("vide");
  b.zeros(12);
  for (char c : std::string("VideoHandler")) b.u8(static_cast<uint8_t>(c));
  b.u8(0);
  b.close(box);

  const size_t minf = b.open("minf");
  box = b.open_full("vmhd", 0, 1);
  b.zeros(8);  // graphics mode copy, no opcolor
  b.close(box);
  const size_t dinf = b.open("dinf");
  box = b.open_full("dref", 0, 0);
  b.u32(1);
  const size_t url = b.open_full("url ", 0, 1);  // the data is in this file
  b.close(url);
  b.close(box);
  b.close(dinf);

  const size_t stbl = b.open("stbl");
  const size_t stsd = b.open_full("stsd", 0, 0);
  b.u32(1);
  const size_t avc1 = b.open("avc1");
  b.zeros(6);
  b.u16(1);  // data reference index
  b.zeros(16);
  b.u16(static_cast<uint32_t>(width_));
  b.u16(static_cast<uint32_t>(height_));
  b.u32(0x00480000);  // 72 dpi
  b.u32(0x00480000);
  b.u32(0);
  b.u16(1);     // frames per sample
  b.zeros(32);  // compressor name
  b.u16(0x18);  // depth: colour
  b.u16(0xffff);
  const size_t avcc = b.open("avcC");
  b.u8(1);       // configuration version
  b.u8(sps[1]);  // profile, its compatibility flags, level: as the SPS says
  b.u8(sps[2]);
  b.u8(sps[3]);
  b.u8(0xfc | 3);  // NAL lengths of 4 bytes
  b.u8(0xe0 | 1);  // one SPS
  b.u16(static_cast<uint32_t>(sps.size()));
  b.append(sps);
  b.u8(1);  // one PPS
  b.u16(static_cast<uint32_t>(pps.size()));
  b.append(pps);
  b.close(avcc);
  b.close(avc1);
  b.close(stsd);
  // No samples here: they are in the fragments.
  for (const char* empty : {"stts", "stsc", "stco"}) {
    box = b.open_full(empty, 0, 0);
    b.u32(0);
    b.close(box);
  }
  box = b.open_full("stsz", 0, 0);
  b.u32(0);
  b.u32(0);
  b.close(box);
  b.close(stbl);
  b.close(minf);
  b.close(mdia);
  b.close(trak);

  const size_t mvex = b.open("mvex");
  box = b.open_full("mehd", 1, 0);
  mehd_offset_ = offset_ + b.bytes.size();
  b.u64(0);  // the fragments' duration, written by finish()
  b.close(box);
  box = b.open_full("trex", 0, 0);
  b.u32(kTrackId);
  b.u32(1);  // sample description
  b.u32(frame_ticks_);
  b.u32(0);
  b.u32(kNonSyncSample);
  b.close(box);
  b.close(mvex);
  b.close(moov);

  write_all(b.bytes);
  header_written_ = true;
}

void Mp4Writer::write_frame(std::span<const uint8_t> sample, bool keyframe) {
  if (!header_written_) throw std::runtime_error("the MP4 " + path_ + " has no header before its first frame");
  const uint64_t moof_offset = offset_;
  const uint64_t time = static_cast<uint64_t>(frames_) * frame_ticks_;
  Boxes b;
  const size_t moof = b.open("moof");
  size_t box = b.open_full("mfhd", 0, 0);
  b.u32(frames_ + 1);  // sequence number
  b.close(box);
  const size_t traf = b.open("traf");
  box = b.open_full("tfhd", 0, 0x020000 | 0x08 | 0x20);  // base is the moof; default duration and flags
  b.u32(kTrackId);
  b.u32(frame_ticks_);
  b.u32(kNonSyncSample);
  b.close(box);
  box = b.open_full("tfdt", 1, 0);
  b.u64(time);
  b.close(box);
  box = b.open_full("trun", 0, 0x01 | 0x04 | 0x200);  // data offset, first sample's flags, sizes
  b.u32(1);
  const size_t data_offset = b.bytes.size();
  b.u32(0);
  b.u32(keyframe ? kSyncSample : kNonSyncSample);
  b.u32(static_cast<uint32_t>(sample.size()));
  b.close(box);
  b.close(traf);
  b.close(moof);
  // The sample starts after the moof and the mdat's 8-byte header.
  const auto start = static_cast<uint32_t>(b.bytes.size() + 8);
  for (int i = 0; i < 4; ++i) b.bytes[data_offset + i] = static_cast<uint8_t>(start >> (24 - 8 * i));
  b.u32(static_cast<uint32_t>(sample.size() + 8));
  b.fourcc("mdat");
  b.append(sample);
  write_all(b.bytes);
  if (keyframe) keyframes_.push_back({time, moof_offset});
  ++frames_;
}

void Mp4Writer::finish() {
  if (header_written_) {
    Boxes b;
    const size_t mfra = b.open("mfra");
    size_t box = b.open_full("tfra", 1, 0);
    b.u32(kTrackId);
    b.u32(0);  // traf, trun and sample numbers of one byte each
    b.u32(static_cast<uint32_t>(keyframes_.size()));
    for (const Keyframe& k : keyframes_) {
      b.u64(k.time);
      b.u64(k.moof_offset);
      b.u8(1);
      b.u8(1);
      b.u8(1);
    }
    b.close(box);
    box = b.open_full("mfro", 0, 0);
    b.u32(static_cast<uint32_t>(b.bytes.size() - mfra + 4));
    b.close(box);
    b.close(mfra);
    write_all(b.bytes);

    Boxes duration;
    duration.u64(static_cast<uint64_t>(frames_) * frame_ticks_);
    if (::pwrite(fd_, duration.bytes.data(), 8, static_cast<off_t>(mehd_offset_)) != 8) fail("writing");
  }
  // The bytes reach the disk before the recording is reported saved (a
  // file system that cannot sync is no write error).
  ::fsync(fd_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("closing");
  }
  fd_ = -1;
}

}  // namespace nansense::record
