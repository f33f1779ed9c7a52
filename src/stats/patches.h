// Min/Max patches: per channel of a layer, the inputs that drove it highest
// and lowest over one (phase, epoch). Training thread only; every step is a
// tensor op on the activation's own device, with no device->host sync per
// batch (view() makes one batched copy when a view is published).
//
// Rankings (nansense::PatchRanking):
//   max_pixel / min_pixel      a sample's score is the channel's largest
//                              (smallest) value over its spatial positions;
//                              the gallery keeps the input crop around that
//                              position (the receptive field, approximated:
//                              side = ceil(input side / activation side) * 4,
//                              at least 10 px, at most the input's side);
//   max_average / min_average  the score is the channel's spatial mean, the
//                              gallery keeps the whole input (on a setting).
// For a flat [batch, features] activation each feature is a channel and the
// pixel rankings keep the whole input (there is no position to crop around).
//
// Per batch and ranking: the best position of every (sample, channel), a
// top-k over the batch, the k candidates' crops and activation maps gathered
// in one indexed read, then a top-k over the kept k plus the candidates. A
// sample enters a channel's gallery at most once an epoch (one candidate per
// sample and channel). A map holding a NaN scores NaN, which ranks below
// every real value.
//
// Memory: payloads are stored as uint8 (levels 0..254, 255 marks a
// non-finite value) with a float32 offset and step per (slot, channel), so
// per channel and ranking it holds k * (input channels * crop area +
// activation area + 68) bytes (PatchCollector::bytes()). At most
// kMaxPatchChannels channels are tracked, whatever the histograms' limit.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nansense/stats.h"
#include "stats/map_extremes.h"

namespace nansense::stats {

// The receptive field, approximated along one axis: for an input side `in`
// over an activation side `out`, ceil(in / out) * 4 input pixels, at least
// 10, at most `in`.
int64_t crop_side(int64_t in, int64_t out);
// Where a crop of `side` starts along that axis for activation position `p`:
// centred on p's footprint in the input, kept inside it.
int64_t crop_origin(int64_t p, int64_t in, int64_t out, int64_t side);

// The most channels a gallery tracks (the first ones): with the channel limit
// off a wide layer would otherwise keep every channel's crops.
constexpr int64_t kMaxPatchChannels = 64;

// The path PatchCollector::add takes for CPU tensors: plain loops over the
// candidates that enter (the default), or the tensor ops a device runs, so
// tests can hold the two to the same galleries.
enum class PatchPath { kCpuLoops, kTensorOps };
void set_patch_path(PatchPath path);

struct PatchSettings {
  int64_t samples = 5;         // slots per channel and ranking
  int64_t channel_limit = 16;  // channels tracked (the first ones); 0 = all
  bool averages = false;       // collect max_average / min_average too
  // What a session's statistics settings ask for.
  static PatchSettings from(const WatchPerformance& performance);
  // The channels a gallery of a layer with `channels` tracks (the first ones).
  int64_t tracked(int64_t channels) const;
};

class PatchCollector {
 public:
  explicit PatchCollector(PatchSettings settings);

  // Whether an input suits patches: [batch, 1 or 3, H, W], floating point.
  static bool image_like(const torch::Tensor& input);

  // Folds one batch: `activation` [B, C, h, w] or [B, C], `input` image-like
  // with the same B, `batch` the batch's index in its phase. The first call
  // fixes the shapes; a later batch whose shapes differ (a ragged last batch
  // is fine: only B may change) is skipped and counted in skipped().
  // Returns false, folding nothing, when the shapes do not suit (see
  // unsupported()).
  //
  // `maps`: the extremes of this very activation's maps, taken ahead where
  // its values already passed through the cache (the statistics' fold,
  // fold_on_cpu), for the first PatchSettings::tracked() channels; used when
  // they fit (filled, same samples, channels and map size) and the batch
  // takes the CPU loops with the pixel rankings alone, else the extremes are
  // taken here. The galleries are the same either way.
  bool add(const torch::Tensor& activation, const torch::Tensor& input, int64_t batch,
           const MapExtremesTable* maps = nullptr);

  // Why nothing can be collected (an unsupported activation rank), if so.
  const std::optional<std::string>& unsupported() const { return unsupported_; }
  int64_t skipped() const { return skipped_; }
  bool started() const { return !rankings_.empty(); }

  // Device bytes held by the payloads.
  size_t bytes() const;
  // The device buffers a publish copies (with others, in one batched copy),
  // and the published form built from their CPU copies (same order):
  // dequantised float32.
  std::vector<torch::Tensor> buffers() const;
  std::vector<PatchGallery> view(const std::vector<torch::Tensor>& cpu_buffers) const;
  // The same with a copy of its own.
  std::vector<PatchGallery> view() const;

 private:
  struct Ranking {
    PatchRanking kind;
    bool maximum = true;   // scores are stored negated for the min rankings
    torch::Tensor score;   // [k, C] float32, -inf where empty
    torch::Tensor where;   // [k, C, 6] int64: batch, sample, y, x, top, left (batch -1 where empty)
    torch::Tensor crop;    // [k, C, ic, ch, cw] uint8
    torch::Tensor crop_q;  // [k, C, 2] float32: offset, step
    torch::Tensor heat;    // [k, C, h, w] uint8 (undefined for flat activations)
    torch::Tensor heat_q;  // [k, C, 2]
  };
  void start(const torch::Tensor& activation, const torch::Tensor& input);
  // Folds one ranking's candidates: `score` [B, C] (larger is better) and
  // `pos` [B, C] (the flat position in the map) of each (sample, channel).
  void fold(Ranking& r, torch::Tensor score, const torch::Tensor& pos, const torch::Tensor& act,
            const torch::Tensor& input, int64_t batch);
  // The same on the CPU in plain loops: only the channels a candidate beats
  // are touched, and only the entering candidates' crops and maps are read
  // and quantised. `score` and `pos` are [B, C] contiguous (score negated
  // for the min rankings when `negate`), `act` [B, C, len] with unit stride
  // in its last dimension, `input` contiguous float32.
  void fold_cpu(Ranking& r, const torch::Tensor& score, bool negate, const torch::Tensor& pos, const torch::Tensor& act,
                const torch::Tensor& input, int64_t batch);

  PatchSettings settings_;
  std::vector<Ranking> rankings_;
  std::optional<std::string> unsupported_;
  int64_t skipped_ = 0;
  // Fixed by the first batch.
  std::vector<int64_t> act_shape_;    // [C, h, w] or [C]
  std::vector<int64_t> input_shape_;  // [ic, H, W]
  int64_t channels_ = 0;              // tracked
  int64_t crop_h_ = 0, crop_w_ = 0;
};

}  // namespace nansense::stats
