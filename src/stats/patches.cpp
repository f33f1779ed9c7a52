#include "stats/patches.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>

#include "common/host_copy.h"
#include "common/own_ops.h"

namespace nansense {

std::string_view to_string(PatchRanking ranking) {
  switch (ranking) {
    case PatchRanking::kMaxPixel:
      return "max_pixel";
    case PatchRanking::kMinPixel:
      return "min_pixel";
    case PatchRanking::kMaxAverage:
      return "max_average";
    case PatchRanking::kMinAverage:
      return "min_average";
  }
  return "max_pixel";
}

std::optional<PatchRanking> patch_ranking_from(std::string_view name) {
  for (auto r :
       {PatchRanking::kMaxPixel, PatchRanking::kMinPixel, PatchRanking::kMaxAverage, PatchRanking::kMinAverage}) {
    if (to_string(r) == name) return r;
  }
  return std::nullopt;
}

}  // namespace nansense

namespace nansense::stats {

namespace {

using torch::indexing::Slice;

constexpr float kEmpty = -std::numeric_limits<float>::infinity();
constexpr int64_t kMinCrop = 10;
constexpr int64_t kCropFactor = 4;

// x [k, C, ...] float32 -> uint8 levels 0..254 per (k, C) between the finite
// minimum and maximum, 255 where non-finite; q [k, C, 2] = offset, step.
std::pair<torch::Tensor, torch::Tensor> quantise(const torch::Tensor& x) {
  const auto flat = x.flatten(2);
  const auto finite = torch::isfinite(flat);
  const auto inf = std::numeric_limits<float>::infinity();
  auto lo = torch::where(finite, flat, inf).amin(-1);
  auto hi = torch::where(finite, flat, -inf).amax(-1);
  const auto any = torch::isfinite(lo);
  lo = torch::where(any, lo, torch::zeros_like(lo));
  hi = torch::where(any, hi, torch::zeros_like(hi));
  auto step = (hi - lo) / 254.0;
  step = torch::where(step > 0, step, torch::ones_like(step));
  auto levels = ((flat - lo.unsqueeze(-1)) / step.unsqueeze(-1)).round().clamp(0, 254);
  levels = torch::where(finite, levels, torch::full_like(levels, 255)).to(torch::kUInt8);
  return {levels.view(x.sizes()), torch::stack({lo, step}, -1)};
}

torch::Tensor dequantise(const torch::Tensor& levels, const torch::Tensor& q) {
  const auto flat = levels.flatten(2).to(torch::kFloat);
  auto v = q.select(-1, 0).unsqueeze(-1) + flat * q.select(-1, 1).unsqueeze(-1);
  v = torch::where(flat == 255, torch::full_like(v, std::numeric_limits<float>::quiet_NaN()), v);
  return v.view(levels.sizes());
}

// Each row's largest and smallest value, their first positions
// (map_extremes) and, with `with_mean`, the row's mean, for float32 rows of
// `len` contiguous values on the CPU. A row holding a NaN gets NaN extremes,
// as torch's max and min give.
struct RowExtremes {
  torch::Tensor max_value, max_at, min_value, min_at, mean;
};

RowExtremes row_extremes_cpu(const torch::Tensor& flat, bool with_mean) {
  const int64_t B = flat.size(0), C = flat.size(1), len = flat.size(2);
  const int64_t stride_b = flat.stride(0), stride_c = flat.stride(1);
  const float* base = flat.data_ptr<float>();
  RowExtremes out;
  const auto f = flat.options().dtype(torch::kFloat);
  const auto l = flat.options().dtype(torch::kLong);
  out.max_value = torch::empty({B, C}, f);
  out.min_value = torch::empty({B, C}, f);
  out.max_at = torch::empty({B, C}, l);
  out.min_at = torch::empty({B, C}, l);
  if (with_mean) out.mean = torch::empty({B, C}, f);
  float* hi_out = out.max_value.data_ptr<float>();
  float* lo_out = out.min_value.data_ptr<float>();
  int64_t* hi_at = out.max_at.data_ptr<int64_t>();
  int64_t* lo_at = out.min_at.data_ptr<int64_t>();
  float* mean_out = with_mean ? out.mean.data_ptr<float>() : nullptr;
  at::parallel_for(0, B * C, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, len)), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* v = base + (row / C) * stride_b + (row % C) * stride_c;
      const MapExtreme e = map_extremes(v, len);
      hi_out[row] = e.max;
      lo_out[row] = e.min;
      hi_at[row] = e.max_at;
      lo_at[row] = e.min_at;
      if (mean_out) {
        float sum = 0;
        for (int64_t i = 0; i < len; ++i) sum += v[i];
        mean_out[row] = sum / static_cast<float>(len);
      }
    }
  });
  return out;
}

// The same from extremes taken ahead ([B * C] of them, sample-major).
RowExtremes row_extremes_from(const MapExtremesTable& maps) {
  const int64_t B = maps.samples, C = maps.channels;
  RowExtremes out;
  out.max_value = torch::empty({B, C}, torch::kFloat);
  out.min_value = torch::empty({B, C}, torch::kFloat);
  out.max_at = torch::empty({B, C}, torch::kLong);
  out.min_at = torch::empty({B, C}, torch::kLong);
  float* hi_out = out.max_value.data_ptr<float>();
  float* lo_out = out.min_value.data_ptr<float>();
  int64_t* hi_at = out.max_at.data_ptr<int64_t>();
  int64_t* lo_at = out.min_at.data_ptr<int64_t>();
  for (size_t row = 0; row < maps.maps.size(); ++row) {
    const MapExtreme& e = maps.maps[row];
    hi_out[row] = e.max;
    lo_out[row] = e.min;
    hi_at[row] = e.max_at;
    lo_at[row] = e.min_at;
  }
  return out;
}

// Gathers along dim 0 of `t` ([n, C, ...]) the rows `sel` ([k, C]) picks, per channel.
torch::Tensor pick(const torch::Tensor& t, const torch::Tensor& sel) {
  auto shape = t.sizes().vec();
  shape[0] = sel.size(0);
  auto index = sel;
  while (index.dim() < t.dim()) index = index.unsqueeze(-1);
  return t.gather(0, index.expand(shape));
}

}  // namespace

namespace {
std::atomic<bool> g_patch_tensor_ops{false};
}  // namespace

void set_patch_path(PatchPath path) { g_patch_tensor_ops.store(path == PatchPath::kTensorOps); }

PatchSettings PatchSettings::from(const WatchPerformance& performance) {
  PatchSettings settings;
  settings.samples = performance.samples_per_channel();
  settings.channel_limit = performance.channel_limit_enabled() ? performance.channel_limit() : 0;
  settings.averages = performance.average_patches();
  return settings;
}

int64_t PatchSettings::tracked(int64_t channels) const {
  return std::min(channel_limit > 0 ? std::min(channels, channel_limit) : channels, kMaxPatchChannels);
}

int64_t crop_side(int64_t in, int64_t out) {
  const int64_t ratio = (in + out - 1) / std::max<int64_t>(out, 1);
  return std::min(in, std::max(kMinCrop, ratio * kCropFactor));
}

int64_t crop_origin(int64_t p, int64_t in, int64_t out, int64_t side) {
  const int64_t centre = (2 * p + 1) * in / (2 * std::max<int64_t>(out, 1));
  return std::clamp<int64_t>(centre - side / 2, 0, in - side);
}

PatchCollector::PatchCollector(PatchSettings settings) : settings_(settings) {
  settings_.samples = std::max<int64_t>(1, settings_.samples);
}

bool PatchCollector::image_like(const torch::Tensor& input) {
  return input.defined() && input.dim() == 4 && (input.size(1) == 1 || input.size(1) == 3) &&
         input.is_floating_point() && input.size(2) > 0 && input.size(3) > 0;
}

void PatchCollector::start(const torch::Tensor& act, const torch::Tensor& input) {
  act_shape_ = act.sizes().slice(1).vec();
  input_shape_ = input.sizes().slice(1).vec();
  channels_ = settings_.tracked(act.size(1));
  const int64_t H = input.size(2), W = input.size(3);
  if (act.dim() == 4) {
    crop_h_ = crop_side(H, act.size(2));
    crop_w_ = crop_side(W, act.size(3));
  } else {
    crop_h_ = H;
    crop_w_ = W;
  }
  std::vector<std::pair<PatchRanking, bool>> kinds = {{PatchRanking::kMaxPixel, true},
                                                      {PatchRanking::kMinPixel, false}};
  if (settings_.averages && act.dim() == 4) {
    kinds.push_back({PatchRanking::kMaxAverage, true});
    kinds.push_back({PatchRanking::kMinAverage, false});
  }
  const int64_t k = settings_.samples, ic = input.size(1);
  const auto f = act.options().dtype(torch::kFloat);
  const auto u8 = act.options().dtype(torch::kUInt8);
  for (auto [kind, maximum] : kinds) {
    Ranking r;
    r.kind = kind;
    r.maximum = maximum;
    const bool average = kind == PatchRanking::kMaxAverage || kind == PatchRanking::kMinAverage;
    const int64_t ch = average ? H : crop_h_, cw = average ? W : crop_w_;
    r.score = torch::full({k, channels_}, kEmpty, f);
    r.where = torch::zeros({k, channels_, 6}, act.options().dtype(torch::kLong));
    r.where.select(-1, 0).fill_(-1);
    r.crop = torch::full({k, channels_, ic, ch, cw}, 255, u8);
    r.crop_q = torch::zeros({k, channels_, 2}, f);
    if (act.dim() == 4) {
      r.heat = torch::full({k, channels_, act.size(2), act.size(3)}, 255, u8);
      r.heat_q = torch::zeros({k, channels_, 2}, f);
    }
    rankings_.push_back(std::move(r));
  }
}

bool PatchCollector::add(const torch::Tensor& activation, const torch::Tensor& input, int64_t batch,
                         const MapExtremesTable* maps) {
  if (unsupported_) return false;
  if (!activation.defined() || !input.defined() || activation.numel() == 0) return false;
  if (activation.dim() != 2 && activation.dim() != 4) {
    unsupported_ =
        "Min/Max patches need a [batch, channels] or [batch, channels, height, width] activation; this "
        "layer's is " +
        std::to_string(activation.dim()) + "-D";
    return false;
  }
  if (!image_like(input)) {
    unsupported_ = "Min/Max patches need an image-like input ([batch, 1 or 3, height, width])";
    return false;
  }
  if (activation.size(0) != input.size(0)) {
    ++skipped_;
    return false;
  }
  common::OwnOps own_ops;
  c10::InferenceMode no_autograd;
  if (rankings_.empty()) start(activation, input);
  if (activation.sizes().slice(1) != c10::IntArrayRef(act_shape_) ||
      input.sizes().slice(1) != c10::IntArrayRef(input_shape_)) {
    ++skipped_;
    return false;
  }
  const auto act = activation.narrow(1, 0, channels_).to(torch::kFloat);
  const auto in = input.to(activation.device(), torch::kFloat);
  // Each (sample, channel)'s largest and smallest value with where they are,
  // and its mean when the average rankings are on: taken ahead, or in one
  // pass here. A map holding a NaN has a NaN extreme (max and min propagate
  // it), and a NaN score ranks below every real value.
  const int64_t B = act.size(0);
  const auto flat = act.reshape({B, channels_, -1});
  torch::Tensor max_value, max_at, min_value, min_at, mean;
  const bool averages = rankings_.size() > 2;
  const bool loops = flat.is_cpu() && flat.stride(2) == 1 && !g_patch_tensor_ops.load(std::memory_order_relaxed);
  if (loops && !averages && maps && maps->filled() && maps->samples == B && maps->channels == channels_ &&
      maps->len == flat.size(2)) {
    auto r = row_extremes_from(*maps);
    max_value = r.max_value, max_at = r.max_at, min_value = r.min_value, min_at = r.min_at;
  } else if (flat.is_cpu() && flat.stride(2) == 1) {
    auto r = row_extremes_cpu(flat, averages);
    max_value = r.max_value, max_at = r.max_at, min_value = r.min_value, min_at = r.min_at, mean = r.mean;
  } else {
    std::tie(max_value, max_at) = flat.max(-1);
    std::tie(min_value, min_at) = flat.min(-1);
    if (averages) mean = flat.mean(-1);
  }
  const auto nowhere = torch::zeros({B, channels_}, act.options().dtype(torch::kLong));
  if (loops) {
    const auto image = in.contiguous();
    for (auto& r : rankings_) {
      switch (r.kind) {
        case PatchRanking::kMaxPixel:
          fold_cpu(r, max_value, false, max_at, flat, image, batch);
          break;
        case PatchRanking::kMinPixel:
          fold_cpu(r, min_value, true, min_at, flat, image, batch);
          break;
        case PatchRanking::kMaxAverage:
          fold_cpu(r, mean, false, nowhere, flat, image, batch);
          break;
        case PatchRanking::kMinAverage:
          fold_cpu(r, mean, true, nowhere, flat, image, batch);
          break;
      }
    }
    return true;
  }
  for (auto& r : rankings_) {
    switch (r.kind) {
      case PatchRanking::kMaxPixel:
        fold(r, max_value, max_at, act, in, batch);
        break;
      case PatchRanking::kMinPixel:
        fold(r, -min_value, min_at, act, in, batch);
        break;
      case PatchRanking::kMaxAverage:
        fold(r, mean, nowhere, act, in, batch);
        break;
      case PatchRanking::kMinAverage:
        fold(r, -mean, nowhere, act, in, batch);
        break;
    }
  }
  return true;
}

void PatchCollector::fold(Ranking& r, torch::Tensor score, const torch::Tensor& pos, const torch::Tensor& act,
                          const torch::Tensor& input, int64_t batch) {
  const int64_t B = act.size(0), C = channels_, k = settings_.samples;
  const bool spatial = act.dim() == 4;
  const bool average = r.kind == PatchRanking::kMaxAverage || r.kind == PatchRanking::kMinAverage;
  const auto opts = act.options().dtype(torch::kLong);
  // `score` [B, C]: larger is better; NaN ranks below every real value, above an empty slot.
  score = torch::where(torch::isnan(score), torch::full_like(score, -std::numeric_limits<float>::max()), score);
  const int64_t kc = std::min(k, B);
  auto [cand_score, cand_sample] = score.topk(kc, 0);  // [kc, C]
  // On the CPU (no device to sync with) a batch that beats no channel's
  // last kept score changes nothing: skip gathering its crops and maps.
  if (score.is_cpu() && !(cand_score.select(0, 0) > r.score.select(0, k - 1)).any().item<bool>()) return;
  const auto cand_pos = pos.gather(0, cand_sample);
  const int64_t w = spatial ? act.size(3) : 1;
  const auto y = cand_pos.div(w, "floor"), x = cand_pos.remainder(w);
  const int64_t H = input.size(2), W = input.size(3), ic = input.size(1);
  const auto channel = torch::arange(C, opts);
  torch::Tensor top, left, crop;
  if (spatial && !average) {
    const int64_t h = act.size(2);
    // The crop centred on the position's footprint in the input, kept inside
    // it (crop_origin, vectorised).
    top = ((y * 2 + 1) * H).div(2 * h, "floor").sub(crop_h_ / 2).clamp(0, H - crop_h_);
    left = ((x * 2 + 1) * W).div(2 * act.size(3), "floor").sub(crop_w_ / 2).clamp(0, W - crop_w_);
    const auto rows = top.unsqueeze(-1) + torch::arange(crop_h_, opts);  // [kc, C, ch]
    const auto cols = left.unsqueeze(-1) + torch::arange(crop_w_, opts);
    crop = input.index({cand_sample.view({kc, C, 1, 1, 1}), torch::arange(ic, opts).view({1, 1, ic, 1, 1}),
                        rows.view({kc, C, 1, crop_h_, 1}), cols.view({kc, C, 1, 1, crop_w_})});
  } else {
    top = torch::zeros_like(y);
    left = torch::zeros_like(y);
    crop = input.index({cand_sample});  // [kc, C, ic, H, W]
  }
  auto [crop_levels, crop_q] = quantise(crop);
  const auto where =
      torch::stack({torch::full_like(y, batch), cand_sample, spatial ? y : torch::zeros_like(y), x, top, left}, -1);
  // Merge the kept slots with the candidates.
  const auto all_score = torch::cat({r.score, cand_score});
  const auto sel = std::get<1>(all_score.topk(k, 0));  // [k, C]
  r.score = all_score.gather(0, sel);
  r.where = pick(torch::cat({r.where, where}), sel);
  r.crop = pick(torch::cat({r.crop, crop_levels}), sel);
  r.crop_q = pick(torch::cat({r.crop_q, crop_q}), sel);
  if (spatial) {
    const auto heat = act.index({cand_sample, channel.view({1, C})});  // [kc, C, h, w]
    auto [heat_levels, heat_q] = quantise(heat);
    r.heat = pick(torch::cat({r.heat, heat_levels}), sel);
    r.heat_q = pick(torch::cat({r.heat_q, heat_q}), sel);
  }
}

void PatchCollector::fold_cpu(Ranking& r, const torch::Tensor& score, bool negate, const torch::Tensor& pos,
                              const torch::Tensor& act, const torch::Tensor& input, int64_t batch) {
  const int64_t B = act.size(0), C = channels_, k = settings_.samples;
  const bool spatial = act_shape_.size() == 3;
  const bool average = r.kind == PatchRanking::kMaxAverage || r.kind == PatchRanking::kMinAverage;
  const int64_t h = spatial ? act_shape_[1] : 1, w = spatial ? act_shape_[2] : 1;
  const int64_t ic = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t ch = r.crop.size(3), cw = r.crop.size(4);
  const int64_t crop_n = ic * ch * cw, heat_n = spatial ? h * w : 0;
  const auto scores = score.contiguous();
  const auto positions = pos.contiguous();
  const float* s = scores.data_ptr<float>();
  const int64_t* p = positions.data_ptr<int64_t>();
  const float* kept_score = r.score.data_ptr<float>();
  // A NaN ranks below every real value and above an empty slot (-inf), as
  // fold()'s torch ops order them.
  const auto ranked = [&](int64_t b, int64_t c) {
    const float v = negate ? -s[b * C + c] : s[b * C + c];
    return std::isnan(v) ? -std::numeric_limits<float>::max() : v;
  };

  // Per channel: the slots' new order, each the kept slot it keeps (>= 0) or
  // a candidate sample (-1 - sample). Channels nothing beats stay as they are.
  std::vector<int64_t> order;  // [C * k], filled for the changed channels
  std::vector<char> changed(static_cast<size_t>(C), 0);
  std::vector<std::pair<float, int64_t>> cand;
  bool any = false;
  for (int64_t c = 0; c < C; ++c) {
    const float last = kept_score[(k - 1) * C + c];
    cand.clear();
    for (int64_t b = 0; b < B; ++b) {
      const float v = ranked(b, c);
      if (v > last) cand.emplace_back(v, b);
    }
    if (cand.empty()) continue;
    // The best first; a tie goes to the earlier sample.
    const auto better = [](const auto& x, const auto& y) {
      return x.first > y.first || (x.first == y.first && x.second < y.second);
    };
    const size_t kc = std::min<size_t>(cand.size(), static_cast<size_t>(k));
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(kc), cand.end(), better);
    if (!any) order.assign(static_cast<size_t>(C * k), 0);
    any = true;
    changed[static_cast<size_t>(c)] = 1;
    // Merge the kept slots (sorted, best first) with the candidates; a tie keeps the slot already kept.
    int64_t j = 0;
    size_t i = 0;
    for (int64_t slot = 0; slot < k; ++slot) {
      if (i < kc && !(kept_score[j * C + c] >= cand[i].first)) {
        order[static_cast<size_t>(c * k + slot)] = -1 - cand[i++].second;
      } else {
        order[static_cast<size_t>(c * k + slot)] = j++;
      }
    }
  }
  if (!any) return;

  // Fresh buffers: a published view may still be built from the old ones.
  auto score_out = r.score.clone(), where_out = r.where.clone();
  auto crop_out = r.crop.clone(), crop_q_out = r.crop_q.clone();
  torch::Tensor heat_out, heat_q_out;
  if (spatial) heat_out = r.heat.clone(), heat_q_out = r.heat_q.clone();
  float* so = score_out.data_ptr<float>();
  int64_t* wo = where_out.data_ptr<int64_t>();
  uint8_t* co = crop_out.data_ptr<uint8_t>();
  float* cqo = crop_q_out.data_ptr<float>();
  uint8_t* ho = spatial ? heat_out.data_ptr<uint8_t>() : nullptr;
  float* hqo = spatial ? heat_q_out.data_ptr<float>() : nullptr;
  const int64_t* wi = r.where.data_ptr<int64_t>();
  const uint8_t* ci = r.crop.data_ptr<uint8_t>();
  const float* cqi = r.crop_q.data_ptr<float>();
  const uint8_t* hi = spatial ? r.heat.data_ptr<uint8_t>() : nullptr;
  const float* hqi = spatial ? r.heat_q.data_ptr<float>() : nullptr;
  const float* in = input.data_ptr<float>();
  const float* a = act.data_ptr<float>();
  const int64_t a_b = act.stride(0), a_c = act.stride(1);
  std::vector<float> values(static_cast<size_t>(std::max(crop_n, heat_n)));

  for (int64_t c = 0; c < C; ++c) {
    if (!changed[static_cast<size_t>(c)]) continue;
    for (int64_t slot = 0; slot < k; ++slot) {
      const int64_t from = order[static_cast<size_t>(c * k + slot)];
      const int64_t to = slot * C + c;
      if (from >= 0) {
        const int64_t at = from * C + c;
        so[to] = kept_score[at];
        std::copy_n(wi + at * 6, 6, wo + to * 6);
        std::copy_n(ci + at * crop_n, crop_n, co + to * crop_n);
        std::copy_n(cqi + at * 2, 2, cqo + to * 2);
        if (spatial) {
          std::copy_n(hi + at * heat_n, heat_n, ho + to * heat_n);
          std::copy_n(hqi + at * 2, 2, hqo + to * 2);
        }
        continue;
      }
      const int64_t b = -1 - from;
      const int64_t flat_pos = p[b * C + c];
      const int64_t y = spatial ? flat_pos / w : 0, x = flat_pos % w;
      int64_t top = 0, left = 0;
      if (spatial && !average) {
        top = std::clamp<int64_t>((2 * y + 1) * H / (2 * h) - crop_h_ / 2, 0, H - crop_h_);
        left = std::clamp<int64_t>((2 * x + 1) * W / (2 * w) - crop_w_ / 2, 0, W - crop_w_);
      }
      so[to] = ranked(b, c);
      const int64_t where[6] = {batch, b, y, x, top, left};
      std::copy_n(where, 6, wo + to * 6);
      // The crop, [ic, ch, cw] from the sample's input.
      float* v = values.data();
      for (int64_t i = 0; i < ic; ++i) {
        for (int64_t row = 0; row < ch; ++row) {
          const float* src = in + ((b * ic + i) * H + top + row) * W + left;
          std::copy_n(src, cw, v + (i * ch + row) * cw);
        }
      }
      quantise_levels(v, crop_n, co + to * crop_n, cqo + to * 2);
      if (spatial) quantise_levels(a + b * a_b + c * a_c, heat_n, ho + to * heat_n, hqo + to * 2);
    }
  }
  r.score = std::move(score_out);
  r.where = std::move(where_out);
  r.crop = std::move(crop_out);
  r.crop_q = std::move(crop_q_out);
  if (spatial) r.heat = std::move(heat_out), r.heat_q = std::move(heat_q_out);
}

size_t PatchCollector::bytes() const {
  size_t total = 0;
  for (const auto& r : rankings_) {
    for (const auto* t : {&r.score, &r.where, &r.crop, &r.crop_q, &r.heat, &r.heat_q}) {
      if (t->defined()) total += t->numel() * t->element_size();
    }
  }
  return total;
}

std::vector<torch::Tensor> PatchCollector::buffers() const {
  std::vector<torch::Tensor> device;
  for (const auto& r : rankings_) {
    for (const auto* t : {&r.score, &r.where, &r.crop, &r.crop_q, &r.heat, &r.heat_q}) {
      device.push_back(t->defined() ? *t : torch::Tensor());
    }
  }
  return device;
}

std::vector<PatchGallery> PatchCollector::view() const { return view(common::copy_to_host(buffers())); }

std::vector<PatchGallery> PatchCollector::view(const std::vector<torch::Tensor>& cpu) const {
  std::vector<PatchGallery> out;
  if (cpu.size() != rankings_.size() * 6) return out;
  for (size_t i = 0; i < rankings_.size(); ++i) {
    const auto& r = rankings_[i];
    const auto* t = &cpu[i * 6];
    PatchGallery v;
    v.ranking = r.kind;
    v.samples = settings_.samples;
    v.channels = channels_;
    v.input_height = input_shape_.size() == 3 ? input_shape_[1] : 0;
    v.input_width = input_shape_.size() == 3 ? input_shape_[2] : 0;
    const auto score = t[0].contiguous();
    const auto where = t[1].contiguous();
    const float* s = score.data_ptr<float>();
    const int64_t* wh = where.data_ptr<int64_t>();
    v.slots.resize(static_cast<size_t>(v.samples * v.channels));
    for (size_t j = 0; j < v.slots.size(); ++j) {
      auto& slot = v.slots[j];
      const int64_t* e = wh + j * 6;
      slot.filled = e[0] >= 0;
      if (!slot.filled) continue;
      const float value = s[j] == -std::numeric_limits<float>::max() ? std::nanf("") : s[j];
      slot.score = r.maximum ? value : -value;
      slot.batch = e[0];
      slot.sample = e[1];
      slot.y = e[2];
      slot.x = e[3];
      slot.top = e[4];
      slot.left = e[5];
    }
    v.crops = dequantise(t[2], t[3]);
    if (t[4].defined()) v.heat = dequantise(t[4], t[5]);  // the channel's own values, unsigned
    // Empty slots draw nothing.
    for (size_t j = 0; j < v.slots.size(); ++j) {
      if (v.slots[j].filled) continue;
      const int64_t a = static_cast<int64_t>(j) / v.channels, c = static_cast<int64_t>(j) % v.channels;
      v.crops[a][c].fill_(std::nanf(""));
      if (v.heat.defined()) v.heat[a][c].fill_(std::nanf(""));
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace nansense::stats
