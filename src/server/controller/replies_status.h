// The replies of the patch area, typed (reply.h):
// each struct lists its fields once, with what each means, and both its JSON
// and its JSON Schema in wire_types() come from that list. Torch-free, like
// replies.h, so that wire_types.cpp reads them on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nansense/position.h"
#include "server/controller/replies.h"
#include "server/controller/reply.h"

namespace nansense::server {

// --- Min/Max patches and bin samples (PatchArea). ---

// One (slot, channel) cell of a patch grid.
struct PatchCell {
  static constexpr const char* kWireName = "PatchCell";
  int64_t slot = 0;
  int64_t channel = 0;
  bool filled = false;
  json score = nullptr;  // common::number, or null for an empty slot
  int64_t batch = 0;
  int64_t sample = 0;
  int64_t y = 0;
  int64_t x = 0;
  int64_t top = 0;
  int64_t left = 0;
  std::optional<std::string> png;
  template <class Fields>
  static void fields(Fields& f) {
    using C = PatchCell;
    f.field("slot", &C::slot, "Its rank among the channel's kept inputs (0: the best).");
    f.field("channel", &C::channel, "Its channel.");
    f.field("filled", &C::filled, "Whether the slot holds an input yet.");
    f.field("score", &C::score, "The channel's value that ranked it; null for an empty slot.",
            {{"anyOf", {{{"$ref", "#/$defs/Num"}}, {{"type", "null"}}}}});
    f.field("batch", &C::batch, "The batch it came from.");
    f.field("sample", &C::sample, "The sample of that batch.");
    f.field("y", &C::y, "Where in the activation the channel responded (row).");
    f.field("x", &C::x, "Where in the activation the channel responded (column).");
    f.field("top", &C::top, "The crop's top row in the input.");
    f.field("left", &C::left, "The crop's left column in the input.");
    f.field("png", &C::png, "Base64 PNG of the crop; null for an empty slot.");
  }
};

// A patch crop's size in input pixels.
struct PatchCrop {
  static constexpr const char* kWireName = "PatchCrop";
  int64_t height = 0;
  int64_t width = 0;
  template <class Fields>
  static void fields(Fields& f) {
    f.field("height", &PatchCrop::height, "Its height (0 when there are no cells).");
    f.field("width", &PatchCrop::width, "Its width (0 when there are no cells).");
  }
};

// get_patches' reply: one ranking's grid of a layer's Min/Max patches.
struct Patches {
  static constexpr const char* kWireName = "Patches";
  std::string layer;
  std::string phase;
  int64_t epoch = 0;
  std::vector<std::string> phases;
  bool current_batch = false;
  std::optional<std::string> position;
  std::string grid;
  std::vector<std::string> grids;
  bool heatmap = false;
  int64_t samples = 0;
  int64_t channels = 0;
  PatchCrop crop;
  uint64_t sequence = 0;
  std::optional<std::string> note;
  std::vector<PatchCell> cells;
  template <class Fields>
  static void fields(Fields& f) {
    using P = Patches;
    const json grid = {{"$ref", "#/$defs/PatchGrid"}};
    f.field("layer", &P::layer, "The layer.");
    f.field("phase", &P::phase, "The phase of the gallery (the batch's, for current_batch).");
    f.field("epoch", &P::epoch, "The epoch of the gallery (the batch's, for current_batch).");
    f.field("phases", &P::phases, "The phases that have patches for the layer.");
    f.field("current_batch", &P::current_batch,
            "Whether it is the last captured batch's gallery rather than an epoch's.");
    f.field("position", &P::position, "current_batch: the batch's position as text; null for an epoch's gallery.");
    f.field("grid", &P::grid, "The ranking shown.", grid);
    f.field("grids", &P::grids, "The rankings collected.", {{"type", "array"}, {"items", grid}});
    f.field("heatmap", &P::heatmap, "Whether the channel's activation is drawn over each crop.");
    f.field("samples", &P::samples, "The rows: inputs kept per channel.");
    f.field("channels", &P::channels, "The columns: channels with patches.");
    f.field("crop", &P::crop, "The crops' size.");
    f.field("sequence", &P::sequence, "The sequence of the statistics view or snapshot it comes from.");
    f.field("note", &P::note, "Why there are no cells, or what the cells leave out; null when nothing to say.");
    f.field("cells", &P::cells, "The grid's cells, row by row.");
  }
};

// One element of a histogram bin, with the input crop around it.
struct BinSample {
  static constexpr const char* kWireName = "BinSample";
  int64_t sample = 0;
  std::vector<int64_t> index;
  json value;  // common::number
  int64_t top = 0;
  int64_t left = 0;
  std::optional<std::string> png;
  template <class Fields>
  static void fields(Fields& f) {
    using S = BinSample;
    f.field("sample", &S::sample, "The sample of the batch.");
    f.field("index", &S::index, "The element's coordinates after the batch dimension.");
    f.field("value", &S::value, "Its value.", {{"$ref", "#/$defs/Num"}});
    f.field("top", &S::top, "The crop's top row in the input.");
    f.field("left", &S::left, "The crop's left column in the input.");
    f.field("png", &S::png, "Base64 PNG of the input crop; null without an image input.");
  }
};

// get_bin_samples' reply: a few elements of the last captured batch in a
// histogram bin.
struct BinSamples {
  static constexpr const char* kWireName = "BinSamples";
  std::string layer;
  std::string kind;
  std::optional<int64_t> channel;
  int64_t bin = 0;
  std::vector<json> range;  // common::number: the bin's edges
  int64_t matches = 0;
  uint64_t sequence = 0;
  BatchPosition position;
  std::optional<std::string> note;
  std::vector<BinSample> samples;
  template <class Fields>
  static void fields(Fields& f) {
    using B = BinSamples;
    f.field("layer", &B::layer, "The layer.");
    f.field("kind", &B::kind, "Activations or gradients.", {{"$ref", "#/$defs/StripKind"}});
    f.field("channel", &B::channel, "The channel; null: the whole layer.");
    f.field("bin", &B::bin, "The histogram bin.");
    f.field("range", &B::range, "The bin's edges [low, high].",
            {{"type", "array"}, {"items", {{"$ref", "#/$defs/Num"}}}});
    f.field("matches", &B::matches, "Elements in the bin among the kept samples.");
    f.field("sequence", &B::sequence, "The snapshot's sequence.");
    f.field("position", &B::position, "The snapshot's batch.");
    f.field("note", &B::note, "What the samples leave out; null when nothing to say.");
    f.field("samples", &B::samples, "The elements picked (the same ones for the same snapshot and bin).");
  }
};

}  // namespace nansense::server
