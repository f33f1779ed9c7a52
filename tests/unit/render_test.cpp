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
  EXPECT_EQ(s.image.at(0, 0), diverging(1.0));
  EXPECT_EQ(s.image.at(1, 0), diverging(0.0));
  EXPECT_EQ(s.image.at(5, 0).a, 0);  // the gap after tile 0
  EXPECT_EQ(s.image.at(2 * 6 + 4, 3), diverging(-0.5));
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
  EXPECT_EQ(s.image.at(0, 0), nan_mark(0, 0));
  EXPECT_EQ(s.image.at(1, 0), pos_inf_mark());
  EXPECT_EQ(s.image.at(0, 1), neg_inf_mark());
  EXPECT_EQ(s.image.at(1, 1), diverging(1.0));
  for (double v = -1; v <= 1; v += 0.05) {
    for (Rgba mark : {nan_mark(0, 0), nan_mark(1, 0), pos_inf_mark(), neg_inf_mark()}) {
      EXPECT_NE(mark, diverging(v));
      EXPECT_NE(mark, sequential(std::abs(v)));
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
  EXPECT_EQ(grid.image.at(2 * 5 + 2, 1), diverging(1.0));

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
  EXPECT_EQ(squared.image.at(0, 0), sequential(1.0 / 9.0));
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
  // Complex values have no colour scale; the error says what to watch instead.
  try {
    render_strip(torch::zeros({2, 3}, torch::kComplexFloat), {});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("complex64"), std::string::npos) << e.what();
  }
}

TEST(Strip, ABoolMaskIsTwoColoursWithItsTrueCount) {
  // A padding mask [N, T]: sample 1 keeps 3 of 5 tokens.
  auto mask = torch::zeros({2, 5}, torch::kBool);
  mask[1].slice(0, 0, 3).fill_(true);
  StripOptions options;
  options.sample = 1;
  options.values = Values::kSquare;  // does not apply to values: ignored
  options.average = true;
  Strip s = render_strip(mask, options);
  EXPECT_EQ(s.info.scale, "boolean");
  EXPECT_EQ(s.info.dtype, "bool");
  EXPECT_TRUE(is_value_scale(s.info));
  EXPECT_EQ(s.info.layout, "features");
  EXPECT_EQ(s.image.width, 5);
  EXPECT_EQ(s.info.true_count, 3);
  EXPECT_EQ(s.info.value_min, 0);
  EXPECT_EQ(s.info.value_max, 1);
  EXPECT_EQ(s.info.batch_size, 2);
  // Every true cell has one colour, every false cell the other, and they differ.
  for (int x = 0; x < 3; ++x) EXPECT_EQ(s.image.at(x, 0), boolean_colour(true)) << x;
  for (int x = 3; x < 5; ++x) EXPECT_EQ(s.image.at(x, 0), boolean_colour(false)) << x;
  EXPECT_NE(boolean_colour(true), boolean_colour(false));
  for (int x = 0; x < 5; ++x) EXPECT_EQ(s.image.at(x, 0).a, 255);
}

TEST(Strip, IntegerIdsGetAColourPerValue) {
  // Token ids [N, T]; T = 9 is a square, so [N, T, D] would be tokens, but a
  // [N, T] of ids is one row of features.
  auto ids = torch::tensor({{5, 17, 5, 0, 1023, 17, 2, 3, 4}}, torch::kLong);
  Strip s = render_strip(ids, {});
  EXPECT_EQ(s.info.scale, "categorical");
  EXPECT_EQ(s.info.dtype, "int64");
  EXPECT_EQ(s.info.value_min, 0);
  EXPECT_EQ(s.info.value_max, 1023);
  EXPECT_EQ(s.info.distinct, 7);
  EXPECT_EQ(s.info.nan, 0);
  ASSERT_EQ(s.image.width, 9);
  // The same id, the same colour; different ids, different colours.
  EXPECT_EQ(s.image.at(0, 0), s.image.at(2, 0));
  EXPECT_EQ(s.image.at(1, 0), s.image.at(5, 0));
  EXPECT_EQ(s.image.at(0, 0), categorical(5));
  EXPECT_EQ(s.image.at(3, 0), categorical(0));
  for (int a = 0; a < 9; ++a) {
    for (int b = 0; b < 9; ++b) {
      const auto va = ids[0][a].item<int64_t>(), vb = ids[0][b].item<int64_t>();
      if (va != vb) EXPECT_NE(s.image.at(a, 0), s.image.at(b, 0)) << va << " vs " << vb;
    }
  }
  // Neighbouring ids (labels 0..9) all differ too, and none is a non-finite mark.
  for (int64_t a = 0; a < 10; ++a) {
    for (int64_t b = a + 1; b < 10; ++b) EXPECT_NE(categorical(a), categorical(b)) << a << " vs " << b;
    EXPECT_NE(categorical(a), pos_inf_mark());
    EXPECT_NE(categorical(a), neg_inf_mark());
  }
  // int32 [N, C, H, W] (a segmentation label map per channel) keeps its tiles.
  auto labels = torch::randint(0, 4, {2, 3, 4, 5}, torch::kInt);
  StripOptions averaged;
  averaged.average = true;
  Strip t = render_strip(labels, averaged);
  EXPECT_EQ(t.info.layout, "channels");
  EXPECT_EQ(t.info.tiles, 3);
  EXPECT_EQ(t.info.dtype, "int32");
  EXPECT_EQ(t.image.at(6 + 1, 2), categorical(labels[0][1][2][1].item<int64_t>()));
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
