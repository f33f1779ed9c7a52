#include "record/video_encoder.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/macros.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <fcntl.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>

namespace nansense::record {

namespace {

std::string av_reason(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, text, sizeof text);
  return text;
}

}  // namespace

struct VideoEncoder::State {
  std::string path;
  int width = 0, height = 0, fps = 10;
  int64_t frames = 0;
  bool finished = false;
  bool failed = false;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVStream* stream = nullptr;
  AVFrame* yuv = nullptr;
  AVPacket* packet = nullptr;
  SwsContext* sws = nullptr;
  std::vector<uint8_t> rgb;
  int rgb_stride = 0;

  [[noreturn]] void fail(const std::string& what, int code) {
    failed = true;
    throw std::runtime_error(what + " " + path + ": " + av_reason(code));
  }

  // Writes every packet the encoder has ready, one fragment per frame.
  void drain() {
    while (true) {
      int rc = avcodec_receive_packet(codec, packet);
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) fail("encoding", rc);
      av_packet_rescale_ts(packet, codec->time_base, stream->time_base);
      packet->stream_index = stream->index;
      rc = av_write_frame(format, packet);
      av_packet_unref(packet);
      if (rc < 0) fail("writing", rc);
      // A null packet closes the current fragment: what a crash leaves ends
      // at this frame.
      rc = av_write_frame(format, nullptr);
      if (rc < 0) fail("writing", rc);
      avio_flush(format->pb);
      if (format->pb->error < 0) fail("writing", format->pb->error);
    }
  }

  void release() {
    if (sws) sws_freeContext(sws);
    if (yuv) av_frame_free(&yuv);
    if (packet) av_packet_free(&packet);
    if (codec) avcodec_free_context(&codec);
    if (format) {
      if (format->pb) avio_closep(&format->pb);
      avformat_free_context(format);
    }
    sws = nullptr;
    format = nullptr;
  }
};

VideoEncoder::VideoEncoder(const std::string& path, int width, int height, int fps) : s_(std::make_unique<State>()) {
  // libx264 prints its settings and statistics at FFmpeg's default level;
  // the training log is no place for them. A program that set its own level keeps it.
  static std::once_flag quiet;
  std::call_once(quiet, [] {
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_ERROR);
  });
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
    int rc = avformat_alloc_output_context2(&s.format, nullptr, "mp4", path.c_str());
    if (rc < 0 || !s.format) s.fail("creating the MP4 muxer for", rc);
    const AVCodec* h264 = avcodec_find_encoder_by_name("libx264");
    if (!h264) h264 = avcodec_find_encoder(AV_CODEC_ID_H264);
    if (!h264) throw std::runtime_error("FFmpeg has no H.264 encoder (install libavcodec with libx264)");
    s.stream = avformat_new_stream(s.format, nullptr);
    s.codec = avcodec_alloc_context3(h264);
    if (!s.stream || !s.codec) s.fail("allocating the encoder for", AVERROR(ENOMEM));
    s.codec->width = width;
    s.codec->height = height;
    s.codec->pix_fmt = AV_PIX_FMT_YUV420P;
    s.codec->time_base = AVRational{1, fps};
    s.codec->framerate = AVRational{fps, 1};
    s.codec->gop_size = fps;  // a keyframe every second: seeking stays cheap
    s.codec->max_b_frames = 0;
    s.codec->thread_count = 1;  // the machine's cores belong to training
    if (s.format->oformat->flags & AVFMT_GLOBALHEADER) s.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* codec_options = nullptr;
    av_dict_set(&codec_options, "preset", "ultrafast", 0);
    av_dict_set(&codec_options, "tune", "zerolatency", 0);  // a packet per frame, none held back
    av_dict_set(&codec_options, "crf", "12", 0);            // pictures of values: keep them sharp
    rc = avcodec_open2(s.codec, h264, &codec_options);
    av_dict_free(&codec_options);
    if (rc < 0) s.fail("opening the H.264 encoder for", rc);
    rc = avcodec_parameters_from_context(s.stream->codecpar, s.codec);
    if (rc < 0) s.fail("configuring", rc);
    s.stream->time_base = s.codec->time_base;
    s.stream->avg_frame_rate = s.codec->framerate;
    rc = avio_open(&s.format->pb, path.c_str(), AVIO_FLAG_WRITE);
    if (rc < 0) s.fail("opening", rc);
    AVDictionary* mux_options = nullptr;
    av_dict_set(&mux_options, "movflags", "frag_keyframe+empty_moov+default_base_moof", 0);
    rc = avformat_write_header(s.format, &mux_options);
    av_dict_free(&mux_options);
    if (rc < 0) s.fail("writing the header of", rc);
    avio_flush(s.format->pb);
    s.yuv = av_frame_alloc();
    s.packet = av_packet_alloc();
    if (!s.yuv || !s.packet) s.fail("allocating a frame for", AVERROR(ENOMEM));
    s.yuv->format = AV_PIX_FMT_YUV420P;
    s.yuv->width = width;
    s.yuv->height = height;
    rc = av_frame_get_buffer(s.yuv, 0);
    if (rc < 0) s.fail("allocating a frame for", rc);
    s.sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P, SWS_BILINEAR, nullptr,
                           nullptr, nullptr);
    if (!s.sws) s.fail("creating the colour conversion for", AVERROR(EINVAL));
    // swscale's SIMD reads whole aligned blocks: rows padded, room at the end.
    s.rgb_stride = FFALIGN(3 * width, 64);
    s.rgb.resize(static_cast<size_t>(s.rgb_stride) * height + 64);
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
  for (int y = 0; y < s.height; ++y) {
    uint8_t* row = s.rgb.data() + static_cast<size_t>(y) * s.rgb_stride;
    for (int x = 0; x < s.width; ++x) {
      const render::Rgba p = frame.at(x, y);
      // Over white, as the pages show pictures.
      const int a = p.a, w = 255 * (255 - a);
      row[x * 3 + 0] = static_cast<uint8_t>((p.r * a + w) / 255);
      row[x * 3 + 1] = static_cast<uint8_t>((p.g * a + w) / 255);
      row[x * 3 + 2] = static_cast<uint8_t>((p.b * a + w) / 255);
    }
  }
  int rc = av_frame_make_writable(s.yuv);
  if (rc < 0) s.fail("preparing a frame of", rc);
  const uint8_t* src[1] = {s.rgb.data()};
  const int stride[1] = {s.rgb_stride};
  sws_scale(s.sws, src, stride, 0, s.height, s.yuv->data, s.yuv->linesize);
  s.yuv->pts = s.frames;
  rc = avcodec_send_frame(s.codec, s.yuv);
  if (rc < 0) s.fail("encoding a frame of", rc);
  s.drain();
  ++s.frames;
}

void VideoEncoder::finish() {
  State& s = *s_;
  if (s.finished) return;
  s.finished = true;
  if (s.failed) throw std::runtime_error("the recording " + s.path + " failed before it was finished");
  int rc = avcodec_send_frame(s.codec, nullptr);
  if (rc < 0) s.fail("draining the encoder of", rc);
  s.drain();
  rc = av_write_trailer(s.format);
  if (rc < 0) s.fail("writing the trailer of", rc);
  avio_flush(s.format->pb);
  if (s.format->pb->error < 0) s.fail("writing", s.format->pb->error);
  avio_closep(&s.format->pb);
  // The bytes reach the disk before the recording is reported saved.
  const int fd = ::open(s.path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

int VideoEncoder::width() const { return s_->width; }
int VideoEncoder::height() const { return s_->height; }
int64_t VideoEncoder::frames() const { return s_->frames; }

}  // namespace nansense::record
