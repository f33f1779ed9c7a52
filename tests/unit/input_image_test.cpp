// The input pane's renderer: denormalised images, transforms, strips, hints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "render/input_image.h"

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

}  // namespace
