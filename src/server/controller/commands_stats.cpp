// The commands of statistics over time (controller_stats.cpp,
// controller_history.cpp) and of the Min/Max patches and bin samples
// (controller_patches.cpp), declared once (commands.h says what a
// declaration holds).
#include <algorithm>

#include "server/controller/command_parts.h"
#include "stats/bins.h"
#include "stats/histogram.h"

namespace nansense::server::command_parts {

namespace {

// The signed-log bin that holds `value` (bin i spans edges[i]..edges[i+1];
// the end bins take everything beyond +-1e6).
int64_t bin_of(double value) {
  const auto& edges = stats::bin_edges();
  const auto above = std::upper_bound(edges.begin(), edges.end(), value);
  const int64_t bin = static_cast<int64_t>(above - edges.begin()) - 1;
  return std::clamp<int64_t>(bin, 0, stats::kBins - 1);
}

}  // namespace

std::vector<Command> stats_commands() {
  std::vector<Command> t;
  // --- statistics over time (controller_history.cpp) ---
  const std::string settings_reply =
      " Returns the settings: update_frequency {unit, n, phase}, stats_scope, watched_layers, watch_performance "
      "{channel_limit_enabled, channel_limit, histogram_sample, samples_per_channel, average_patches}, "
      "patch_layers (the layers Min/Max patches collect for; null: the watched layers), stats_collecting "
      "(whether batches are collected now), "
      "auto_run_experiments, experiment_defaults (the session's parameter defaults per experiment kind) and "
      "experiment_time_limit_seconds.";
  t.push_back({
      .name = "get_settings",
      .title = "Statistics and live-update settings",
      .description =
          "How often a running loop is captured and published without pausing (update_frequency), which "
          "layers collect statistics over time (stats_scope none/watched/all, watched_layers), how much "
          "per-channel detail is kept (watch_performance), whether collection is on (stats_collecting), and "
          "the experiments' settings: auto_run_experiments, experiment_defaults ({kind: {param: value}}, set "
          "by set_experiment_defaults) and experiment_time_limit_seconds.",
      .args = {},
      .rest = Route{"GET", "/api/settings"},
      .mcp = true,
      .read_only = true,
      .reply = "Settings",
      .run = [](Controller& c, const Args&) { return json_reply(c.stats().get_settings()); },
  });
  t.push_back({
      .name = "set_update_frequency",
      .title = "Set the live-update cadence",
      .description =
          "While the loop runs, capture and publish a batch without pausing every n batches (of one phase "
          "when phase is given), every n epochs (the epoch's first batch) or every n seconds of training, so "
          "get_status, the stats tools and pictures follow the run. A detached run captures nothing. The "
          "statistics are also published when a phase's loop ends, so a loop shorter than the cadence shows "
          "them at its end. The default, every 2 seconds, costs about 1% on the demo; every batch costs what "
          "capture costs (about 1.5x a batch)." +
          settings_reply,
      .args = {string_arg("unit", "What n counts (default epoch, as in NaNsense 0.4.0).")
                   .one_of({"batch", "epoch", "seconds"})
                   .or_else("epoch"),
               number_arg("n", "How many: a whole number >= 1 for batch and epoch, any number > 0 for seconds.")
                   .above(0)
                   .at_most(1e6)
                   .or_else(1),
               string_arg("phase", "Unit batch only: count only this phase's batches, e.g. \"train\".").not_empty()},
      .rest = Route{"POST", "/api/stats/update_frequency"},
      .old_routes = {Route{"POST", "/api/settings/update_frequency"}},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(
                c.stats().set_update_frequency(a.string("unit"), a.number("n"), a.optional_string("phase")));
          },
  });
  t.push_back({
      .name = "set_stats_scope",
      .title = "Choose which layers collect statistics",
      .description =
          "none: collect nothing (what was collected stays); watched: the watched layers (watch_layers); all: "
          "every layer but pure shape ops. Narrowing to watched drops what the other layers collected. "
          "Collection runs on the batches' own device with no copy; its cost grows with the values folded "
          "(the demo CNN: 3 layers about 5x a plain batch, every layer about 10x)." +
          settings_reply,
      .args = {string_arg("scope", "Which layers collect.").one_of({"none", "watched", "all"}).mandatory()},
      .rest = Route{"POST", "/api/stats/scope"},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run = [](Controller& c, const Args& a) { return json_reply(c.stats().set_stats_scope(a.string("scope"))); },
  });
  t.push_back({
      .name = "watch_layers",
      .title = "Watch layers",
      .description = "Add layers to the watched set: with stats_scope watched (the default) they collect per-epoch "
                     "statistics of their activations and gradients from the next batch on. Names come from "
                     "get_architecture; unknown names are refused, naming each, and nothing changes." +
                     settings_reply,
      .args = {kLayers.mandatory()},
      .rest = Route{"POST", "/api/stats/watch"},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run = [](Controller& c, const Args& a) { return json_reply(c.stats().watch_layers(a.strings("layers"))); },
  });
  t.push_back({
      .name = "unwatch_layers",
      .title = "Stop watching layers",
      .description = "Remove layers from the watched set; with stats_scope watched their collected statistics are "
                     "dropped at the next batch." +
                     settings_reply,
      .args = {kLayers.mandatory()},
      .rest = Route{"POST", "/api/stats/unwatch"},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run = [](Controller& c, const Args& a) { return json_reply(c.stats().unwatch_layers(a.strings("layers"))); },
  });
  t.push_back({
      .name = "set_watch_performance",
      .title = "Per-channel detail of the statistics",
      .description = "How many channels (dim 1) keep their own histogram, and how many values of each tensor the CPU "
                     "histograms count (count, mean, std, min, max, non-finite counts and dead channels stay exact). "
                     "Any effective change flushes the layer statistics "
                     "collected so far (statistics_flushed says whether it did); logged scalars, metrics and parameter "
                     "samples stay. Arguments left out keep their value." +
                     settings_reply,
      .args =
          {boolean_arg("channel_limit_enabled",
                       "Keep per-channel histograms for only the first channel_limit "
                       "channels (default true)."),
           integer_arg("channel_limit", "Channels kept per layer when limited (default 16).").at_least(1).at_most(4096),
           integer_arg("histogram_sample",
                       "On the CPU, the most values of each tensor a histogram counts, "
                       "evenly spread (default 16384; 0 counts every value).")
               .at_least(0),
           integer_arg("samples_per_channel",
                       "Inputs a Min/Max gallery keeps per channel and ranking "
                       "(default 5; 0 turns patches off).")
               .at_least(0)
               .at_most(64),
           boolean_arg("average_patches",
                       "Also rank inputs by a channel's spatial mean (max_average, "
                       "min_average), keeping whole inputs (default false).")},
      .rest = Route{"POST", "/api/stats/performance"},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run =
          [](Controller& c, const Args& a) {
            StatsArea::PerformanceChange change;
            change.channel_limit_enabled = a.optional_boolean("channel_limit_enabled");
            change.channel_limit = a.optional_integer("channel_limit");
            change.histogram_sample = a.optional_integer("histogram_sample");
            change.samples_per_channel = a.optional_integer("samples_per_channel");
            change.average_patches = a.optional_boolean("average_patches");
            return json_reply(c.stats().set_watch_performance(change));
          },
  });
  t.push_back({
      .name = "set_patch_layers",
      .title = "Which layers keep Min/Max patches",
      .description =
          "Which collected layers keep Min/Max patches (the inputs that drove each channel highest and "
          "lowest): these layers, or, with layers omitted, the watched ones (the default: scope all collects "
          "every layer's statistics but patches only for the watched). Galleries cost the most time and "
          "memory of the statistics; histograms and graphs are unaffected, and patches already collected "
          "stay." +
          settings_reply,
      .args = {kLayers.described("Layer names from get_architecture; omit for the watched layers.")},
      .rest = Route{"POST", "/api/stats/patch_layers"},
      .mcp = true,
      .read_only = false,
      .reply = "Settings",
      .run = [](Controller& c,
                const Args& a) { return json_reply(c.stats().set_patch_layers(a.optional_strings("layers"))); },
  });
  t.push_back({
      .name = "list_stats",
      .title = "What statistics were collected",
      .description = "The statistics collected over time: layers in graph order with their phases and the epochs each "
                     "has, the parameters sampled per layer, the logged scalar and metric series (name, phase, layer), "
                     "the 212 signed-log bin edges and the device memory held. sequence grows with every publish.",
      .args = {},
      .rest = Route{"GET", "/api/stats"},
      .mcp = true,
      .read_only = true,
      .reply = "StatsList",
      .run = [](Controller& c, const Args&) { return json_reply(c.stats().list_stats()); },
  });
  t.push_back({
      .name = "get_stats_history",
      .title = "A layer's statistics per epoch",
      .description = "Per phase and epoch, a layer's activation and gradient statistics over every collected batch: n, "
                     "sum, sum_sq, mean, std, median, min, max over finite values, NaN/+Inf/-Inf counts, dead channels "
                     "(every value in the zero band |x| < 1e-9) and, for the newest epoch, histograms over the " +
                     stats::bins_description() +
                     " (edges given) for the layer and per channel; plus its parameters' samples at each "
                     "epoch's first collected batch (norms, mean, std, min, max of value and gradient, update_ratio = "
                     "||step change|| / ||weight||).",
      .args = {kLayer.mandatory(), string_arg("phase", "Only this phase, e.g. \"train\".").not_empty()},
      .rest = Route{"GET", "/api/stats/history"},
      .mcp = true,
      .read_only = true,
      .reply = "StatsHistory",
      .run =
          [](Controller& c, const Args& a) {
            return json_reply(c.stats().get_stats_history(a.string("layer"), a.optional_string("phase")));
          },
  });
  t.push_back({
      .name = "get_current_stats",
      .title = "A layer's statistics in the last captured batch",
      .description = "The same statistics as get_stats_history (same bins and channel limit) over the last captured "
                     "batch only, for any layer, watched or not.",
      .args = {kLayer.mandatory()},
      .rest = Route{"GET", "/api/stats/current"},
      .mcp = true,
      .read_only = true,
      .reply = "CurrentStats",
      .run = [](Controller& c, const Args& a) { return json_reply(c.stats().get_current_stats(a.string("layer"))); },
  });
  t.push_back({
      .name = "get_metrics",
      .title = "Logged scalars and metric series",
      .description = "Every series logged with session.log_scalar (loss, accuracy, ...) and every watch_metric "
                     "instrument's series per layer and phase: points {epoch, batch (null for an epoch-reduced point), "
                     "x = epoch + batch / batches in the phase, value}; failed lists instruments that threw and were "
                     "disabled.",
      .args = {kLayers.described("Only the metric series of these layers (logged scalars always come); omit for "
                                 "all.")},
      .rest = Route{"GET", "/api/metrics"},
      .mcp = true,
      .read_only = true,
      .reply = "Metrics",
      .run = [](Controller& c, const Args& a) { return json_reply(c.stats().get_metrics(a.strings("layers"))); },
  });
  t.push_back({
      .name = "render_histogram",
      .title = "Picture a layer's value distribution",
      .description = "A PNG chart of the newest epoch's histograms over the " + stats::bins_description() +
                     ": per layer a panel for activations and one for "
                     "gradients, a coloured series per phase, end bins that hold +-Inf marked as clipped. Drawn by the "
                     "server with axes, labels and a legend, under 1568 px.",
      .args = {kLayers.mandatory().items(1, 8),
               string_arg("phase", "Only this phase; omit for every phase.").not_empty(),
               boolean_arg("log_x",
                           "Symmetric log x axis: every bin the same width (default false: a linear "
                           "value axis over the occupied bins).")
                   .or_else(false),
               boolean_arg("log_y", "Log count axis.").or_else(false),
               integer_arg("channel", "One channel's histogram (an index along dim 1) instead of the layer's.")
                   .at_least(0)},
      .rest = Route{"GET", "/api/render/histogram"},
      .mcp = true,
      .read_only = true,
      .reply = "HistogramInfo",
      .run =
          [](Controller& c, const Args& a) {
            StatsArea::HistogramOptions o;
            o.layers = a.strings("layers");
            o.phase = a.optional_string("phase");
            o.log_x = a.boolean("log_x");
            o.log_y = a.boolean("log_y");
            o.channel = a.optional_integer("channel");
            Reply r;
            r.histogram = c.stats().render_histogram(o);
            return r;
          },
  });
  return t;
}

// Min/Max patches and bin samples (controller_patches.cpp).
std::vector<Command> patch_commands() {
  std::vector<Command> t;
  const Arg patch_phase =
      string_arg("phase", "The phase; omit for the training phase when it has patches, else the first that does.")
          .not_empty();
  const Arg heatmap = boolean_arg("heatmap",
                                  "Overlay the channel's activation on each input, signed (red "
                                  "positive, blue negative; default false).")
                          .or_else(false);
  const Arg current_batch = boolean_arg("current_batch",
                                        "The last captured batch alone, for any layer (watched or not), instead of "
                                        "an epoch's collected gallery; phase is then not used (default false).")
                                .or_else(false);
  auto patch_options = [](const Args& a) {
    PatchArea::PatchOptions o;
    o.layer = a.string("layer");
    o.phase = a.optional_string("phase");
    o.heatmap = a.boolean("heatmap");
    o.current_batch = a.boolean("current_batch");
    return o;
  };
  t.push_back({
      .name = "get_patches",
      .title = "A Min/Max gallery's cells",
      .description =
          "One grid of a layer's Min/Max gallery in the newest epoch of a phase: per channel (the first "
          "channel_limit) and slot, the input that drove the channel highest (max_*) or lowest (min_*), where "
          "it came from (batch, sample, the position in the activation, the crop's origin), its score and the "
          "crop as a base64 PNG.",
      .args = {kLayer.mandatory(), patch_phase,
               string_arg("grid",
                          "max_pixel / min_pixel (input crops around the extreme position), or "
                          "max_average / min_average (whole inputs, with average_patches on).")
                   .one_of({"max_pixel", "min_pixel", "max_average", "min_average"})
                   .or_else("max_pixel")
                   .formerly("ranking"),
               heatmap, current_batch},
      .rest = Route{"GET", "/api/stats/patches"},
      .mcp = false,
      .read_only = true,
      .reply = "Patches",
      .run =
          [=](Controller& c, const Args& a) {
            auto o = patch_options(a);
            o.grids = {a.string("grid")};
            return json_reply(c.patches().get_patches(o));
          },
  });
  t.push_back({
      .name = "render_extreme_patches",
      .title = "Picture the inputs that drive each channel",
      .description =
          "A PNG of a layer's Min/Max patches for the newest epoch of a phase: per grid a table with a column "
          "per channel and a row per kept sample, each cell the input crop around where the channel was highest "
          "(max_pixel) or lowest (min_pixel), or the whole input ranked by the channel's mean (max_average, "
          "min_average: needs average_patches in set_watch_performance). Collected for watched layers with "
          "an image-like model input.",
      .args = {kLayer.mandatory(), patch_phase,
               strings_arg("grids",
                           "Rankings to draw (default every one collected: max_pixel and min_pixel, and "
                           "max_average and min_average with average_patches on).")
                   .one_of({"max_pixel", "min_pixel", "max_average", "min_average"})
                   .items(1, 4),
               heatmap, current_batch},
      .rest = Route{"GET", "/api/render/patches"},
      .mcp = true,
      .read_only = true,
      .reply = "PatchesPicture",
      .run =
          [=](Controller& c, const Args& a) {
            auto o = patch_options(a);
            o.grids = a.strings("grids");
            Reply r;
            r.picture = c.patches().render_extreme_patches(o);
            return r;
          },
  });
  auto bin_options = [](const Args& a) {
    PatchArea::BinSampleOptions o;
    o.layer = a.string("layer");
    o.kind = a.string("kind");
    o.channel = a.optional_integer("channel");
    o.bin = a.integer("bin");
    o.count = a.integer("count");
    return o;
  };
  const std::vector<Arg> bin_args = {
      kLayer.mandatory(),
      string_arg("kind", "Which tensor: the activation or its gradient.")
          .one_of({"activation", "gradient"})
          .or_else("activation"),
      integer_arg("channel", "A channel (dim 1); omit for the whole layer.").at_least(0),
      integer_arg("bin", "The histogram bin, 0..210 (105 is the zero band; list_stats gives the edges).")
          .mandatory()
          .at_least(0)
          .at_most(210),
      integer_arg("count", "How many elements to show (default 6).").at_least(1).at_most(32).or_else(6)};
  t.push_back({
      .name = "get_bin_samples",
      .title = "Elements in a histogram bin",
      .description =
          "A few elements of the last captured batch whose value falls in a histogram bin (of one channel, or "
          "the whole layer), drawn at random (the same ones for the same snapshot): per element its sample, "
          "position and value, and the input crop around it as a base64 PNG.",
      .args = bin_args,
      .rest = Route{"GET", "/api/stats/bin_samples"},
      .mcp = false,
      .read_only = true,
      .reply = "BinSamples",
      .run = [=](Controller& c, const Args& a) { return json_reply(c.patches().get_bin_samples(bin_options(a))); },
  });
  t.push_back({
      .name = "render_bin_samples",
      .title = "Picture the inputs behind a histogram bar",
      .description = "A PNG of a few elements of the last captured batch whose value falls in a histogram bin (of one "
                     "channel or the whole layer): per element the input crop around it with its sample, position and "
                     "value.",
      .args = {bin_args[0], bin_args[1], bin_args[2],
               integer_arg("bin",
                           "The histogram bin, 0..210 (105 is the zero band; list_stats gives the edges). Give "
                           "bin or value.")
                   .at_least(0)
                   .at_most(210),
               number_arg("value",
                          "A value, e.g. a bin centre from get_layer_stats' histogram pairs or a value read off "
                          "render_histogram; it is snapped to the signed-log bin that holds it (NaNsense 0.4.0's "
                          "argument). Give bin or value."),
               integer_arg("count", "How many elements to show (default 4).").at_least(1).at_most(32).or_else(4)},
      .rest = Route{"GET", "/api/render/bin_samples"},
      .mcp = true,
      .read_only = true,
      .reply = "BinSamplesPicture",
      .run =
          [=](Controller& c, const Args& a) {
            PatchArea::BinSampleOptions o;
            o.layer = a.string("layer");
            o.kind = a.string("kind");
            o.channel = a.optional_integer("channel");
            o.count = a.integer("count");
            const auto bin = a.optional_integer("bin");
            const auto value = a.optional_number("value");
            if (bin.has_value() == value.has_value()) {
              throw Refusal(Refusal::Kind::kInvalidArgument,
                            bin ? "give bin or value, not both" : "give bin (0..210) or value (snapped to its bin)",
                            "bin");
            }
            o.bin = bin ? *bin : bin_of(*value);
            Reply r;
            r.picture = c.patches().render_bin_samples(o);
            return r;
          },
  });
  return t;
}

}  // namespace nansense::server::command_parts
