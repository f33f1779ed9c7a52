#include "record/video_encoder.h"

#include <wels/codec_api.h>

#include <optional>
#include <stdexcept>
#include <vector>

#include "record/mp4_writer.h"

namespace nansense::record {

namespace {

// The quantiser of every picture (rate control off): pictures of values, text
// and thin lines stay within a few levels of the PNG (the recordings test
// compares them), at a few kB a frame.
constexpr int kQuantiser = 14;

// RGB to BT.601 limited-range Y'CbCr, the colours players assume for an
// H.264 stream that states none (as FFmpeg's swscale converted before).
inline uint8_t luma(int r, int g, int b) { return static_cast<uint8_t>(((66 * r + 129 * g + 25 * b + 128) >> 8) + 16); }
inline uint8_t blue_difference(int r, int g, int b) {
  return static_cast<uint8_t>(((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128);
}
inline uint8_t red_difference(int r, int g, int b) {
  return static_cast<uint8_t>(((112 * r - 94 * g - 18 * b + 128) >> 8) + 128);
}

// The bytes after a NAL unit's Annex B start code (00 00 01 or 00 00 00 01).
std::span<const uint8_t> strip_start_code(const uint8_t* data, int size) {
  int skip = 0;
  while (skip < size && data[skip] == 0) ++skip;
  if (skip >= 2 && skip < size && data[skip] == 1)
    ++skip;
  else
    skip = 0;
  return {data + skip, static_cast<size_t>(size - skip)};
}

// The sequence parameter set with the frame rate in its VUI (timing_info):
// what FFmpeg and the players built on it take each frame's duration from
// (libx264 writes it; OpenH264 does not, and a short video's last frame then
// has no duration). Rewritten bit by bit: emulation prevention bytes removed,
// timing_info set (adding a VUI when there is none), put back.
std::vector<uint8_t> sps_with_frame_rate(std::span<const uint8_t> sps, int fps) {
  std::vector<uint8_t> rbsp;
  for (size_t i = 1; i < sps.size(); ++i) {
    if (i >= 3 && sps[i] == 3 && sps[i - 1] == 0 && sps[i - 2] == 0) continue;
    rbsp.push_back(sps[i]);
  }
  std::vector<bool> bits;
  for (uint8_t byte : rbsp) {
    for (int b = 7; b >= 0; --b) bits.push_back((byte >> b) & 1);
  }
  while (!bits.empty() && !bits.back()) bits.pop_back();  // the trailing stop bit and padding
  if (bits.empty()) return {sps.begin(), sps.end()};
  bits.pop_back();
  size_t pos = 0;
  auto u = [&](int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 1 | (pos < bits.size() && bits[pos++]);
    return v;
  };
  auto ue = [&] {
    int zeros = 0;
    while (pos < bits.size() && !bits[pos]) ++zeros, ++pos;
    ++pos;
    return (1u << zeros) - 1 + u(zeros);
  };
  const uint32_t profile = u(8);
  u(16);  // constraint flags, level
  ue();   // id
  if (profile == 100 || profile == 110 || profile == 122 || profile == 244 || profile == 44 || profile == 83 ||
      profile == 86 || profile == 118 || profile == 128) {
    return {sps.begin(), sps.end()};  // OpenH264 writes Baseline: nothing else is rewritten
  }
  ue();  // log2_max_frame_num_minus4
  const uint32_t poc_type = ue();
  if (poc_type == 0) {
    ue();
  } else if (poc_type == 1) {
    u(1);
    ue();
    ue();
    const uint32_t cycle = ue();
    for (uint32_t i = 0; i < cycle; ++i) ue();
  }
  ue();  // max_num_ref_frames
  u(1);
  ue();  // width, height in macroblocks
  ue();
  if (!u(1)) u(1);  // frame_mbs_only, mb_adaptive_frame_field
  u(1);             // direct_8x8_inference
  if (u(1)) {       // frame cropping
    for (int i = 0; i < 4; ++i) ue();
  }
  std::vector<bool> timing;
  auto put = [&](uint32_t v, int n) {
    for (int i = n - 1; i >= 0; --i) timing.push_back((v >> i) & 1);
  };
  put(1, 1);                                // timing_info_present
  put(1, 32);                               // num_units_in_tick
  put(2 * static_cast<uint32_t>(fps), 32);  // time_scale: two ticks a frame
  put(1, 1);                                // fixed_frame_rate
  const size_t vui_flag = pos;
  if (!u(1)) {
    bits[vui_flag] = true;
    // No VUI yet: aspect ratio, overscan, video signal, chroma location none;
    // the timing; no HRD, pic_struct or bitstream restriction.
    std::vector<bool> vui(4, false);
    vui.insert(vui.end(), timing.begin(), timing.end());
    vui.insert(vui.end(), {false, false, false, false});
    bits.insert(bits.begin() + static_cast<ptrdiff_t>(pos), vui.begin(), vui.end());
  } else {
    if (u(1) && u(8) == 255) u(32);  // aspect ratio (extended: two 16-bit sides)
    if (u(1)) u(1);                  // overscan
    if (u(1)) {                      // video signal type, colour description
      u(4);
      if (u(1)) u(24);
    }
    if (u(1)) {  // chroma location
      ue();
      ue();
    }
    if (pos >= bits.size() || bits[pos]) return {sps.begin(), sps.end()};  // timing already there
    bits.erase(bits.begin() + static_cast<ptrdiff_t>(pos));
    bits.insert(bits.begin() + static_cast<ptrdiff_t>(pos), timing.begin(), timing.end());
  }
  bits.push_back(true);  // the stop bit, then byte alignment
  while (bits.size() % 8) bits.push_back(false);
  std::vector<uint8_t> out{sps[0]};
  int zeros = 0;
  for (size_t i = 0; i < bits.size(); i += 8) {
    uint8_t byte = 0;
    for (int b = 0; b < 8; ++b) byte = static_cast<uint8_t>(byte << 1 | bits[i + b]);
    if (zeros >= 2 && byte <= 3) {  // emulation prevention
      out.push_back(3);
      zeros = 0;
    }
    out.push_back(byte);
    zeros = byte == 0 ? zeros + 1 : 0;
  }
  return out;
}

}  // namespace

struct VideoEncoder::State {
  std::string path;
  int width = 0, height = 0, fps = 10;
  int64_t frames = 0;
  bool finished = false;
  bool failed = false;
  ISVCEncoder* encoder = nullptr;
  std::optional<Mp4Writer> mp4;
  std::vector<uint8_t> y, u, v;  // the frame as I420
  std::vector<uint8_t> sps, pps, sample;

  [[noreturn]] void fail(const std::string& what) {
    failed = true;
    throw std::runtime_error(what);
  }

  void release() {
    if (encoder) {
      encoder->Uninitialize();
      WelsDestroySVCEncoder(encoder);
      encoder = nullptr;
    }
  }

  void to_i420(const render::Image& frame) {
    // Over white, as the pages show pictures; chroma from each 2x2 block's mean.
    auto rgb = [&](int x, int y, int& r, int& g, int& b) {
      const render::Rgba p = frame.at(x, y);
      const int a = p.a, w = 255 * (255 - a);
      r = (p.r * a + w) / 255;
      g = (p.g * a + w) / 255;
      b = (p.b * a + w) / 255;
    };
    const int half = width / 2;
    for (int y0 = 0; y0 < height; y0 += 2) {
      for (int x0 = 0; x0 < width; x0 += 2) {
        int sr = 0, sg = 0, sb = 0;
        for (int dy = 0; dy < 2; ++dy) {
          for (int dx = 0; dx < 2; ++dx) {
            int r, g, b;
            rgb(x0 + dx, y0 + dy, r, g, b);
            this->y[static_cast<size_t>(y0 + dy) * width + x0 + dx] = luma(r, g, b);
            sr += r;
            sg += g;
            sb += b;
          }
        }
        const size_t c = static_cast<size_t>(y0 / 2) * half + x0 / 2;
        u[c] = blue_difference((sr + 2) / 4, (sg + 2) / 4, (sb + 2) / 4);
        v[c] = red_difference((sr + 2) / 4, (sg + 2) / 4, (sb + 2) / 4);
      }
    }
  }

  // The encoded picture's NAL units, length-prefixed; its parameter sets kept
  // aside for the MP4's header (they stay in the sample entry, not the samples).
  void collect(const SFrameBSInfo& info) {
    sample.clear();
    for (int layer = 0; layer < info.iLayerNum; ++layer) {
      const SLayerBSInfo& l = info.sLayerInfo[layer];
      const uint8_t* at = l.pBsBuf;
      for (int i = 0; i < l.iNalCount; ++i) {
        const std::span<const uint8_t> nal = strip_start_code(at, l.pNalLengthInByte[i]);
        at += l.pNalLengthInByte[i];
        if (nal.empty()) continue;
        const int type = nal[0] & 0x1f;
        if (type == 7) {
          if (sps.empty()) sps.assign(nal.begin(), nal.end());
          continue;
        }
        if (type == 8) {
          if (pps.empty()) pps.assign(nal.begin(), nal.end());
          continue;
        }
        const auto n = static_cast<uint32_t>(nal.size());
        for (int shift : {24, 16, 8, 0}) sample.push_back(static_cast<uint8_t>(n >> shift));
        sample.insert(sample.end(), nal.begin(), nal.end());
      }
    }
  }
};

VideoEncoder::VideoEncoder(const std::string& path, int width, int height, int fps) : s_(std::make_unique<State>()) {
  if (width <= 0 || height <= 0 || width % 2 || height % 2) {
    throw std::runtime_error("video frames must have even, positive sides (got " + std::to_string(width) + "x" +
                             std::to_string(height) + ")");
  }
  State& s = *s_;
  s.path = path;
  s.width = width;
  s.height = height;
  s.fps = fps;
  try {
    s.mp4.emplace(path, width, height, fps);
    if (WelsCreateSVCEncoder(&s.encoder) != 0 || !s.encoder) {
      s.fail("creating the H.264 encoder (OpenH264) for " + path);
    }
    // OpenH264 warns on stderr by default: the training log is no place for it.
    int log_level = WELS_LOG_ERROR;
    s.encoder->SetOption(ENCODER_OPTION_TRACE_LEVEL, &log_level);
    SEncParamExt p;
    s.encoder->GetDefaultParams(&p);
    p.iUsageType = CAMERA_VIDEO_REAL_TIME;
    p.iPicWidth = width;
    p.iPicHeight = height;
    p.iRCMode = RC_OFF_MODE;  // a fixed quantiser: sharp pictures, no skipped frames
    p.iTargetBitrate = 50'000'000;
    p.iMaxBitrate = UNSPECIFIED_BIT_RATE;
    p.fMaxFrameRate = static_cast<float>(fps);
    p.iTemporalLayerNum = 1;
    p.iSpatialLayerNum = 1;
    p.uiIntraPeriod = static_cast<unsigned>(fps);  // a keyframe every second: seeking stays cheap
    p.iNumRefFrame = 1;
    p.iEntropyCodingModeFlag = 0;  // CAVLC: Constrained Baseline
    p.bEnableFrameSkip = false;
    p.bEnableDenoise = false;
    p.bEnableBackgroundDetection = false;
    p.bEnableAdaptiveQuant = false;
    p.bEnableSceneChangeDetect = false;
    p.bPrefixNalAddingCtrl = false;
    p.eSpsPpsIdStrategy = CONSTANT_ID;  // one SPS and PPS for the whole file (the sample entry's)
    p.iMinQp = kQuantiser;
    p.iMaxQp = kQuantiser;
    p.iMultipleThreadIdc = 1;  // the machine's cores belong to training
    SSpatialLayerConfig& layer = p.sSpatialLayers[0];
    layer.iVideoWidth = width;
    layer.iVideoHeight = height;
    layer.fFrameRate = static_cast<float>(fps);
    layer.iSpatialBitrate = p.iTargetBitrate;
    layer.iMaxSpatialBitrate = UNSPECIFIED_BIT_RATE;
    layer.uiProfileIdc = PRO_BASELINE;
    layer.iDLayerQp = kQuantiser;
    layer.sSliceArgument.uiSliceMode = SM_SINGLE_SLICE;
    if (s.encoder->InitializeExt(&p) != 0) {
      s.fail("configuring the H.264 encoder (OpenH264) for " + path + " (" + std::to_string(width) + "x" +
             std::to_string(height) + ")");
    }
    int format = videoFormatI420;
    s.encoder->SetOption(ENCODER_OPTION_DATAFORMAT, &format);
    s.y.resize(static_cast<size_t>(width) * height);
    s.u.resize(static_cast<size_t>(width / 2) * (height / 2));
    s.v.resize(s.u.size());
  } catch (...) {
    s.release();
    throw;
  }
}

VideoEncoder::~VideoEncoder() {
  if (!s_->finished && !s_->failed) {
    try {
      finish();
    } catch (const std::exception&) {
      // The destructor of a failed recording: the error was reported when it happened.
    }
  }
  s_->release();
}

void VideoEncoder::add(const render::Image& frame) {
  State& s = *s_;
  if (s.failed || s.finished) throw std::runtime_error("the recording " + s.path + " takes no more frames");
  if (frame.width != s.width || frame.height != s.height) {
    throw std::runtime_error("frame of " + std::to_string(frame.width) + "x" + std::to_string(frame.height) +
                             " given to a " + std::to_string(s.width) + "x" + std::to_string(s.height) + " video");
  }
  s.to_i420(frame);
  SSourcePicture picture{};
  picture.iColorFormat = videoFormatI420;
  picture.iPicWidth = s.width;
  picture.iPicHeight = s.height;
  picture.iStride[0] = s.width;
  picture.iStride[1] = picture.iStride[2] = s.width / 2;
  picture.pData[0] = s.y.data();
  picture.pData[1] = s.u.data();
  picture.pData[2] = s.v.data();
  picture.uiTimeStamp = s.frames * 1000 / s.fps;
  SFrameBSInfo info{};
  if (s.encoder->EncodeFrame(&picture, &info) != cmResultSuccess) s.fail("encoding a frame of " + s.path);
  if (info.eFrameType == videoFrameTypeSkip || info.eFrameType == videoFrameTypeInvalid) {
    s.fail("the H.264 encoder returned no picture for frame " + std::to_string(s.frames) + " of " + s.path);
  }
  s.collect(info);
  try {
    if (!s.mp4->has_header()) s.mp4->write_header(sps_with_frame_rate(s.sps, s.fps), s.pps);
    s.mp4->write_frame(s.sample, info.eFrameType == videoFrameTypeIDR);
  } catch (const std::runtime_error& e) {
    s.fail(e.what());
  }
  ++s.frames;
}

void VideoEncoder::finish() {
  State& s = *s_;
  if (s.finished) return;
  s.finished = true;
  if (s.failed) throw std::runtime_error("the recording " + s.path + " failed before it was finished");
  // OpenH264 holds no frames back (no B-frames, no look-ahead): nothing to drain.
  s.mp4->finish();
}

int VideoEncoder::width() const { return s_->width; }
int VideoEncoder::height() const { return s_->height; }
int64_t VideoEncoder::frames() const { return s_->frames; }

}  // namespace nansense::record
