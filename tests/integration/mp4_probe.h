// What FFmpeg's own libraries read back from an MP4 the recorder wrote: the
// codec, size, frame count and duration, and a frame decoded to RGB.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/macros.h>
#include <libswscale/swscale.h>
}

#include <algorithm>

#include <string>
#include <vector>

namespace nansense::testing {

struct Mp4Probe {
  bool opened = false;
  std::string error;
  std::string codec;
  int width = 0, height = 0;
  int64_t packets = 0;       // demuxed video packets
  int64_t decoded = 0;       // frames the decoder returned
  double duration = 0;       // seconds, from the last packet's end
  std::vector<uint8_t> rgb;  // frame `want` (or the last) as RGB24
};

// Opens `path`, demuxes every packet and decodes them, keeping frame `want`
// (-1: the last) as RGB.
inline Mp4Probe probe_mp4(const std::string& path, int64_t want = -1) {
  Mp4Probe p;
  AVFormatContext* fmt = nullptr;
  int rc = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr);
  if (rc < 0) {
    char text[256];
    av_strerror(rc, text, sizeof text);
    p.error = text;
    return p;
  }
  if (avformat_find_stream_info(fmt, nullptr) < 0) p.error = "no stream info";
  const int index = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (index < 0) {
    p.error = "no video stream";
    avformat_close_input(&fmt);
    return p;
  }
  p.opened = true;
  AVStream* stream = fmt->streams[index];
  p.codec = avcodec_get_name(stream->codecpar->codec_id);
  p.width = stream->codecpar->width;
  p.height = stream->codecpar->height;
  const AVCodec* decoder = avcodec_find_decoder(stream->codecpar->codec_id);
  AVCodecContext* dec = avcodec_alloc_context3(decoder);
  avcodec_parameters_to_context(dec, stream->codecpar);
  avcodec_open2(dec, decoder, nullptr);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  int64_t end_pts = 0;
  auto take = [&] {
    while (avcodec_receive_frame(dec, frame) == 0) {
      if (want < 0 || p.decoded == want) {
        // swscale writes whole aligned blocks: a padded buffer, then packed rows.
        const int padded = FFALIGN(3 * p.width, 64);
        std::vector<uint8_t> out(static_cast<size_t>(padded) * p.height + 64);
        SwsContext* sws = sws_getContext(frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                         p.width, p.height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
        uint8_t* dst[1] = {out.data()};
        const int stride[1] = {padded};
        sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, stride);
        sws_freeContext(sws);
        p.rgb.resize(static_cast<size_t>(p.width) * p.height * 3);
        for (int y = 0; y < p.height; ++y) {
          std::copy_n(out.data() + static_cast<size_t>(y) * padded, 3 * p.width, p.rgb.data() + y * 3 * p.width);
        }
      }
      ++p.decoded;
    }
  };
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == index) {
      ++p.packets;
      end_pts = std::max<int64_t>(end_pts, pkt->pts + pkt->duration);
      avcodec_send_packet(dec, pkt);
      take();
    }
    av_packet_unref(pkt);
  }
  avcodec_send_packet(dec, nullptr);
  take();
  p.duration = end_pts * av_q2d(stream->time_base);
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&dec);
  avformat_close_input(&fmt);
  return p;
}

}  // namespace nansense::testing
