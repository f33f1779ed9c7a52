// Histograms over the signed-log bins (stats/histogram.h) drawn as a chart:
// one panel per kind (activations, gradients), one coloured series per phase
// or channel, axes with tick labels, a legend, and the clipped end bins
// marked. What MCP's render_histogram returns (kept under 1568 px).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "render/image.h"

namespace nansense::render {

struct HistogramSeries {
  std::string label;  // "train ep 3", "channel 5"
  Rgba color{0, 0, 0, 255};
  std::vector<int64_t> counts;  // one per signed-log bin (211)
  // Of the end bins' counts, how many were +-inf (drawn as clipped).
  int64_t neg_overflow = 0;
  int64_t pos_overflow = 0;
};

struct HistogramPanel {
  std::string title;                    // "features.0 activations"
  std::vector<HistogramSeries> series;  // empty: the panel says "no data"
  std::string empty_reason;             // why there is no data, when empty
};

struct HistogramPlotOptions {
  // Symlog x: every bin the same width, spanning the occupied bins widened to
  // whole decades, three at least (off: a linear value axis spanning the
  // occupied bins, each bar at its true edges and at least 1 px wide).
  bool log_x = false;
  bool log_y = false;  // log count axis
  // Dotted vertical lines (e.g. +-finfo.tiny, +-finfo.max/16); lines outside
  // the drawn span are left out.
  std::vector<double> marks;
  int width = 960;  // clamped to 320..1568
  // The bin edges, ascending: one more than each series has counts (212 for
  // stats/histogram.h's bins). Given here so that render/ needs nothing of
  // stats/. The end bins are open-ended: they are drawn between their nominal
  // edges (edges.front(), edges.back()).
  std::vector<double> edges;
};

// Panels stacked top to bottom, sharing the x axis; about 300 px each, fewer
// when that would pass 1568 px in all. A panel without counts is a short frame
// saying its empty_reason ("no data" when that is empty). Throws std::invalid_argument for edges
// that are not ascending or do not match a series' counts, and for more panels
// than fit in 1568 px.
Image render_histogram_plot(const std::vector<HistogramPanel>& panels, const HistogramPlotOptions& options);

}  // namespace nansense::render
