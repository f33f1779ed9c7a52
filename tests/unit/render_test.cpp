// The strip renderer: layouts, colours, non-finite marks, options, PNG.
#include <gtest/gtest.h>
#include <stb/stb_image.h>
#include <torch/torch.h>

#include <limits>

#include "render/colormap.h"
#include "render/render_cache.h"
#include "render/strip.h"

namespace {

using namespace nansense::render;

bool same(Rgba a, Rgba b) { return a.r == b.r && a.g == b.g && a.b == b.b && a.a == b.a; }

TEST(Strip, ChannelsBecomeTilesWithTransparentGaps) {
  auto t = torch::zeros({2, 3, 4, 5});
  t[1][0][0][0] = 2.0;   // sample 1, channel 0: the largest positive value
  t[1][2][3][4] = -1.0;  // channel 2, bottom right: half the scale, negative
  StripOptions options;
  options.sample = 1;
  Strip s = render_strip(t, options);
  EXPECT_EQ(s.info.layout, "channels");
  EXPECT_EQ(s.info.tiles, 3);
  EXPECT_EQ(s.image.width, 3 * 5 + 2);
  EXPECT_EQ(s.image.height, 4);
  EXPECT_DOUBLE_EQ(s.info.scale_max, 2.0);
  EXPECT_TRUE(same(s.image.at(0, 0), diverging(1.0)));
  EXPECT_TRUE(same(s.image.at(1, 0), diverging(0.0)));
  EXPECT_EQ(s.image.at(5, 0).a, 0);  // the gap after tile 0
  EXPECT_TRUE(same(s.image.at(2 * 6 + 4, 3), diverging(-0.5)));
  EXPECT_GT(diverging(1.0).r, diverging(1.0).b);    // positive is red
  EXPECT_GT(diverging(-1.0).b, diverging(-1.0).r);  // negative is blue
}

TEST(Strip, NonFiniteValuesAreMarkedOffTheScale) {
  auto t = torch::zeros({1, 1, 2, 2});
  t[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  t[0][0][0][1] = std::numeric_limits<float>::infinity();
  t[0][0][1][0] = -std::numeric_limits<float>::infinity();
  t[0][0][1][1] = 3.0;
  Strip s = render_strip(t, {});
  EXPECT_EQ(s.info.nan, 1);
  EXPECT_EQ(s.info.pos_inf, 1);
  EXPECT_EQ(s.info.neg_inf, 1);
  EXPECT_DOUBLE_EQ(s.info.scale_max, 3.0);  // non-finite values do not set the scale
  EXPECT_TRUE(same(s.image.at(0, 0), nan_mark(0, 0)));
  EXPECT_TRUE(same(s.image.at(1, 0), pos_inf_mark()));
  EXPECT_TRUE(same(s.image.at(0, 1), neg_inf_mark()));
  EXPECT_TRUE(same(s.image.at(1, 1), diverging(1.0)));
  for (double v = -1; v <= 1; v += 0.05) {
    for (Rgba mark : {nan_mark(0, 0), nan_mark(1, 0), pos_inf_mark(), neg_inf_mark()}) {
      EXPECT_FALSE(same(mark, diverging(v)));
      EXPECT_FALSE(same(mark, sequential(std::abs(v))));
    }
  }
}

TEST(Strip, FeaturesAreOneRowAndTokensAGridPerChannel) {
  Strip row = render_strip(torch::randn({4, 10}), {});
  EXPECT_EQ(row.info.layout, "features");
  EXPECT_EQ(row.image.width, 10);
  EXPECT_EQ(row.image.height, 1);

  auto tokens = torch::zeros({1, 16, 3});
  tokens[0][6][2] = 1.0;  // token 6 = row 1, column 2 of channel 2's 4x4 grid
  Strip grid = render_strip(tokens, {});
  EXPECT_EQ(grid.info.layout, "tokens");
  EXPECT_EQ(grid.info.tiles, 3);
  EXPECT_EQ(grid.image.width, 3 * 4 + 2);
  EXPECT_EQ(grid.image.height, 4);
  EXPECT_TRUE(same(grid.image.at(2 * 5 + 2, 1), diverging(1.0)));

  Strip matrix = render_strip(torch::randn({1, 5, 3}), {});
  EXPECT_EQ(matrix.info.layout, "matrix");
  EXPECT_EQ(matrix.image.width, 3);
  EXPECT_EQ(matrix.image.height, 5);
}

TEST(Strip, AverageAndValueTransforms) {
  auto t = torch::tensor({-1.0f, 3.0f}).reshape({1, 2, 1, 1});
  StripOptions avg;
  avg.average = true;
  Strip mean = render_strip(t, avg);
  EXPECT_EQ(mean.info.tiles, 1);
  EXPECT_DOUBLE_EQ(mean.info.scale_max, 1.0);  // mean(-1, 3) = 1

  StripOptions abs_avg = avg;
  abs_avg.values = Values::kAbs;
  Strip magnitude = render_strip(t, abs_avg);
  EXPECT_DOUBLE_EQ(magnitude.info.scale_max, 2.0);  // transform before averaging
  EXPECT_FALSE(magnitude.info.diverging);

  StripOptions square;
  square.values = Values::kSquare;
  Strip squared = render_strip(t, square);
  EXPECT_DOUBLE_EQ(squared.info.scale_max, 9.0);
  EXPECT_TRUE(same(squared.image.at(0, 0), sequential(1.0 / 9.0)));
  EXPECT_EQ(parse_values("abs"), Values::kAbs);
  EXPECT_THROW(parse_values("log"), std::invalid_argument);
}

TEST(Strip, BadRequestsSayWhatIsWrong) {
  try {
    StripOptions o;
    o.sample = 5;
    render_strip(torch::zeros({2, 3}), o);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("0..1"), std::string::npos) << e.what();
  }
  try {
    render_strip(torch::zeros({1, 2, 3, 4, 5}), {});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3, 4, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_strip(torch::zeros({2, 3}, torch::kLong), {}), std::invalid_argument);
}

TEST(Png, DecodesToTheSamePixels) {
  Strip s = render_strip(torch::randn({1, 2, 3, 3}), {});
  std::string png = encode_png(s.image);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  int w = 0, h = 0, channels = 0;
  unsigned char* pixels = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(png.data()),
                                                static_cast<int>(png.size()), &w, &h, &channels, 4);
  ASSERT_NE(pixels, nullptr);
  EXPECT_EQ(w, s.image.width);
  EXPECT_EQ(h, s.image.height);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const unsigned char* p = pixels + 4 * (y * w + x);
      const Rgba& want = s.image.at(x, y);
      EXPECT_TRUE(p[0] == want.r && p[1] == want.g && p[2] == want.b && p[3] == want.a);
    }
  }
  stbi_image_free(pixels);
}

TEST(RenderCache, KeepsTheMostRecentlyUsed) {
  RenderCache<int> cache(2);
  cache.put("a", std::make_shared<int>(1));
  cache.put("b", std::make_shared<int>(2));
  ASSERT_TRUE(cache.find("a"));  // a is now the most recent
  cache.put("c", std::make_shared<int>(3));
  EXPECT_TRUE(cache.find("a"));
  EXPECT_FALSE(cache.find("b"));
  EXPECT_EQ(*cache.find("c"), 3);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
