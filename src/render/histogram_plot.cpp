#include "render/histogram_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "render/axis_ticks.h"
#include "render/draw.h"
#include "render/text.h"

namespace nansense::render {

namespace {

constexpr int kMaxSide = 1568;  // MCP's image cap, on both sides
constexpr int kMinWidth = 320;  // below this the axes and legend have no room
constexpr int kPanelHeight = 300;
constexpr int kMinPanelHeight = 120;
constexpr int kEmptyPanelHeight = 110;  // a title and its reason need no more
constexpr int kPad = 10;
constexpr int kTickLength = 4;
constexpr int kSwatch = 10;
constexpr int kMaxLegendRows = 3;  // past this the legend says how many it left out
constexpr int kMinLogBins = 21;    // a symlog axis spans at least three decades
constexpr float kTitlePx = 14;
constexpr float kLabelPx = 12;
constexpr float kMessagePx = 13;
// A count of 1 sits half a decade above the log axis' floor, so it shows.
constexpr double kLogFloor = -0.30103;  // log10(0.5)
// Overlaid series stay visible through each other.
constexpr uint8_t kFillAlpha = 110;

constexpr Rgba kBackground{255, 255, 255, 255};
constexpr Rgba kTitleColor{17, 24, 39, 255};
constexpr Rgba kLabelColor{75, 85, 99, 255};
constexpr Rgba kAxisColor{156, 163, 175, 255};
constexpr Rgba kGridColor{233, 235, 239, 255};
constexpr Rgba kMarkColor{55, 65, 81, 255};
constexpr Rgba kOverflowColor{31, 41, 55, 255};

Rgba with_alpha(Rgba c, uint8_t a) { return {c.r, c.g, c.b, a}; }

// Bins first..last, inclusive; empty when last < first.
struct BinSpan {
  int first = 0;
  int last = -1;
  bool empty() const { return last < first; }
};

void validate(const std::vector<HistogramPanel>& panels, const std::vector<double>& edges) {
  if (panels.empty()) throw std::invalid_argument("histogram plot: there are no panels to draw");
  if (edges.size() < 2) {
    throw std::invalid_argument("histogram plot: options.edges must hold the bin edges (at least 2), it has " +
                                std::to_string(edges.size()));
  }
  for (size_t i = 0; i + 1 < edges.size(); ++i) {
    if (!(edges[i] < edges[i + 1])) {
      throw std::invalid_argument("histogram plot: options.edges must ascend, but edge " + std::to_string(i) + " (" +
                                  std::to_string(edges[i]) + ") is not below edge " + std::to_string(i + 1) + " (" +
                                  std::to_string(edges[i + 1]) + ")");
    }
  }
  for (const auto& panel : panels) {
    for (const auto& series : panel.series) {
      if (series.counts.size() + 1 != edges.size()) {
        throw std::invalid_argument("histogram plot: series '" + series.label + "' of panel '" + panel.title +
                                    "' has " + std::to_string(series.counts.size()) + " counts, but the " +
                                    std::to_string(edges.size()) + " edges make " + std::to_string(edges.size() - 1) +
                                    " bins");
      }
    }
  }
}

bool has_counts(const HistogramPanel& panel) {
  return std::any_of(panel.series.begin(), panel.series.end(), [](const HistogramSeries& s) {
    return std::any_of(s.counts.begin(), s.counts.end(), [](int64_t c) { return c > 0; });
  });
}

BinSpan occupied_bins(const std::vector<HistogramPanel>& panels) {
  BinSpan span{std::numeric_limits<int>::max(), -1};
  for (const auto& panel : panels) {
    for (const auto& series : panel.series) {
      for (int b = 0; b < static_cast<int>(series.counts.size()); ++b) {
        if (series.counts[b] > 0) {
          span.first = std::min(span.first, b);
          span.last = std::max(span.last, b);
        }
      }
    }
  }
  return span;
}

bool is_power_of_ten(double v, int* exponent = nullptr) {
  if (v == 0) return false;
  const double l = std::log10(std::abs(v));
  const double k = std::round(l);
  if (exponent) *exponent = static_cast<int>(k);
  return std::abs(l - k) < 1e-6;
}

// The symlog axis starts and ends on whole decades (or zero), so its end ticks
// are labelled and the data never touches the frame.
BinSpan widen_to_decades(BinSpan bins, const std::vector<double>& edges) {
  const int last_edge = static_cast<int>(edges.size()) - 1;
  auto decade = [&](int e) { return edges[e] == 0 || is_power_of_ten(edges[e]); };
  auto down = [&](int e) {
    while (e > 0 && !decade(e)) --e;
    return e;
  };
  auto up = [&](int e) {
    while (e < last_edge && !decade(e)) ++e;
    return e;
  };
  int lo = down(bins.first), hi = up(bins.last + 1);
  while (hi - lo < kMinLogBins && (lo > 0 || hi < last_edge)) {
    if (lo > 0) lo = down(lo - 1);
    if (hi < last_edge) hi = up(hi + 1);
  }
  return {lo, hi - 1};
}

// 0.01, 0.1, 1, 10, 100 in full; 1e-6, 1e3 beyond.
std::string decade_label(int exponent, bool negative) {
  static const char* kNear[] = {"0.01", "0.1", "1", "10", "100"};
  std::string s = exponent >= -2 && exponent <= 2 ? kNear[exponent + 2] : "1e" + std::to_string(exponent);
  return negative ? "-" + s : s;
}

// The value axis: where bins and values land between the plot's left and
// right pixel edges, and its labelled ticks.
class XAxis {
 public:
  XAxis(const std::vector<double>& edges, BinSpan bins, bool log_x, int left, int right)
      : left(left), right(right), edges_(edges), bins_(bins), log_x_(log_x) {
    if (!log_x_) {
      // A little room either side so the outer bars do not touch the frame.
      const double lo = edges_[bins.first], hi = edges_[bins.last + 1], pad = (hi - lo) * 0.02;
      lo_ = lo - pad;
      hi_ = hi + pad;
    }
  }

  const int left, right;

  // Pixel x of bin edge `e` (bin b spans edges b and b + 1).
  double edge_x(int e) const {
    if (log_x_) return left + (e - bins_.first) * bin_width();
    return left + (edges_[e] - lo_) / (hi_ - lo_) * (right - left);
  }

  // The pixel columns [first, second) a bin's bar covers: at least one, so
  // the narrowest bins of a linear axis still show.
  std::pair<int, int> columns(int bin) const {
    const int x0 = static_cast<int>(std::floor(edge_x(bin)));
    const int x1 = std::max(x0 + 1, static_cast<int>(std::floor(edge_x(bin + 1))));
    return {std::clamp(x0, left, right - 1), std::clamp(x1, left + 1, right)};
  }

  // Pixel x of `value`; none outside the drawn span.
  std::optional<double> position(double value) const {
    if (!log_x_) {
      if (!(value >= lo_ && value <= hi_)) return std::nullopt;
      return left + (value - lo_) / (hi_ - lo_) * (right - left);
    }
    if (!(value >= edges_[bins_.first] && value <= edges_[bins_.last + 1])) return std::nullopt;
    const int bin =
        std::clamp(static_cast<int>(std::upper_bound(edges_.begin(), edges_.end(), value) - edges_.begin()) - 1,
                   bins_.first, bins_.last);
    const double a = edges_[bin], b = edges_[bin + 1];
    // Within a bin of one sign the axis is logarithmic; across zero, linear.
    const double fraction = (a > 0 || b < 0) ? std::log(value / a) / std::log(b / a) : (value - a) / (b - a);
    return left + (bin - bins_.first + fraction) * bin_width();
  }

  std::vector<Tick> ticks(float px) const {
    auto width = [px](const Tick& t) { return text_width(t.label, px); };
    return without_overlaps(log_x_ ? decade_ticks(px) : linear_ticks(), width, 10);
  }

 private:
  double bin_width() const { return static_cast<double>(right - left) / (bins_.last - bins_.first + 1); }

  // Zero first (it wins against the +-1e-9 labels beside it), then every
  // `step`-th decade, the step the smallest whose labels fit.
  std::vector<Tick> decade_ticks(float px) const {
    std::vector<Tick> ticks;
    for (int b = bins_.first; b <= bins_.last; ++b) {
      if (edges_[b] < 0 && edges_[b + 1] > 0) ticks.push_back({(edge_x(b) + edge_x(b + 1)) / 2, "0"});
    }
    struct Decade {
      int edge, exponent;
    };
    std::vector<Decade> decades;
    for (int e = bins_.first; e <= bins_.last + 1; ++e) {
      int exponent = 0;
      if (edges_[e] == 0)
        ticks.push_back({edge_x(e), "0"});
      else if (is_power_of_ten(edges_[e], &exponent))
        decades.push_back({e, exponent});
    }
    double per_decade = right - left;
    int widest = 0;
    for (size_t i = 0; i < decades.size(); ++i) {
      const auto& d = decades[i];
      widest = std::max(widest, text_width(decade_label(d.exponent, edges_[d.edge] < 0), px));
      if (i > 0 && (edges_[decades[i - 1].edge] < 0) == (edges_[d.edge] < 0)) {
        per_decade = std::min(per_decade, std::abs(edge_x(d.edge) - edge_x(decades[i - 1].edge)) /
                                              std::abs(d.exponent - decades[i - 1].exponent));
      }
    }
    int step = 1;
    for (int s : {1, 3, 6, 15}) {
      step = s;
      if (s * per_decade >= widest + 12) break;
    }
    for (const auto& d : decades) {
      if (d.exponent % step == 0) ticks.push_back({edge_x(d.edge), decade_label(d.exponent, edges_[d.edge] < 0)});
    }
    return ticks;
  }

  std::vector<Tick> linear_ticks() const {
    const double step = nice_step((hi_ - lo_) / std::max(2, (right - left) / 90));
    std::vector<Tick> ticks;
    for (double k = std::ceil(lo_ / step); k * step <= hi_; ++k) {
      const double v = k * step;
      ticks.push_back({left + (v - lo_) / (hi_ - lo_) * (right - left), format_tick(v, step)});
    }
    return ticks;
  }

  const std::vector<double>& edges_;
  BinSpan bins_;
  bool log_x_;
  double lo_ = 0, hi_ = 1;  // the linear axis' value span
};

// A panel's count axis, linear or logarithmic, from the plot's bottom row up.
class YAxis {
 public:
  YAxis(int64_t max_count, bool log_y, int top, int bottom) : log_y_(log_y), top_(top), bottom_(bottom) {
    const double m = std::max<double>(1, max_count);
    if (log_y_) {
      max_ = std::max(1.0, std::ceil(std::log10(m) + 0.15));
    } else {
      step_ = std::max(1.0, nice_step(m / 4));  // counts are whole
      max_ = std::ceil(m * 1.05 / step_) * step_;
    }
  }

  // Bar height in pixels; on a log axis a count of 0 draws nothing.
  int height(double count) const {
    if (count <= 0) return 0;
    const double f = log_y_ ? (std::log10(count) - kLogFloor) / (max_ - kLogFloor) : count / max_;
    return static_cast<int>(std::lround(std::clamp(f, 0.0, 1.0) * (bottom_ - top_)));
  }

  std::vector<Tick> ticks(float px) const {
    std::vector<Tick> ticks;
    if (log_y_) {
      // Every decade when the labels have room, else every k-th.
      const double per_decade = (bottom_ - top_) / (max_ - kLogFloor);
      const int step = static_cast<int>(std::ceil((line_height(px) + 4) / per_decade));
      for (int k = 0; k <= max_; k += std::max(step, 1)) {
        ticks.push_back({bottom_ - per_decade * (k - kLogFloor), format_count(std::pow(10.0, k))});
      }
    } else {
      for (double v = 0; v <= max_ * (1 + 1e-9); v += step_) {
        ticks.push_back({bottom_ - v / max_ * (bottom_ - top_), format_count(v)});
      }
    }
    const int h = line_height(px);
    return without_overlaps(
        ticks, [h](const Tick&) { return h; }, 2);
  }

 private:
  bool log_y_;
  int top_, bottom_;
  double max_ = 1;   // the count at the top (log: its log10)
  double step_ = 1;  // linear tick spacing
};

// A small solid triangle pointing left (direction -1) or right (+1), centred
// on (cx, cy): the mark of an end bin that holds clipped (+-inf) values.
void draw_triangle(Image& image, int cx, int cy, int direction, Rgba color) {
  constexpr int r = 5;
  const int base = cx - direction * r / 2;
  for (int dy = -r; dy <= r; ++dy) {
    for (int i = 0; i <= r - std::abs(dy); ++i) blend(image, base + direction * i, cy + dy, color);
  }
}

struct LegendEntry {
  int x, y;
  const HistogramSeries* series;  // null: the "N more" note
  std::string text;
};

// A panel's title row and legend: the legend right of the title when it fits
// there, else in rows below it.
struct Header {
  int height = 0;
  std::vector<LegendEntry> legend;
};

Header lay_out_header(const HistogramPanel& panel, int width, bool with_legend) {
  const int title_h = line_height(kTitlePx), row_h = line_height(kLabelPx) + 4, gap = 16;
  Header header{kPad / 2 + title_h, {}};
  if (!with_legend) return header;
  std::vector<const HistogramSeries*> labelled;
  std::vector<int> widths;
  int total = -gap;
  for (const auto& s : panel.series) {
    if (s.label.empty()) continue;
    labelled.push_back(&s);
    widths.push_back(kSwatch + 5 + text_width(s.label, kLabelPx));
    total += widths.back() + gap;
  }
  if (labelled.empty()) return header;

  if (kPad + text_width(panel.title, kTitlePx) + 24 + total <= width - kPad) {
    int x = width - kPad - total;
    const int y = kPad / 2 + (title_h - line_height(kLabelPx)) / 2;
    for (size_t i = 0; i < labelled.size(); ++i) {
      header.legend.push_back({x, y, labelled[i], labelled[i]->label});
      x += widths[i] + gap;
    }
    return header;
  }
  int x = kPad, row = 0;
  for (size_t i = 0; i < labelled.size(); ++i) {
    if (x > kPad && x + widths[i] > width - kPad) {
      x = kPad;
      ++row;
    }
    if (row == kMaxLegendRows) {
      // No room: the last entry gives way to a count of those left out.
      auto& last = header.legend.back();
      last.series = nullptr;
      last.text = std::to_string(labelled.size() - i + 1) + " more";
      break;
    }
    header.legend.push_back({x, header.height + row * row_h + 2, labelled[i], labelled[i]->label});
    x += widths[i] + gap;
  }
  header.height = header.legend.back().y + row_h;
  return header;
}

void draw_header(Image& image, const HistogramPanel& panel, const Header& header, int top) {
  draw_text(image, panel.title, kPad, top + kPad / 2, kTitlePx, kTitleColor);
  const int swatch_dy = (line_height(kLabelPx) - kSwatch) / 2;
  for (const auto& e : header.legend) {
    if (!e.series) {
      draw_text(image, e.text, e.x, top + e.y, kLabelPx, kLabelColor);
      continue;
    }
    const int sx = e.x, sy = top + e.y + swatch_dy;
    fill_rect(image, sx, sy, sx + kSwatch, sy + kSwatch, with_alpha(e.series->color, kFillAlpha));
    const Rgba line = with_alpha(e.series->color, 255);
    horizontal_line(image, sx, sx + kSwatch - 1, sy, line);
    horizontal_line(image, sx, sx + kSwatch - 1, sy + kSwatch - 1, line);
    vertical_line(image, sx, sy, sy + kSwatch - 1, line);
    vertical_line(image, sx + kSwatch - 1, sy, sy + kSwatch - 1, line);
    draw_text(image, e.text, sx + kSwatch + 5, top + e.y, kLabelPx, kTitleColor);
  }
}

// Where a panel's parts go, worked out before anything is drawn: the left
// margin depends on every panel's count labels.
struct PanelLayout {
  int top = 0;
  Header header;
  int plot_top = 0, plot_bottom = 0;
  std::optional<YAxis> y;
  std::vector<Tick> y_ticks;
};

void draw_empty_panel(Image& image, const HistogramPanel& panel, const PanelLayout& layout, int left, int right) {
  const Rgba frame = kAxisColor;
  horizontal_line(image, left, right - 1, layout.plot_top, frame);
  horizontal_line(image, left, right - 1, layout.plot_bottom, frame);
  vertical_line(image, left, layout.plot_top, layout.plot_bottom, frame);
  vertical_line(image, right - 1, layout.plot_top, layout.plot_bottom, frame);
  const auto lines =
      wrap_text(panel.empty_reason.empty() ? "no data" : panel.empty_reason, kMessagePx, right - left - 2 * kPad);
  const int lh = line_height(kMessagePx);
  int y = (layout.plot_top + layout.plot_bottom) / 2 - lh * static_cast<int>(lines.size()) / 2;
  for (const auto& line : lines) {
    draw_text(image, line, (left + right) / 2, y, kMessagePx, kLabelColor, Align::kCenter);
    y += lh;
  }
}

void draw_data_panel(Image& image, const HistogramPanel& panel, const PanelLayout& layout, const XAxis& x, BinSpan bins,
                     const HistogramPlotOptions& options) {
  const YAxis& y = *layout.y;
  const int top = layout.plot_top, bottom = layout.plot_bottom;
  const auto x_ticks = x.ticks(kLabelPx);

  for (const auto& t : layout.y_ticks)
    horizontal_line(image, x.left, x.right - 1, static_cast<int>(std::lround(t.pos)), kGridColor);
  for (const auto& t : x_ticks) vertical_line(image, static_cast<int>(std::lround(t.pos)), top, bottom - 1, kGridColor);

  // One height per pixel column and series: where several narrow bins share
  // a column, the tallest shows, and overlapping bins never darken twice.
  std::vector<std::vector<int>> heights;
  for (const auto& s : panel.series) {
    auto& h = heights.emplace_back(x.right - x.left, 0);
    for (int b = bins.first; b <= bins.last; ++b) {
      const int bar = y.height(static_cast<double>(s.counts[b]));
      const auto [c0, c1] = x.columns(b);
      for (int c = c0; c < c1; ++c) h[c - x.left] = std::max(h[c - x.left], bar);
    }
  }
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const Rgba fill = with_alpha(panel.series[i].color, kFillAlpha);
    for (int c = 0; c < static_cast<int>(heights[i].size()); ++c) {
      if (heights[i][c] > 0) fill_rect(image, x.left + c, bottom - heights[i][c], x.left + c + 1, bottom, fill);
    }
  }
  // Each series' outline over all fills: a step line along its bars' tops and
  // down their exposed sides.
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const Rgba line = with_alpha(panel.series[i].color, 255);
    const auto& h = heights[i];
    for (int c = 0; c < static_cast<int>(h.size()); ++c) {
      if (h[c] == 0) continue;
      const int left_h = c > 0 ? h[c - 1] : 0, right_h = c + 1 < static_cast<int>(h.size()) ? h[c + 1] : 0;
      const int exposed_to = std::min({left_h, right_h, h[c] - 1});
      vertical_line(image, x.left + c, bottom - h[c], bottom - exposed_to - 1, line);
    }
  }

  // Axes, ticks and labels.
  const int label_h = line_height(kLabelPx);
  vertical_line(image, x.left - 1, top, bottom, kAxisColor);
  horizontal_line(image, x.left - 1, x.right - 1, bottom, kAxisColor);
  for (const auto& t : layout.y_ticks) {
    const int ty = static_cast<int>(std::lround(t.pos));
    horizontal_line(image, x.left - 1 - kTickLength, x.left - 1, ty, kAxisColor);
    draw_text(image, t.label, x.left - kTickLength - 4, ty - label_h / 2, kLabelPx, kLabelColor, Align::kRight);
  }
  for (const auto& t : x_ticks) {
    const int tx = static_cast<int>(std::lround(t.pos));
    vertical_line(image, tx, bottom, bottom + kTickLength, kAxisColor);
    draw_text(image, t.label, tx, bottom + kTickLength + 2, kLabelPx, kLabelColor, Align::kCenter);
  }
  draw_text_vertical(image, options.log_y ? "count (log)" : "count", kPad, (top + bottom) / 2, kLabelPx, kLabelColor);

  for (double mark : options.marks) {
    if (auto px = x.position(mark)) {
      const int mx = std::clamp(static_cast<int>(std::lround(*px)), x.left, x.right - 1);
      dotted_vertical_line(image, mx, top, bottom - 1, kMarkColor);
    }
  }

  // Clipped end bins: a triangle above the bar, pointing off the axis.
  const int last_bin = static_cast<int>(options.edges.size()) - 2;
  auto mark_clipped = [&](const HistogramSeries& s, int bin, int direction) {
    if (bin < bins.first || bin > bins.last || s.counts[bin] <= 0) return;
    const auto [c0, c1] = x.columns(bin);
    const int bar_top = bottom - y.height(static_cast<double>(s.counts[bin]));
    draw_triangle(image, (c0 + c1 - 1) / 2, std::max(top + 6, bar_top - 8), direction, kOverflowColor);
  };
  for (const auto& s : panel.series) {
    if (s.neg_overflow > 0) mark_clipped(s, 0, -1);
    if (s.pos_overflow > 0) mark_clipped(s, last_bin, +1);
  }
}

}  // namespace

Image render_histogram_plot(const std::vector<HistogramPanel>& panels, const HistogramPlotOptions& options) {
  validate(panels, options.edges);
  const int width = std::clamp(options.width, kMinWidth, kMaxSide);
  BinSpan bins = occupied_bins(panels);
  if (!bins.empty() && options.log_x) bins = widen_to_decades(bins, options.edges);

  const int n = static_cast<int>(panels.size());
  std::vector<bool> data(n);
  for (int i = 0; i < n; ++i) data[i] = !bins.empty() && has_counts(panels[i]);
  const int data_n = static_cast<int>(std::count(data.begin(), data.end(), true));
  const int label_h = line_height(kLabelPx);
  const int x_label_h = data_n > 0 ? label_h + 6 : 0;
  const int data_room = kMaxSide - x_label_h - (n - data_n) * kEmptyPanelHeight;
  const int panel_h = data_n > 0 ? std::min(kPanelHeight, data_room / data_n) : 0;
  if (data_room < 0 || (data_n > 0 && panel_h < kMinPanelHeight)) {
    throw std::invalid_argument("histogram plot: " + std::to_string(n) + " panels do not fit in " +
                                std::to_string(kMaxSide) + " px (one with data needs " +
                                std::to_string(kMinPanelHeight) + ", an empty one " +
                                std::to_string(kEmptyPanelHeight) + ")");
  }
  int captioned = -1;  // the last panel with data: the value axis' caption goes under it
  for (int i = 0; i < n; ++i) {
    if (data[i]) captioned = i;
  }

  std::vector<PanelLayout> layouts(n);
  int top = 0, widest_count = 0;
  for (int i = 0; i < n; ++i) {
    auto& l = layouts[i];
    l.top = top;
    l.header = lay_out_header(panels[i], width, data[i]);
    l.plot_top = l.top + l.header.height + 10;
    const int height = data[i] ? panel_h : kEmptyPanelHeight;
    l.plot_bottom = l.top + height - (kTickLength + 2 + label_h + 6);
    top += height + (i == captioned ? x_label_h : 0);
    if (!data[i]) continue;
    int64_t max_count = 0;
    for (const auto& s : panels[i].series) {
      for (int b = bins.first; b <= bins.last; ++b) max_count = std::max(max_count, s.counts[b]);
    }
    l.y.emplace(max_count, options.log_y, l.plot_top, l.plot_bottom);
    l.y_ticks = l.y->ticks(kLabelPx);
    for (const auto& t : l.y_ticks) widest_count = std::max(widest_count, text_width(t.label, kLabelPx));
  }
  Image image(width, top);
  std::fill(image.pixels.begin(), image.pixels.end(), kBackground);
  // Room for the turned "count" label, then the count labels, then the ticks.
  const int left = kPad + label_h + 6 + widest_count + kTickLength + 5;
  const int right = width - kPad - 12;

  std::optional<XAxis> x;
  if (!bins.empty()) x.emplace(options.edges, bins, options.log_x, left, right);
  for (int i = 0; i < n; ++i) {
    draw_header(image, panels[i], layouts[i].header, layouts[i].top);
    if (layouts[i].y)
      draw_data_panel(image, panels[i], layouts[i], *x, bins, options);
    else
      draw_empty_panel(image, panels[i], layouts[i], left, right);
  }
  if (captioned >= 0) {
    draw_text(image, options.log_x ? "value (signed log: equal-width bins)" : "value", (left + right) / 2,
              layouts[captioned].top + panel_h + 1, kLabelPx, kLabelColor, Align::kCenter);
  }
  return image;
}

}  // namespace nansense::render
