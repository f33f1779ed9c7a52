// The input pane's renderer: denormalised images, transforms, strips, hints.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <torch/torch.h>

#include <limits>

#include "render/colormap.h"
#include "render/input_image.h"
#include "render/value_grid.h"

namespace {

using namespace nansense::render;

TEST(InputImage, GrayInputIsDenormalisedWithMeanAndStd) {
  // Normalised pixels: (v - 0.5) / 0.25 for v = 0, 0.5, 1 and 0.25.
  auto x = torch::zeros({2, 1, 2, 2});
  x[1][0] = torch::tensor({{-2.0, 0.0}, {2.0, -1.0}});
  InputImageOptions options;
  options.sample = 1;
  options.mean = {0.5};
  options.std = {0.25};
  InputImage out = render_input(x, options);
  EXPECT_EQ(out.layout, "image");
  EXPECT_TRUE(out.hint.empty());
  EXPECT_EQ(out.batch_size, 2);
  ASSERT_EQ(out.image.width, 2);
  ASSERT_EQ(out.image.height, 2);
  EXPECT_EQ(out.image.at(0, 0).r, 0);
  EXPECT_EQ(out.image.at(1, 0).g, 128);
  EXPECT_EQ(out.image.at(0, 1).b, 255);
  EXPECT_EQ(out.image.at(1, 1).r, 64);
  EXPECT_EQ(out.image.at(1, 1).a, 255);
}

TEST(InputImage, RgbUsesOneMeanAndStdPerChannel) {
  auto x = torch::zeros({1, 3, 1, 1});
  InputImageOptions options;
  options.mean = {0.2, 0.4, 0.6};
  options.std = {1.0, 1.0, 1.0};
  InputImage out = render_input(x, options);
  EXPECT_EQ(out.image.at(0, 0).r, 51);
  EXPECT_EQ(out.image.at(0, 0).g, 102);
  EXPECT_EQ(out.image.at(0, 0).b, 153);
  options.mean = {0.1, 0.2};
  EXPECT_THROW(render_input(x, options), std::invalid_argument);
}

TEST(InputImage, OutOfRangeValuesAreScaledAndTheHintSaysWhy) {
  auto x = torch::tensor({0.0f, 255.0f}).reshape({1, 1, 1, 2});
  InputImage out = render_input(x, {});
  EXPECT_EQ(out.image.at(0, 0).r, 0);
  EXPECT_EQ(out.image.at(1, 0).r, 255);
  EXPECT_NE(out.hint.find("input_mean"), std::string::npos);
}

TEST(InputImage, NonFinitePixelsAreMarked) {
  auto x = torch::full({1, 1, 2, 2}, 0.5);
  x[0][0][0][0] = std::numeric_limits<double>::quiet_NaN();
  InputImage out = render_input(x, {});
  EXPECT_EQ(out.image.at(0, 0).r, 255);  // magenta half of the NaN checker
  EXPECT_EQ(out.image.at(0, 0).g, 0);
  EXPECT_EQ(out.image.at(1, 1).g, 128);
}

TEST(InputImage, OtherChannelCountsNeedATransform) {
  auto x = torch::rand({2, 5, 3, 3});
  InputImage strip = render_input(x, {});
  EXPECT_EQ(strip.layout, "strip");
  EXPECT_NE(strip.hint.find("input_transform"), std::string::npos);

  InputImageOptions options;
  options.transform = [](const torch::Tensor& s) { return s.slice(0, 0, 3); };
  InputImage image = render_input(x, options);
  EXPECT_EQ(image.layout, "image");
  EXPECT_TRUE(image.hint.empty());
  EXPECT_EQ(image.image.width, 3);

  options.transform = [](const torch::Tensor& s) { return s.flatten(); };
  EXPECT_THROW(render_input(x, options), std::invalid_argument);
}

TEST(InputImage, FlatInputsBecomeAStripAndSamplesAreChecked) {
  auto x = torch::randn({4, 10});
  InputImageOptions options;
  options.sample = 3;
  InputImage out = render_input(x, options);
  EXPECT_EQ(out.layout, "strip");
  EXPECT_EQ(out.image.width, 10);
  options.sample = 4;
  EXPECT_THROW(render_input(x, options), std::invalid_argument);
  options.sample = -1;
  EXPECT_THROW(render_input(x, options), std::invalid_argument);
}

// The colour of the pixel the most cells share inside a cell (its background).
Rgba cell_background(const Image& image, int x0, int y0, int w, int h) {
  std::map<uint32_t, int> count;
  for (int y = y0; y < y0 + h; ++y) {
    for (int x = x0; x < x0 + w; ++x) {
      const Rgba c = image.at(x, y);
      ++count[(uint32_t(c.r) << 24) | (uint32_t(c.g) << 16) | (uint32_t(c.b) << 8) | c.a];
    }
  }
  auto best =
      std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const uint32_t k = best->first;
  return {uint8_t(k >> 24), uint8_t(k >> 16), uint8_t(k >> 8), uint8_t(k)};
}

// Pixels of a cell that are not its background: the written value.
int ink(const Image& image, int x0, int y0, int w, int h) {
  const Rgba bg = cell_background(image, x0, y0, w, h);
  int n = 0;
  for (int y = y0; y < y0 + h; ++y) {
    for (int x = x0; x < x0 + w; ++x) n += (image.at(x, y) != bg);
  }
  return n;
}

TEST(InputImage, TokenIdsBecomeAGridWithTheValuesWritten) {
  // Two sequences of 20 token ids: a vector wraps at 16 cells a row.
  auto ids = torch::arange(40, torch::kLong).reshape({2, 20}) * 7;
  ids[1][19] = 0;
  InputImageOptions options;
  options.sample = 1;
  InputImage out = render_input(ids, options);
  EXPECT_EQ(out.layout, "values");
  EXPECT_EQ(out.dtype, "int64");
  EXPECT_EQ(out.value_min, 0);
  EXPECT_EQ(out.value_max, 38 * 7);
  EXPECT_FALSE(out.true_count);
  auto grid = render_value_grid(ids[1]);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid->rows, 2);
  EXPECT_EQ(grid->cols, 16);
  EXPECT_EQ(out.image.width, 16 * (grid->cell_width + 1) - 1);
  EXPECT_EQ(out.image.height, 2 * (grid->cell_height + 1) - 1);
  const int w = static_cast<int>(grid->cell_width), h = static_cast<int>(grid->cell_height);
  // Cell k of row r is value ids[1][16 r + k]: its colour, with ink in it.
  for (int k = 0; k < 20; ++k) {
    const int x0 = (k % 16) * (w + 1), y0 = (k / 16) * (h + 1);
    EXPECT_EQ(cell_background(out.image, x0, y0, w, h), categorical(ids[1][k].item<int64_t>())) << k;
    EXPECT_GT(ink(out.image, x0, y0, w, h), 8) << "cell " << k << " has no value written";
  }
  // A two-digit value has more ink than a one-digit one (the digits are drawn).
  auto small = render_value_grid(torch::tensor({1, 88}, torch::kLong));
  ASSERT_TRUE(small);
  const int sw = static_cast<int>(small->cell_width), sh = static_cast<int>(small->cell_height);
  EXPECT_GT(ink(small->image, sw + 1, 0, sw, sh), ink(small->image, 0, 0, sw, sh));
  // The unused cells of the last row are left empty.
  EXPECT_EQ(out.image.at(4 * (w + 1) + 1, h + 2).a, 0);
}

TEST(InputImage, ABoolMaskBecomesAGridOfTwoColours) {
  auto mask = torch::zeros({3, 6}, torch::kBool);
  mask[2].slice(0, 0, 4).fill_(true);
  InputImageOptions options;
  options.sample = 2;
  InputImage out = render_input(mask, options);
  EXPECT_EQ(out.layout, "values");
  EXPECT_EQ(out.dtype, "bool");
  EXPECT_EQ(out.true_count, 4);
  auto grid = render_value_grid(mask[2]);
  ASSERT_TRUE(grid);
  const int w = static_cast<int>(grid->cell_width), h = static_cast<int>(grid->cell_height);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(cell_background(out.image, k * (w + 1), 0, w, h), boolean_colour(k < 4)) << k;
    EXPECT_GT(ink(out.image, k * (w + 1), 0, w, h), 4) << k;
  }
  EXPECT_NE(boolean_colour(true), boolean_colour(false));
}

TEST(InputImage, TooManyValuesToWriteBecomeACategoricalStrip) {
  auto ids = torch::randint(0, 50000, {2, kMaxGridCells + 1}, torch::kLong);
  InputImageOptions options;
  InputImage out = render_input(ids, options);
  EXPECT_EQ(out.layout, "strip");
  EXPECT_EQ(out.image.width, kMaxGridCells + 1);
  EXPECT_EQ(out.image.at(7, 0), categorical(ids[0][7].item<int64_t>()));
  EXPECT_NE(out.hint.find("one pixel per value"), std::string::npos) << out.hint;
  EXPECT_THROW(render_value_grid(torch::zeros({3})), std::invalid_argument);
}

}  // namespace
