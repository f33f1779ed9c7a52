// Min/Max patches and bin samples: the inputs behind a channel's extremes
// (from the published statistics) and behind a histogram bar (from the last
// captured batch), as JSON with small PNGs for the Stats page and as one
// picture for agents.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "common/base64.h"
#include "render/input_image.h"
#include "render/text.h"
#include "render/tiles.h"
#include "server/controller/controller.h"
#include "server/controller/lookup.h"
#include "session/session_port.h"
#include "stats/patches.h"
#include "stats/histogram.h"

namespace nansense::server {

namespace {

std::string short_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// How a model input is shown: the display options of the architecture's first input.
render::InputImageOptions input_options(const detail::SessionPort& session) {
  const auto& display = session.display_options();
  auto arch = session.architecture();
  const std::string name = arch && !arch->inputs.empty() ? arch->inputs.front() : "input";
  render::InputImageOptions o;
  o.mean = display.input_mean().for_input(name);
  o.std = display.input_std().for_input(name);
  o.transform = display.input_transform().for_input(name);
  return o;
}

// A crop [ic, h, w] as the input pane would show it; `heat` [h, w] (same
// size, signed) blended over it when defined.
render::Image draw_crop(const torch::Tensor& crop, const torch::Tensor& heat, render::InputImageOptions options) {
  options.sample = 0;
  auto image = render::render_input(torch::nan_to_num(crop, 0.0).unsqueeze(0), options).image;
  if (!heat.defined()) return image;
  const auto map = torch::nan_to_num(heat, 0.0).contiguous();
  return render::overlay(image, render::colour_map(map, /*one_sided=*/false), map);
}

struct Gallery {
  const LayerStatsSnapshot* view = nullptr;
  std::string phase;
  std::vector<std::string> phases;  // those whose newest epoch has patches (or a note)
};

bool has_patches(const LayerStatsSnapshot& v) { return !v.patches.empty() || v.patches_note.has_value(); }

Gallery find_gallery(const WatchSnapshot& s, const detail::RunPort& session, const std::string& layer,
                     const std::optional<std::string>& phase) {
  const auto all = phases_of(s, layer, session.schedule());
  if (all.empty()) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "no statistics for layer \"" + layer +
                      "\"; layers with statistics: " + join(layers_of(s, session.architecture().get())) +
                      " (watch_layers collects a layer's, patches included)",
                  "layer");
  }
  Gallery g;
  auto newest = [&](const std::string& p) { return &s.layers.at({layer, p}).back(); };
  for (const auto& p : all) {
    if (has_patches(*newest(p))) g.phases.push_back(p);
  }
  if (phase) {
    if (std::find(all.begin(), all.end(), *phase) == all.end()) {
      throw Refusal(Refusal::Kind::kNotFound,
                    "layer \"" + layer + "\" has no statistics for phase \"" + *phase + "\"; its phases: " + join(all),
                    "phase");
    }
    g.phase = *phase;
  } else {
    // The phase being trained when it has patches, else the first that does.
    auto snap = session.snapshot();
    const std::string current = snap ? snap->position.phase : "";
    if (std::find(g.phases.begin(), g.phases.end(), current) != g.phases.end()) {
      g.phase = current;
    } else {
      g.phase = g.phases.empty() ? all.front() : g.phases.front();
    }
  }
  g.view = newest(g.phase);
  return g;
}

// The last captured batch's gallery of `layer`, as a bucket of its own: the
// collector the training thread folds with, run once on this thread's CPU
// copy of the batch, with the same slot and channel limits.
struct CurrentGallery {
  std::shared_ptr<const BatchSnapshot> snap;
  LayerStatsSnapshot view;
};

CurrentGallery current_gallery(std::shared_ptr<const BatchSnapshot> snap, const std::string& layer,
                               const WatchPerformance& detail) {
  CurrentGallery g;
  g.view.layer = layer;
  g.view.phase = snap->position.phase;
  g.view.epoch = snap->position.epoch;
  g.view.batches = 1;
  if (!snap->architecture->find(layer)) {
    std::vector<std::string> known;
    for (const auto& l : snap->architecture->layers) known.push_back(l.name);
    throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + layer + "\"; layers: " + join(known), "layer");
  }
  auto it = snap->activations.find(layer);
  torch::Tensor input;
  if (!snap->inputs.empty() && stats::PatchCollector::image_like(snap->inputs.front())) input = snap->inputs.front();
  if (it == snap->activations.end() || !it->second.defined() || !it->second.is_floating_point()) {
    g.view.patches_note =
        "the batch at " + snap->position.to_string() + " has no floating-point activation for \"" + layer + "\"";
  } else if (!input.defined()) {
    g.view.patches_note = "Min/Max patches need an image-like model input ([batch, 1 or 3, height, width])";
  } else if (detail.samples_per_channel() <= 0) {
    g.view.patches_note = "Min/Max patches are off (samples_per_channel is 0 in set_watch_performance)";
  } else {
    stats::PatchSettings settings;
    settings.samples = detail.samples_per_channel();
    settings.channel_limit = detail.channel_limit_enabled() ? detail.channel_limit() : 0;
    settings.averages = detail.average_patches();
    stats::PatchCollector collector(settings);
    const auto& activation = it->second;
    collector.add(activation.to(torch::kFloat), input.to(torch::kFloat), snap->position.batch_idx);
    if (collector.unsupported()) {
      g.view.patches_note = *collector.unsupported();
    } else if (!collector.started()) {
      g.view.patches_note = "layer \"" + layer + "\"'s activation holds " +
                            (activation.dim() > 0 ? std::to_string(activation.size(0)) : std::string("no")) +
                            " samples, the input " + std::to_string(input.size(0)) +
                            ": its values cannot be traced to input samples";
    } else {
      g.view.patches = collector.view();
    }
  }
  g.snap = std::move(snap);
  return g;
}

// Why a bucket has no patches.
std::string missing_reason(const LayerStatsSnapshot& v, const detail::StatsPort& session) {
  if (v.patches_note) return *v.patches_note;
  if (session.watch_performance().samples_per_channel() == 0) {
    return "Min/Max patches are off (samples_per_channel is 0 in set_watch_performance)";
  }
  if (const auto only = session.patch_layers(); only && std::find(only->begin(), only->end(), v.layer) == only->end()) {
    return "Min/Max patches are collected only for " + join(*only) + " (set_patch_layers)";
  }
  if (const auto watched = session.watched_layers();
      !session.patch_layers() && std::find(watched.begin(), watched.end(), v.layer) == watched.end()) {
    return "Min/Max patches are collected for the watched layers (or, once set, set_patch_layers' list); \"" + v.layer +
           "\" is not watched: watch it (the eye on its card, watch_layers)";
  }
  return "no Min/Max gallery for \"" + v.layer + "\" in " + v.phase + " epoch " + std::to_string(v.epoch) +
         " yet: the layer's next collected batch starts one";
}

// Where a patch request's gallery comes from: the last captured batch's
// (current_batch) or an epoch's collected one. The view is read from
// whichever it holds.
struct PatchSource {
  std::shared_ptr<const WatchSnapshot> stats;  // an epoch's: what `epoch` points into
  Gallery epoch;
  std::optional<CurrentGallery> current;  // the captured batch's

  const LayerStatsSnapshot& view() const { return current ? current->view : *epoch.view; }
  const std::string& phase() const { return current ? current->view.phase : epoch.phase; }
  uint64_t sequence() const { return current ? current->snap->sequence : stats->sequence; }
  // Why view() has no patches.
  std::string missing(const detail::StatsPort& session) const {
    return current ? view().patches_note.value_or("no Min/Max gallery for this batch")
                   : missing_reason(view(), session);
  }
};

PatchSource batch_source(std::shared_ptr<const BatchSnapshot> snap, const std::string& layer,
                         const WatchPerformance& detail) {
  PatchSource source;
  source.current = current_gallery(std::move(snap), layer, detail);
  return source;
}

PatchSource epoch_source(std::shared_ptr<const WatchSnapshot> stats, const detail::RunPort& session,
                         const std::string& layer, const std::optional<std::string>& phase) {
  PatchSource source;
  source.epoch = find_gallery(*stats, session, layer, phase);
  source.stats = std::move(stats);
  return source;
}

const PatchGallery* find_ranking(const LayerStatsSnapshot& v, PatchRanking ranking) {
  for (const auto& g : v.patches) {
    if (g.ranking == ranking) return &g;
  }
  return nullptr;
}

std::vector<std::string> ranking_names(const LayerStatsSnapshot& v) {
  std::vector<std::string> out;
  for (const auto& g : v.patches) out.emplace_back(to_string(g.ranking));
  return out;
}

// The ranking asked for, or a refusal that says how to get it.
const PatchGallery& require_ranking(const LayerStatsSnapshot& v, const std::string& name, const std::string& argument) {
  const auto ranking = patch_ranking_from(name);
  if (ranking) {
    if (const PatchGallery* g = find_ranking(v, *ranking)) return *g;
  }
  const bool average = name == "max_average" || name == "min_average";
  throw Refusal(Refusal::Kind::kInvalidArgument,
                "layer \"" + v.layer + "\" has no " + name + " gallery; it has: " + join(ranking_names(v)) +
                    (average ? " (average patches need average_patches in set_watch_performance, and "
                               "a [batch, channels, height, width] activation)"
                             : ""),
                argument);
}

// One cell's picture: the crop, with the channel's activation over it on request.
render::Image cell_image(const PatchGallery& g, int64_t slot, int64_t channel, bool heatmap,
                         const render::InputImageOptions& options) {
  const auto crop = g.crops[slot][channel];
  torch::Tensor heat;
  if (heatmap && g.heat.defined()) {
    const auto& s = g.slot(slot, channel);
    const auto full = render::stretched(g.heat[slot][channel], g.input_height, g.input_width);
    heat = full.narrow(0, s.top, crop.size(1)).narrow(1, s.left, crop.size(2));
  }
  return draw_crop(crop, heat, options);
}

}  // namespace

PatchArea::PatchArea(Controller& owner, detail::SessionPort& session) : owner_(owner), session_(session) {}

Patches PatchArea::get_patches(const PatchOptions& o) const {
  const auto source = o.current_batch ? batch_source(owner_.require_snapshot(), o.layer, session_.watch_performance())
                                      : epoch_source(owner_.require_stats(), session_, o.layer, o.phase);
  const auto& current = source.current;
  const LayerStatsSnapshot& v = source.view();
  Patches out;
  out.layer = o.layer;
  out.phase = source.phase();
  out.epoch = v.epoch;
  out.phases = source.epoch.phases;
  out.current_batch = o.current_batch;
  if (current) out.position = current->snap->position.to_string();
  out.grid = o.grids.empty() ? "max_pixel" : o.grids.front();
  out.grids = ranking_names(v);
  out.heatmap = o.heatmap;
  out.sequence = source.sequence();
  if (v.patches.empty()) {
    out.note = source.missing(session_);
    return out;
  }
  const PatchGallery& gallery = require_ranking(v, out.grid, "grid");
  if (current && current->snap->probe) {
    out.note = std::string("these are the probe's re-run") +
               (current->snap->probe->diff ? " (perturbed - original)" : "") + ", shown in the captured batch's place";
  } else if (v.patches_skipped > 0) {
    out.note = std::to_string(v.patches_skipped) + " batch" + (v.patches_skipped == 1 ? " was" : "es were") +
               " left out: the activation or the input had another shape than this epoch's first batch";
  }
  const auto options = input_options(session_);
  out.samples = gallery.samples;
  out.channels = gallery.channels;
  out.crop = {gallery.crops.size(3), gallery.crops.size(4)};
  for (int64_t a = 0; a < gallery.samples; ++a) {
    for (int64_t c = 0; c < gallery.channels; ++c) {
      const auto& slot = gallery.slot(a, c);
      PatchCell cell{a, c, slot.filled, nullptr, slot.batch, slot.sample, slot.y, slot.x, slot.top, slot.left, {}};
      if (slot.filled) {
        cell.score = number(slot.score);
        cell.png = common::base64(render::encode_png(cell_image(gallery, a, c, o.heatmap, options)));
      }
      out.cells.push_back(std::move(cell));
    }
  }
  return out;
}

std::shared_ptr<const Picture> PatchArea::render_extreme_patches(const PatchOptions& o) const {
  const auto source = o.current_batch ? batch_source(owner_.require_snapshot(), o.layer, session_.watch_performance())
                                      : epoch_source(owner_.require_stats(), session_, o.layer, o.phase);
  const auto& current = source.current;
  const LayerStatsSnapshot& v = source.view();
  if (v.patches.empty()) {
    throw Refusal(Refusal::Kind::kConflict, source.missing(session_));
  }
  std::vector<std::string> grids = o.grids;
  // Every ranking collected, as the original NaNsense 0.4.0 (Python, on PyPI)
  // draws all four by default.
  if (grids.empty()) grids = ranking_names(v);
  const auto options = input_options(session_);
  // Per grid a titled block: a row per slot, a column per channel.
  std::vector<render::Image> blocks;
  std::vector<std::string> titles;
  int64_t samples = 0, channels = 0;
  for (const auto& name : grids) {
    const PatchGallery& gallery = require_ranking(v, name, "grids");
    samples = gallery.samples;
    channels = gallery.channels;
    std::vector<std::vector<render::Tile>> rows;
    for (int64_t a = 0; a < gallery.samples; ++a) {
      std::vector<render::Tile> row;
      for (int64_t c = 0; c < gallery.channels; ++c) {
        const auto& slot = gallery.slot(a, c);
        render::Tile tile;
        if (slot.filled) {
          tile.image = cell_image(gallery, a, c, o.heatmap, options);
          tile.label = "c" + std::to_string(c) + " " + short_number(slot.score);
        } else {
          tile.image = render::Image(static_cast<int>(gallery.crops.size(4)), static_cast<int>(gallery.crops.size(3)));
          for (auto& p : tile.image.pixels) p = {60, 60, 70, 255};
          tile.label = "c" + std::to_string(c) + " empty";
        }
        row.push_back(std::move(tile));
      }
      rows.push_back(std::move(row));
    }
    blocks.push_back(render::compose(rows, /*tile_height=*/48));
    titles.push_back(name + " - row = rank (best first), column = channel, label = channel and score");
  }
  // The blocks stacked, each under its title.
  constexpr float kTitlePx = 14;
  const int title_h = render::line_height(kTitlePx) + 6;
  int width = 0, height = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    width = std::max({width, blocks[i].width, render::text_width(titles[i], kTitlePx) + 8});
    height += title_h + blocks[i].height;
  }
  render::Image image(width, height);
  for (auto& p : image.pixels) p = {32, 32, 40, 255};
  int y = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    render::draw_text(image, titles[i], 4, y + 3, kTitlePx, {230, 230, 240, 255});
    y += title_h;
    for (int yy = 0; yy < blocks[i].height; ++yy) {
      for (int xx = 0; xx < blocks[i].width; ++xx) image.at(xx, y + yy) = blocks[i].at(xx, yy);
    }
    y += blocks[i].height;
  }
  auto out = std::make_shared<Picture>();
  out->png = render::encode_png(image);
  out->info = {{"layer", o.layer},      {"phase", source.phase()},       {"epoch", v.epoch},
               {"grids", grids},        {"heatmap", o.heatmap},          {"samples", samples},
               {"channels", channels},  {"sequence", source.sequence()}, {"width", image.width},
               {"height", image.height}};
  out->info["current_batch"] = o.current_batch;
  out->caption = "Min/Max patches of layer \"" + o.layer + "\", " +
                 (current ? "the last captured batch (" + current->snap->position.to_string() + ")"
                          : source.phase() + " epoch " + std::to_string(v.epoch)) +
                 ": " + join(grids) + ". Each block has a column per channel (the first " + std::to_string(channels) +
                 ") and a row per kept input, best first; *_pixel cells are input crops around where the channel "
                 "was highest (max) or lowest (min), *_average cells whole inputs ranked by the channel's mean." +
                 (o.heatmap ? " The channel's activation is drawn over each input (red positive, blue negative)." : "");
  return out;
}

namespace {

struct BinPick {
  int64_t sample = 0;
  std::vector<int64_t> index;  // after the batch dimension
  double value = 0;
  int64_t top = 0, left = 0;
  std::optional<render::Image> image;
};

struct BinResult {
  std::vector<BinPick> picks;
  int64_t matches = 0;
  std::optional<std::string> note;
  std::shared_ptr<const BatchSnapshot> snap;
};

}  // namespace

// Shared by get_bin_samples and render_bin_samples.
static BinResult pick_bin_samples(const detail::SessionPort& session, const std::shared_ptr<const BatchSnapshot>& snap,
                                  const PatchArea::BinSampleOptions& o) {
  const bool activation = o.kind == "activation";
  if (!snap->architecture->find(o.layer)) {
    std::vector<std::string> known;
    for (const auto& l : snap->architecture->layers) known.push_back(l.name);
    throw Refusal(Refusal::Kind::kNotFound, "unknown layer \"" + o.layer + "\"; layers: " + join(known), "layer");
  }
  const auto& tensors = activation ? snap->activations : snap->activation_gradients;
  auto it = tensors.find(o.layer);
  if (it == tensors.end() || !it->second.defined()) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "the batch at " + snap->position.to_string() + " has no " + o.kind + " for layer \"" + o.layer +
                      "\"" + (activation ? "" : " (a forward-only phase, or no backward reached it)"),
                  "kind");
  }
  torch::Tensor t = it->second;
  if (!t.is_floating_point()) {
    throw Refusal(Refusal::Kind::kInvalidArgument, "layer \"" + o.layer + "\" holds " +
                                                       std::string(c10::toString(t.scalar_type())) +
                                                       " values, which have no histogram");
  }
  t = t.to(torch::kFloat);
  if (o.channel) {
    if (t.dim() < 2 || *o.channel >= t.size(1)) {
      throw Refusal(Refusal::Kind::kInvalidArgument,
                    "channel " + std::to_string(*o.channel) + " is out of range: layer \"" + o.layer + "\" has " +
                        (t.dim() < 2 ? "no channels" : std::to_string(t.size(1)) + " channels"),
                    "channel");
    }
  }
  if (t.dim() == 0) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "layer \"" + o.layer + "\"'s " + o.kind +
                      " is a single value (no batch dimension): it has no elements to sample");
  }
  BinResult r;
  r.snap = snap;
  if (snap->probe) {
    r.note = std::string("these are the probe's re-run") + (snap->probe->diff ? " (perturbed - original)" : "") +
             ", shown in the captured batch's place";
  }
  // The elements of that bin (in that channel), found a chunk at a time so a
  // large activation never needs its whole index list: one pass counts the
  // matches, a seeded draw picks `count` of them (the same ones for the same
  // snapshot and bar), a second pass finds those.
  const auto values = (o.channel ? t.select(1, *o.channel) : t).contiguous();
  const auto flat = values.reshape({-1});
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int64_t> per_chunk;
  for (int64_t at = 0; at < flat.numel(); at += kChunk) {
    const auto part = flat.narrow(0, at, std::min(kChunk, flat.numel() - at));
    per_chunk.push_back((stats::bin_index(part) == o.bin).sum().item<int64_t>());
    r.matches += per_chunk.back();
  }
  std::mt19937_64 rng(snap->sequence * 1000003u + static_cast<uint64_t>(o.bin) * 131u +
                      static_cast<uint64_t>(o.channel.value_or(-1) + 1));
  std::vector<int64_t> ranks;  // which matches, in order of position
  if (r.matches <= o.count) {
    for (int64_t i = 0; i < r.matches; ++i) ranks.push_back(i);
  } else {
    std::set<int64_t> picked;
    std::uniform_int_distribution<int64_t> draw(0, r.matches - 1);
    while (static_cast<int64_t>(picked.size()) < o.count) picked.insert(draw(rng));
    ranks.assign(picked.begin(), picked.end());
  }
  std::vector<int64_t> chosen;  // flat positions in `values`
  int64_t before = 0;
  size_t next = 0;
  for (size_t c = 0; c < per_chunk.size() && next < ranks.size(); ++c) {
    if (ranks[next] >= before + per_chunk[c]) {
      before += per_chunk[c];
      continue;
    }
    const int64_t at = static_cast<int64_t>(c) * kChunk;
    const auto part = flat.narrow(0, at, std::min(kChunk, flat.numel() - at));
    const auto hits = torch::nonzero(stats::bin_index(part) == o.bin).reshape({-1}).contiguous();
    const int64_t* h = hits.data_ptr<int64_t>();
    while (next < ranks.size() && ranks[next] < before + per_chunk[c]) chosen.push_back(at + h[ranks[next++] - before]);
    before += per_chunk[c];
  }
  // The input to crop from: the first image-like one, kept like the layer's samples.
  torch::Tensor image;
  if (!snap->inputs.empty() && stats::PatchCollector::image_like(snap->inputs.front())) image = snap->inputs.front();
  if (!image.defined()) r.note = "no image-like model input ([batch, 1 or 3, height, width]) to crop from";
  const auto options = input_options(session);
  const int64_t dims = values.dim();
  for (int64_t position : chosen) {
    BinPick p;
    // The flat position as coordinates of `values` (the batch first).
    std::vector<int64_t> c(static_cast<size_t>(dims));
    for (int64_t d = dims - 1, rest = position; d >= 0; --d) {
      c[static_cast<size_t>(d)] = rest % values.size(d);
      rest /= values.size(d);
    }
    p.sample = c[0];
    p.index.assign(c.begin() + 1, c.end());
    if (o.channel) p.index.insert(p.index.begin(), *o.channel);
    p.value = flat[position].item<double>();
    if (image.defined() && p.sample < image.size(0)) {
      const int64_t H = image.size(2), W = image.size(3);
      torch::Tensor crop;
      if (t.dim() == 4) {
        // p.index is [channel, y, x].
        const int64_t h = t.size(2), w = t.size(3);
        const int64_t ch = stats::crop_side(H, h), cw = stats::crop_side(W, w);
        p.top = stats::crop_origin(p.index[1], H, h, ch);
        p.left = stats::crop_origin(p.index[2], W, w, cw);
        crop = image[p.sample].narrow(1, p.top, ch).narrow(2, p.left, cw);
      } else {
        crop = image[p.sample];
      }
      p.image = draw_crop(crop.to(torch::kFloat), torch::Tensor(), options);
    }
    r.picks.push_back(std::move(p));
  }
  return r;
}

BinSamples PatchArea::get_bin_samples(const BinSampleOptions& o) const {
  const auto snap = owner_.require_snapshot();
  auto r = pick_bin_samples(session_, snap, o);
  const auto& edges = stats::bin_edges();
  BinSamples out;
  out.layer = o.layer;
  out.kind = o.kind;
  out.channel = o.channel;
  out.bin = o.bin;
  out.range = {number(edges[static_cast<size_t>(o.bin)]), number(edges[static_cast<size_t>(o.bin) + 1])};
  out.matches = r.matches;
  out.sequence = snap->sequence;
  out.position = snap->position;
  out.note = std::move(r.note);
  for (const auto& p : r.picks) {
    BinSample sample{p.sample, p.index, number(p.value), p.top, p.left, std::nullopt};
    if (p.image) sample.png = common::base64(render::encode_png(*p.image));
    out.samples.push_back(std::move(sample));
  }
  return out;
}

std::shared_ptr<const Picture> PatchArea::render_bin_samples(const BinSampleOptions& o) const {
  const auto snap = owner_.require_snapshot();
  const auto r = pick_bin_samples(session_, snap, o);
  const auto& edges = stats::bin_edges();
  const std::string range = "[" + short_number(edges[static_cast<size_t>(o.bin)]) + ", " +
                            short_number(edges[static_cast<size_t>(o.bin) + 1]) + ")";
  if (r.picks.empty()) {
    throw Refusal(Refusal::Kind::kNotFound,
                  "no " + o.kind + " value of layer \"" + o.layer + "\"" +
                      (o.channel ? " channel " + std::to_string(*o.channel) : "") + " falls in bin " +
                      std::to_string(o.bin) + " " + range + " in the batch at " + snap->position.to_string(),
                  "bin");
  }
  if (!r.picks.front().image) throw Refusal(Refusal::Kind::kConflict, *r.note);
  std::vector<render::Tile> row;
  for (const auto& p : r.picks) {
    std::string where;
    for (auto i : p.index) where += (where.empty() ? "" : ",") + std::to_string(i);
    row.push_back({*p.image, "s" + std::to_string(p.sample) + " [" + where + "] " + short_number(p.value)});
  }
  const auto image = render::compose({row}, /*tile_height=*/96);
  auto out = std::make_shared<Picture>();
  out->png = render::encode_png(image);
  out->info = {{"layer", o.layer},
               {"kind", o.kind},
               {"channel", o.channel ? json(*o.channel) : json(nullptr)},
               {"bin", o.bin},
               {"range", {number(edges[static_cast<size_t>(o.bin)]), number(edges[static_cast<size_t>(o.bin) + 1])}},
               {"matches", r.matches},
               {"shown", static_cast<int64_t>(r.picks.size())},
               {"sequence", snap->sequence},
               {"width", image.width},
               {"height", image.height}};
  out->caption = std::to_string(r.picks.size()) + " of the " + std::to_string(r.matches) + " " + o.kind +
                 " values of layer \"" + o.layer + "\"" + (o.channel ? " channel " + std::to_string(*o.channel) : "") +
                 " in bin " + std::to_string(o.bin) + " " + range + " at " + snap->position.to_string() +
                 ": each the input crop around the element, labelled with its sample, position and value.";
  return out;
}

}  // namespace nansense::server
