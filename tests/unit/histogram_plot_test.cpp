// The histogram chart (render_histogram's picture), its text and tick labels,
// asserted on the pixels: where each series' colour lands, what log y reveals,
// the clipped-bin triangles, the marks, the size cap, the messages.
#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>

#include "render/axis_ticks.h"
#include "render/histogram_plot.h"
#include "render/text.h"

namespace {

using namespace nansense::render;

constexpr int kBins = 211;
constexpr int kZeroBand = 105;

// The signed-log edges of stats/histogram.h, built here so the test stands on
// its own: 7 per decade over |x| in 1e-9..1e6 each side, a zero band between.
std::vector<double> signed_log_edges() {
  std::vector<double> positive;
  for (int k = -63; k <= 42; ++k) positive.push_back(std::pow(10.0, k / 7.0));
  std::vector<double> edges;
  for (auto it = positive.rbegin(); it != positive.rend(); ++it) edges.push_back(-*it);
  edges.insert(edges.end(), positive.begin(), positive.end());
  return edges;
}

const Rgba kRed{220, 38, 38, 255};
const Rgba kBlue{37, 99, 235, 255};

bool reddish(Rgba p) { return p.r > p.g + 50 && p.r > p.b + 50; }
bool bluish(Rgba p) { return p.b > p.r + 50 && p.b > p.g + 40; }
bool dark(Rgba p) { return p.r < 100 && p.g < 100 && p.b < 100; }
bool white(Rgba p) { return p.r == 255 && p.g == 255 && p.b == 255; }

HistogramSeries series(std::string label, Rgba color, std::vector<std::pair<int, int64_t>> bins) {
  HistogramSeries s{std::move(label), color, std::vector<int64_t>(kBins, 0)};
  for (auto [bin, count] : bins) s.counts[bin] = count;
  return s;
}

HistogramPlotOptions options(bool log_x, bool log_y = false) {
  HistogramPlotOptions o;
  o.log_x = log_x;
  o.log_y = log_y;
  o.edges = signed_log_edges();
  return o;
}

// Columns holding a pixel `matches` accepts, in the lower two thirds of the
// image, below the titles and legends.
std::vector<int> columns_where(const Image& image, bool (*matches)(Rgba)) {
  std::vector<int> columns;
  for (int x = 0; x < image.width; ++x) {
    for (int y = image.height / 3; y < image.height; ++y) {
      if (matches(image.at(x, y))) {
        columns.push_back(x);
        break;
      }
    }
  }
  return columns;
}

// Runs of consecutive columns, as [first, last] pairs.
std::vector<std::pair<int, int>> runs(const std::vector<int>& columns) {
  std::vector<std::pair<int, int>> out;
  for (int c : columns) {
    if (out.empty() || c != out.back().second + 1)
      out.push_back({c, c});
    else
      out.back().second = c;
  }
  return out;
}

int count_pixels(const Image& image, bool (*matches)(Rgba)) {
  int n = 0;
  for (const auto& p : image.pixels) n += matches(p);
  return n;
}

// Pixels that differ between two images of one size.
std::vector<std::pair<int, int>> differences(const Image& a, const Image& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  std::vector<std::pair<int, int>> out;
  for (int y = 0; y < std::min(a.height, b.height); ++y) {
    for (int x = 0; x < std::min(a.width, b.width); ++x) {
      const Rgba p = a.at(x, y), q = b.at(x, y);
      if (p.r != q.r || p.g != q.g || p.b != q.b || p.a != q.a) out.push_back({x, y});
    }
  }
  return out;
}

Image blank(int w, int h) {
  Image image(w, h);
  std::fill(image.pixels.begin(), image.pixels.end(), Rgba{255, 255, 255, 255});
  return image;
}

TEST(Text, DrawsInkInsideItsBoxAndLongerTextIsWider) {
  Image image = blank(200, 40);
  const int width = draw_text(image, "count 1e-6", 10, 10, 13, Rgba{0, 0, 0, 255});
  EXPECT_EQ(width, text_width("count 1e-6", 13));
  int inked = 0, min_x = image.width, max_x = -1, min_y = image.height, max_y = -1;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      if (white(image.at(x, y))) continue;
      ++inked;
      min_x = std::min(min_x, x), max_x = std::max(max_x, x);
      min_y = std::min(min_y, y), max_y = std::max(max_y, y);
    }
  }
  EXPECT_GT(inked, 50);
  EXPECT_GE(min_x, 9);
  EXPECT_LE(max_x, 10 + width + 1);
  EXPECT_GE(min_y, 10);
  EXPECT_LE(max_y, 10 + line_height(13));
  EXPECT_GT(count_pixels(image, dark), 10);  // anti-aliased, yet solid at the stems

  EXPECT_GT(text_width("a much longer label", 13), text_width("a label", 13));
  EXPECT_GT(text_width("label", 16), text_width("label", 12));
  EXPECT_EQ(text_width("", 13), 0);
}

TEST(Text, ClipsAtTheImageEdgesAndTurnsForAxisLabels) {
  Image image = blank(30, 30);
  draw_text(image, "far too long for this image", -15, -5, 14, Rgba{0, 0, 0, 255});
  draw_text(image, "right", 30, 20, 14, Rgba{0, 0, 0, 255}, Align::kRight);
  EXPECT_GT(count_pixels(image, dark), 0);

  Image turned = blank(40, 200);
  draw_text_vertical(turned, "count (log)", 5, 100, 12, Rgba{0, 0, 0, 255});
  int min_x = turned.width, max_x = -1, min_y = turned.height, max_y = -1;
  for (int y = 0; y < turned.height; ++y) {
    for (int x = 0; x < turned.width; ++x) {
      if (white(turned.at(x, y))) continue;
      min_x = std::min(min_x, x), max_x = std::max(max_x, x);
      min_y = std::min(min_y, y), max_y = std::max(max_y, y);
    }
  }
  ASSERT_GE(max_x, 0);
  EXPECT_GT(max_y - min_y, 3 * (max_x - min_x));  // runs up the image
  EXPECT_NEAR((min_y + max_y) / 2.0, 100, 4);
  EXPECT_GE(min_x, 5);
}

TEST(Text, WrapsAtSpacesToTheWidth) {
  const auto lines = wrap_text("no gradients: the layer is frozen", 13, text_width("no gradients: the", 13));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "no gradients: the");
  EXPECT_EQ(lines[1], "layer is frozen");
  EXPECT_EQ(wrap_text("unbreakable", 13, 5), std::vector<std::string>{"unbreakable"});
  EXPECT_TRUE(wrap_text("", 13, 100).empty());
}

TEST(AxisTicks, StepsAndLabelsReadAsPeopleWriteThem) {
  EXPECT_DOUBLE_EQ(nice_step(0.7), 1);
  EXPECT_DOUBLE_EQ(nice_step(1.2), 2);
  EXPECT_DOUBLE_EQ(nice_step(3), 5);
  EXPECT_DOUBLE_EQ(nice_step(6), 10);
  EXPECT_DOUBLE_EQ(nice_step(2e-4), 2e-4);

  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(-3, 1), "-3");
  EXPECT_EQ(format_tick(1e-17, 0.1), "0");  // 0.3 - 0.1 * 3 is zero on the axis
  EXPECT_EQ(format_tick(200000, 100000), "2e5");
  EXPECT_EQ(format_tick(1.5e-4, 5e-5), "1.5e-4");
  EXPECT_EQ(format_tick(-2.5e6, 5e5), "-2.5e6");

  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(9500), "9500");
  EXPECT_EQ(format_count(12000), "12k");
  EXPECT_EQ(format_count(1.5e6), "1.5M");
  EXPECT_EQ(format_count(3e9), "3G");

  // Earlier ticks win; a later one that would touch them is dropped.
  const std::vector<Tick> ticks = {{100, "0"}, {104, "1e-9"}, {60, "-1e-3"}, {140, "1e-3"}};
  const auto kept = without_overlaps(
      ticks, [](const Tick&) { return 20; }, 4);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].label, "0");
  EXPECT_EQ(kept[1].label, "-1e-3");
  EXPECT_EQ(kept[2].label, "1e-3");
}

TEST(HistogramPlot, SizeStaysUnderTheCap) {
  const std::vector<HistogramPanel> one = {{"features.0 activations", {series("train", kRed, {{150, 10}})}, ""}};
  auto o = options(true);
  Image image = render_histogram_plot(one, o);
  EXPECT_EQ(image.width, 960);
  EXPECT_GE(image.height, 280);
  EXPECT_LE(image.height, 340);

  o.width = 5000;
  EXPECT_EQ(render_histogram_plot(one, o).width, 1568);
  o.width = 10;
  const Image narrow = render_histogram_plot(one, o);
  EXPECT_GT(narrow.width, 10);
  EXPECT_LE(narrow.width, 1568);

  std::vector<HistogramPanel> many(10, one[0]);
  const Image tall = render_histogram_plot(many, options(true));
  EXPECT_LE(tall.height, 1568);
  EXPECT_GE(tall.height, 1000);  // each panel shrinks, none disappears

  std::vector<HistogramPanel> too_many(40, one[0]);
  EXPECT_THROW(render_histogram_plot(too_many, options(true)), std::invalid_argument);
}

TEST(HistogramPlot, RefusesEdgesThatDoNotFitTheCounts) {
  const std::vector<HistogramPanel> one = {{"acts", {series("train", kRed, {{150, 10}})}, ""}};
  auto o = options(true);
  o.edges.pop_back();
  EXPECT_THROW(render_histogram_plot(one, o), std::invalid_argument);
  o = options(true);
  std::swap(o.edges[10], o.edges[11]);
  EXPECT_THROW(render_histogram_plot(one, o), std::invalid_argument);
  o = options(true);
  o.edges.clear();
  EXPECT_THROW(render_histogram_plot(one, o), std::invalid_argument);
  EXPECT_THROW(render_histogram_plot({}, options(true)), std::invalid_argument);
}

TEST(HistogramPlot, EachSeriesColoursItsOccupiedBinsOnly) {
  // Red over bins 140..150, blue over 160..170, nothing between.
  std::vector<std::pair<int, int64_t>> red_bins, blue_bins;
  for (int b = 140; b <= 150; ++b) red_bins.push_back({b, 1000});
  for (int b = 160; b <= 170; ++b) blue_bins.push_back({b, 800});
  const std::vector<HistogramPanel> panels = {
      {"conv activations", {series("train", kRed, red_bins), series("val", kBlue, blue_bins)}, ""}};
  const Image image = render_histogram_plot(panels, options(true));

  const auto red = runs(columns_where(image, reddish));
  const auto blue = runs(columns_where(image, bluish));
  ASSERT_EQ(red.size(), 1u);
  ASSERT_EQ(blue.size(), 1u);
  EXPECT_LT(red[0].second + 5, blue[0].first);  // nine empty bins between them
  // Symlog: every bin the same width, so eleven bins each make equal bars.
  EXPECT_NEAR(red[0].second - red[0].first, blue[0].second - blue[0].first, 2);

  // In the empty bins between them, no colour of either series, only the
  // white ground, grid and axis greys.
  for (int x = red[0].second + 2; x < blue[0].first - 1; ++x) {
    for (int y = image.height / 3; y < image.height; ++y) {
      ASSERT_FALSE(reddish(image.at(x, y)) || bluish(image.at(x, y))) << x << "," << y;
    }
  }
}

TEST(HistogramPlot, LinearAxisDrawsBarsAtTheirTrueEdges) {
  // Bins 148 and 155 start at 1 and 10 (7 bins a decade above 1e-9 at bin
  // 106): the second is ten times wider on a value axis.
  const std::vector<HistogramPanel> panels = {{"acts", {series("train", kRed, {{148, 50}, {155, 50}})}, ""}};
  const Image image = render_histogram_plot(panels, options(false));
  const auto red = runs(columns_where(image, reddish));
  ASSERT_EQ(red.size(), 2u);
  const double narrow = red[0].second - red[0].first + 1, wide = red[1].second - red[1].first + 1;
  EXPECT_NEAR(wide / narrow, 10.0, 1.5);

  // The zero band is two billionths wide, yet its bar shows.
  const std::vector<HistogramPanel> with_zeros = {{"relu", {series("train", kRed, {{kZeroBand, 500}, {160, 50}})}, ""}};
  const auto zero_and_far = runs(columns_where(render_histogram_plot(with_zeros, options(false)), reddish));
  ASSERT_EQ(zero_and_far.size(), 2u);
  EXPECT_LE(zero_and_far[0].second - zero_and_far[0].first, 2);
}

TEST(HistogramPlot, LogCountsRevealBarsTooSmallForALinearAxis) {
  const std::vector<HistogramPanel> panels = {{"grads", {series("train", kRed, {{140, 1'000'000}, {150, 1}})}, ""}};
  const auto linear = runs(columns_where(render_histogram_plot(panels, options(true, false)), reddish));
  const auto log = runs(columns_where(render_histogram_plot(panels, options(true, true)), reddish));
  EXPECT_EQ(linear.size(), 1u);  // one count in a million is under a pixel
  ASSERT_EQ(log.size(), 2u);
  EXPECT_LT(log[0].second, log[1].first);
}

TEST(HistogramPlot, ClippedEndBinsGetATriangleOnlyWhenTheyOverflow) {
  auto plain = series("train", kRed, {{0, 20}, {150, 40}, {kBins - 1, 30}});
  const Image without = render_histogram_plot({{"acts", {plain}, ""}}, options(true));

  for (int side = 0; side < 2; ++side) {
    auto clipped = plain;
    (side == 0 ? clipped.neg_overflow : clipped.pos_overflow) = 3;
    const Image with = render_histogram_plot({{"acts", {clipped}, ""}}, options(true));
    const auto changed = differences(without, with);
    ASSERT_GT(changed.size(), 10u) << "side " << side;
    int min_x = with.width, max_x = 0;
    for (auto [x, y] : changed) {
      EXPECT_TRUE(dark(with.at(x, y))) << x << "," << y;
      min_x = std::min(min_x, x), max_x = std::max(max_x, x);
    }
    // On the end bin's own side: the left tenth for -inf, the right for +inf.
    if (side == 0)
      EXPECT_LT(max_x, with.width / 10);
    else
      EXPECT_GT(min_x, with.width * 9 / 10);
  }
}

TEST(HistogramPlot, MarksAreDrawnInsideTheSpanAndLeftOutOutsideIt) {
  std::vector<std::pair<int, int64_t>> left_bins, right_bins;
  for (int b = 140; b <= 145; ++b) left_bins.push_back({b, 100});
  for (int b = 160; b <= 165; ++b) right_bins.push_back({b, 100});
  const std::vector<HistogramPanel> panels = {
      {"acts", {series("train", kRed, left_bins), series("val", kBlue, right_bins)}, ""}};
  for (bool log_x : {true, false}) {
    auto o = options(log_x);
    const Image none = render_histogram_plot(panels, o);
    const auto red = runs(columns_where(none, reddish));
    const auto blue = runs(columns_where(none, bluish));
    ASSERT_EQ(red.size(), 1u);
    ASSERT_EQ(blue.size(), 1u);

    // Bin 153 starts at 10^(47/7 - 9), between the two series.
    o.marks = {std::pow(10.0, 47.0 / 7 - 9)};
    const auto changed = differences(none, render_histogram_plot(panels, o));
    ASSERT_GT(changed.size(), 20u) << "log_x " << log_x;
    std::set<int> columns;
    for (auto [x, y] : changed) columns.insert(x);
    EXPECT_EQ(columns.size(), 1u);
    EXPECT_GT(*columns.begin(), red[0].second);
    EXPECT_LT(*columns.begin(), blue[0].first);

    // Outside the drawn span: fp32's max/16 on either axis; its tiny on the
    // symlog axis, which ends at 1e-9 (a linear one shows it at zero); 1 on
    // the linear axis, which ends near 5e-3.
    o.marks = {2.1267647e37, -2.1267647e37};
    if (log_x)
      o.marks.insert(o.marks.end(), {1.17549435e-38, -1.17549435e-38});
    else
      o.marks.push_back(1.0);
    EXPECT_TRUE(differences(none, render_histogram_plot(panels, o)).empty()) << "log_x " << log_x;
  }
}

TEST(HistogramPlot, AnEmptyPanelSaysWhy) {
  const HistogramPanel data{"features.0 activations", {series("train", kRed, {{150, 10}})}, ""};
  const Image off = render_histogram_plot({data, {"features.0 gradients", {}, "statistics are off"}}, options(true));
  const Image other =
      render_histogram_plot({data, {"features.0 gradients", {}, "no backward pass yet"}}, options(true));
  const auto changed = differences(off, other);
  ASSERT_FALSE(changed.empty());
  // The reason sits in the second panel, the only part that differs.
  for (auto [x, y] : changed) EXPECT_GT(y, off.height / 2);
  int ink = 0;
  for (int y = off.height / 2; y < off.height; ++y) {
    for (int x = 0; x < off.width; ++x) ink += !white(off.at(x, y));
  }
  EXPECT_GT(ink, 100);

  // Only empty panels: still a picture, saying so.
  const Image nothing = render_histogram_plot({{"acts", {}, ""}}, options(true));
  EXPECT_GT(count_pixels(nothing, [](Rgba p) { return !white(p); }), 100);
}

// Pictures to look at, written to $TMPDIR: two panels with overlaid phases,
// marks, a clipped bin and an empty panel below; sixteen channels on a linear
// axis.
TEST(HistogramPlot, WritesASamplePicture) {
  auto bell = [](int center, double spread, double peak) {
    std::vector<std::pair<int, int64_t>> bins;
    for (int b = 0; b < kBins; ++b) {
      const double z = (b - center) / spread;
      if (const auto c = static_cast<int64_t>(peak * std::exp(-z * z / 2)); c > 0) bins.push_back({b, c});
    }
    return bins;
  };
  auto train = series("train ep 3", Rgba{217, 119, 6, 255}, bell(150, 6, 40000));
  auto val = series("val ep 3", Rgba{59, 130, 246, 255}, bell(145, 5, 25000));
  train.counts[kZeroBand] = 30000;
  auto grads_train = series("train ep 3", Rgba{217, 119, 6, 255}, bell(128, 7, 9000));
  for (auto [b, c] : bell(82, 7, 9000)) grads_train.counts[b] += c;
  grads_train.counts[kBins - 1] = 12;
  grads_train.pos_overflow = 4;
  auto o = options(true, true);
  o.marks = {6.1e-5, -6.1e-5, 4094};  // fp16's tiny and max/16
  const std::vector<HistogramPanel> panels = {
      {"features.0 activations", {train, val}, ""},
      {"features.0 gradients", {grads_train}, ""},
      {"classifier.2 gradients", {}, "no gradients: the layer is frozen (requires_grad is false)"}};
  const Image image = render_histogram_plot(panels, o);
  const std::string png = encode_png(image);
  int w = 0, h = 0, components = 0;
  ASSERT_TRUE(stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(png.data()), static_cast<int>(png.size()), &w, &h,
                                    &components));
  EXPECT_EQ(w, image.width);
  EXPECT_EQ(h, image.height);
  const char* dir = std::getenv("TMPDIR");
  const std::string stem = std::string(dir && *dir ? dir : "/tmp") + "/nansense_histogram_plot";
  std::ofstream out(stem + ".png", std::ios::binary);
  out << png;
  EXPECT_TRUE(out.good()) << "cannot write " << stem << ".png";

  // Per channel on a linear axis: sixteen series, the legend in rows.
  std::vector<HistogramSeries> channels;
  for (int c = 0; c < 16; ++c) {
    const Rgba color{static_cast<uint8_t>(40 + 13 * c), static_cast<uint8_t>(200 - 9 * c),
                     static_cast<uint8_t>(90 + 10 * c), 255};
    channels.push_back(series("channel " + std::to_string(c), color, bell(150 + c % 5, 2 + c % 3, 900 + 60 * c)));
  }
  o.log_x = false;
  o.log_y = false;
  o.marks.clear();
  std::ofstream per_channel(stem + "_channels.png", std::ios::binary);
  per_channel << encode_png(render_histogram_plot({{"features.3 activations, per channel", channels, ""}}, o));
  EXPECT_TRUE(per_channel.good()) << "cannot write " << stem << "_channels.png";
}

}  // namespace
