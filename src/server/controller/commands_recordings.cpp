// The commands of recordings and snapshots (controller_recordings.cpp,
// recorder.h), declared once (commands.h says what a declaration holds).
#include <algorithm>

#include "common/text.h"
#include "server/controller/command_parts.h"
#include "server/controller/recorder.h"

namespace nansense::server::command_parts {

namespace {

const std::string kViews =
    "layers: the main page's strips of `layers` (activation and gradient, one sample; default the watched layers, "
    "or every layer but shape ops when none is watched, at most 64); weights: `layer`'s Weights page (every tensor "
    "of its parameters); histograms: the Stats page's histograms of `layers` (default the layers with collected "
    "statistics, at most 8); patches: `layer`'s Min/Max patches (max/min pixel, and max/min average when "
    "average_patches is on, as separate files; `layers` naming one layer works too; default the first layer that "
    "collects patches); experiment: the Experiment page's picture of experiment `kind` on `layer` with `params` "
    "(the recording registers its own auto experiment, re-run at every live update whether or not auto-run is "
    "on, and released when the recording stops), attributions over the input with `overlay`.";

// At most this many layers in a view's default (a recording's frame is one
// picture; render_histogram draws at most 8 layers).
constexpr size_t kMaxDefaultStrips = 64;
constexpr size_t kMaxDefaultHistograms = 8;

const std::vector<std::string> kStripKinds = {"activation", "gradient", "both"};
const std::vector<std::string> kExperimentKinds = {"deep_dream", "gradcam", "neuron_gradient", "neuron_ig",
                                                   "occlusion"};

std::vector<Arg> view_args() {
  return {
      string_arg("view", "Which view. " + kViews)
          .one_of({"layers", "weights", "histograms", "patches", "experiment"})
          .mandatory(),
      kLayers.described("Views layers, histograms (and patches, one layer): the layers shown, e.g. "
                        "[\"features.0\", \"relu\"]; omit for the view's default (see view)."),
      kLayer.described("Views weights, patches and experiment: the layer shown, e.g. \"features.0\"."),
      string_arg("phase", "Views histograms and patches: one phase (default every phase / the training one).")
          .not_empty(),
      string_arg("kind",
                 "View layers: which strips of each layer (activation, gradient or both, the default); view "
                 "experiment: which experiment (deep_dream, gradcam, neuron_gradient, neuron_ig, occlusion).")
          .one_of(
              {"activation", "gradient", "both", "deep_dream", "gradcam", "neuron_gradient", "neuron_ig", "occlusion"}),
      object_arg("params", "View experiment: its parameters by key, as run_experiment takes them."),
      kSample,
      kAverage,
      kValues,
      boolean_arg("log_x", "View histograms: symmetric log x axis.").or_else(false),
      boolean_arg("log_y", "View histograms: log count axis.").or_else(false),
      integer_arg("channel", "View histograms: one channel's histogram (an index along dim 1).").at_least(0),
      boolean_arg("heatmap", "View patches: overlay the channel's activation on each crop.").or_else(false),
      boolean_arg("overlay", "View experiment: draw attributions over the input instead of beside it.").or_else(false)};
}

// save_snapshot's arguments: the views', and the experiment view's seq.
std::vector<Arg> snapshot_args() {
  auto args = view_args();
  args.push_back(integer_arg("seq",
                             "View experiment: save this already published result (run_experiment's seq; its kind "
                             "and layer are its own). Without seq and kind, the newest result.")
                     .at_least(1));
  return args;
}

// The layer names of the architecture, in graph order, that are in `wanted`
// (every one but shape ops when `wanted` is null).
std::vector<std::string> in_graph_order(Controller& c, const json& wanted) {
  std::vector<std::string> out;
  for (const auto& layer : c.views().get_architecture().layers) {
    const bool keep =
        wanted.is_null() ? !layer.shape_op : std::find(wanted.begin(), wanted.end(), json(layer.name)) != wanted.end();
    if (keep) out.push_back(layer.name);
  }
  return out;
}

std::vector<std::string> first(std::vector<std::string> names, size_t n) {
  if (names.size() > n) names.resize(n);
  return names;
}

// The defaults of the original NaNsense 0.4.0 (Python, on PyPI) for a view
// given no layers: what its page shows.
void default_layers(Controller& c, RecordView& v) {
  if (v.view == "layers" && v.layers.empty()) {
    // The main page's cards: the layers watched, else every layer.
    const json watched = c.stats().get_settings().watched_layers;
    v.layers = first(in_graph_order(c, watched.empty() ? json() : watched), kMaxDefaultStrips);
    if (v.layers.empty()) {
      throw Refusal(Refusal::Kind::kInvalidArgument,
                    "nothing to record: no layer is known yet (no batch captured); give layers", "layers");
    }
  } else if (v.view == "histograms" && v.layers.empty()) {
    // The Stats page: the layers with collected statistics.
    json collected = json::array();
    for (const auto& l : c.stats().list_stats().layers) collected.push_back(l.layer);
    v.layers = first(in_graph_order(c, collected), kMaxDefaultHistograms);
    if (v.layers.empty()) {
      throw Refusal(Refusal::Kind::kInvalidArgument,
                    "nothing to record: no layer has collected statistics yet; watch_layers (or set_stats_scope all) "
                    "and let the loop run a batch, or give layers",
                    "layers");
    }
  } else if (v.view == "patches" && v.layer.empty()) {
    if (v.layers.size() > 1) {
      throw Refusal(Refusal::Kind::kInvalidArgument,
                    "view patches records one layer: give layer (or layers with one name)", "layers");
    }
    if (v.layers.size() == 1) {
      v.layer = v.layers.front();
    } else {
      // The layers that collect patches: patch_layers, else the watched ones.
      const Settings settings = c.stats().get_settings();
      const json patched = settings.patch_layers ? *settings.patch_layers : settings.watched_layers;
      const auto layers = in_graph_order(c, patched);
      if (layers.empty()) {
        throw Refusal(Refusal::Kind::kInvalidArgument,
                      "nothing to record: no layer collects Min/Max patches; watch_layers first, or give layer",
                      "layer");
      }
      v.layer = layers.front();
    }
    v.layers.clear();
  }
}

RecordView view_of(Controller& c, const Args& a, bool snapshot = false) {
  RecordView v;
  v.view = a.string("view");
  v.layers = a.strings("layers");
  if (auto layer = a.optional_string("layer")) v.layer = *layer;
  v.phase = a.optional_string("phase");
  const auto kind = a.optional_string("kind");
  const auto& kinds = v.view == "experiment" ? kExperimentKinds : kStripKinds;
  if (kind && std::find(kinds.begin(), kinds.end(), *kind) == kinds.end()) {
    throw Refusal(Refusal::Kind::kInvalidArgument,
                  "view " + v.view + " takes kind " + common::join(kinds) + ", not \"" + *kind + "\"", "kind");
  }
  if (snapshot && a.has("seq")) {
    if (v.view != "experiment") {
      throw Refusal(Refusal::Kind::kInvalidArgument, "seq is for view experiment, not " + v.view, "seq");
    }
    v.seq = static_cast<uint64_t>(a.integer("seq"));
  }
  // save_snapshot without seq or kind: the newest result (save_snapshot resolves it).
  const bool newest = snapshot && v.view == "experiment" && !kind;
  if (v.view == "experiment" && !kind && !v.seq && !newest) {
    throw Refusal(Refusal::Kind::kInvalidArgument, "view experiment needs a kind: " + common::join(kinds), "kind");
  }
  v.kind = kind.value_or(v.view == "experiment" ? "" : "both");
  v.params = a.object("params");
  v.strip = strip_options(a);
  v.log_x = a.boolean("log_x");
  v.log_y = a.boolean("log_y");
  v.channel = a.optional_integer("channel");
  v.heatmap = a.boolean("heatmap");
  v.overlay = a.boolean("overlay");
  default_layers(c, v);
  if ((v.view == "weights" || (v.view == "experiment" && !v.seq && !newest)) && v.layer.empty()) {
    throw Refusal(Refusal::Kind::kInvalidArgument, "view " + v.view + " needs a layer", "layer");
  }
  return v;
}

const Arg kKey = string_arg("key",
                            "The recording's key from list_recordings: main, weights:<layer>, watch_histogram, "
                            "watch_minmax or experiment:<layer>. Omit for every active recording.")
                     .not_empty();

}  // namespace

std::vector<Command> recording_commands() {
  std::vector<Command> t;
  t.push_back({
      .name = "list_recordings",
      .title = "List the recordings",
      .description = "The folder recordings and snapshots go to (nansense_recordings/<run timestamp>/), the frame "
                     "rate (10 fps), the active recordings (key, label, view, frames written, frames dropped, files "
                     "with their size and error, the last error) and those saved in this run.",
      .args = {},
      .rest = Route{"GET", "/api/recordings"},
      .mcp = true,
      .read_only = true,
      .reply = "Recordings",
      .run = [](Controller& c, const Args&) { return json_reply(c.recordings().list_recordings()); },
  });
  t.push_back({
      .name = "get_recording_file",
      .title = "A saved recording's video",
      .description = "The MP4 of a recording saved in this run (a path list_recordings names under saved), as "
                     "video/mp4: inline for the page's player, or as an attachment with download. A file still "
                     "being recorded is refused until it is saved (stop_recording).",
      .args = {string_arg("path", "The file, as list_recordings names it under saved.").mandatory().not_empty(),
               boolean_arg("download", "Answer it as an attachment (a download) instead of inline.").or_else(false)},
      .rest = Route{"GET", "/api/recordings/file"},
      .mcp = false,
      .read_only = true,
      .reply = "",
      .run =
          [](Controller& c, const Args& a) {
            Reply r;
            r.file = c.recordings().get_recording_file(a.string("path"));
            r.download = a.boolean("download");
            return r;
          },
  });
  t.push_back({
      .name = "start_recording",
      .title = "Record a view as a video",
      .description =
          "Starts an H.264 MP4 of a view at 10 fps: a frame now and one at every live update (each snapshot "
          "published: the update cadence of set_update_frequency, a step; a paused run adds nothing), each "
          "stamped with its training position and drawn by the same renderers as the pages. The video's size is "
          "the first frame's (even sides, at most 1920x1080; later frames are fitted on white). Encoding runs "
          "off the training thread; frames the encoder cannot keep up with are dropped and counted. One "
          "recording per view key; refused when the view cannot be drawn now. " +
          kViews + " Returns the recording as list_recordings shows it.",
      .args = view_args(),
      .rest = Route{"POST", "/api/recordings/start"},
      .mcp = true,
      .read_only = false,
      .reply = "Recording",
      .run = [](Controller& c, const Args& a) { return json_reply(c.recordings().start_recording(view_of(c, a))); },
  });
  t.push_back({
      .name = "stop_recording",
      .title = "Save and finish a recording",
      .description = "Encodes what is queued and closes the MP4 (one, or every active recording) so it plays "
                     "everywhere; returns each with its files and frame counts. session.close() does this for "
                     "every recording.",
      .args = {kKey},
      .rest = Route{"POST", "/api/recordings/stop"},
      .mcp = true,
      .read_only = false,
      .reply = "RecordingsStopped",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.recordings().stop_recording(a.optional_string("key"))); },
  });
  t.push_back({
      .name = "discard_recording",
      .title = "Delete a recording",
      .description = "Stops a recording (one, or every active one) without saving and removes its files.",
      .args = {kKey},
      .rest = Route{"POST", "/api/recordings/discard"},
      .mcp = true,
      .read_only = false,
      .reply = "RecordingsDiscarded",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.recordings().discard_recording(a.optional_string("key"))); },
  });
  t.push_back({
      .name = "save_snapshot",
      .title = "Save a view as PNG",
      .description = "The view drawn now, as a recording's frame would be, saved as PNG in the recordings folder: "
                     "<view>_ep<E>_<phase>_b<B>.png (patches: _pixel and _average), never overwriting (-2, -3 "
                     "are added). " +
                     kViews + " Returns the paths, the position and the snapshot sequence drawn.",
      .args = snapshot_args(),
      .rest = Route{"POST", "/api/recordings/snapshot"},
      .mcp = true,
      .read_only = false,
      .reply = "SnapshotSaved",
      .run = [](Controller& c, const Args& a) { return json_reply(c.recordings().save_snapshot(view_of(c, a, true))); },
  });
  return t;
}

}  // namespace nansense::server::command_parts
