// Weight strips: every role layout against direct indexing of the tensor,
// the defaults per rank, a role choice demoting the axis that held it, and
// refusals that say what fits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "render/colormap.h"
#include "render/weight_strip.h"

namespace {

using namespace nansense::render;

// Distinct values everywhere, so a wrong index shows up as a wrong value.
torch::Tensor counting(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return torch::arange(n, torch::kDouble).reshape(shape);
}

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(WeightLayoutDefaults, FollowTheTensorsRank) {
  auto conv = default_weight_layout({16, 8, 3, 5});
  EXPECT_EQ(conv.tile_dim, 1);
  EXPECT_EQ(conv.y_dim, 2);
  EXPECT_EQ(conv.x_dim, 3);
  EXPECT_EQ(conv.index, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_TRUE(conv.is_index(0));

  auto conv1d = default_weight_layout({4, 2, 7});
  EXPECT_EQ(conv1d.tile_dim, 1);
  EXPECT_EQ(conv1d.y_dim, -1);
  EXPECT_EQ(conv1d.x_dim, 2);

  auto matrix = default_weight_layout({10, 64});
  EXPECT_EQ(matrix.tile_dim, -1);
  EXPECT_EQ(matrix.y_dim, 0);
  EXPECT_EQ(matrix.x_dim, 1);

  auto vector = default_weight_layout({64});
  EXPECT_EQ(vector.x_dim, 0);
  EXPECT_EQ(vector.y_dim, -1);
  EXPECT_EQ(vector.tile_dim, -1);

  auto scalar = default_weight_layout({});
  EXPECT_EQ(scalar.x_dim, -1);
  EXPECT_TRUE(scalar.index.empty());
}

TEST(WeightTiles, DefaultConvLayoutShowsOneOutputChannelsKernelsAcrossInputChannels) {
  auto w = counting({4, 3, 2, 5});
  WeightLayoutRequest request;
  request.index = {2};  // output channel 2
  auto layout = resolve_weight_layout(w.sizes(), request);
  auto tiles = weight_tiles(w, layout);
  ASSERT_EQ(tiles.sizes(), (std::vector<int64_t>{3, 2, 5}));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t y = 0; y < 2; ++y) {
      for (int64_t x = 0; x < 5; ++x) {
        EXPECT_EQ(tiles[i][y][x].item<double>(), w[2][i][y][x].item<double>()) << i << " " << y << " " << x;
      }
    }
  }
}

TEST(WeightTiles, EveryRoleAssignmentMatchesDirectIndexing) {
  auto w = counting({4, 3, 2, 5});
  // Each role on another dimension, the rest held at an index.
  struct Case {
    int64_t tile, y, x;
  };
  for (const Case& c : std::vector<Case>{{0, 2, 3}, {3, 0, 1}, {2, 1, 0}, {-1, 1, 3}, {0, -1, -1}, {-1, -1, 2}}) {
    WeightLayoutRequest request;
    request.tile_dim = c.tile;
    request.y_dim = c.y;
    request.x_dim = c.x;
    request.index = {3, 2, 1, 4};
    auto layout = resolve_weight_layout(w.sizes(), request);
    EXPECT_EQ(layout.tile_dim, c.tile);
    EXPECT_EQ(layout.y_dim, c.y);
    EXPECT_EQ(layout.x_dim, c.x);
    auto tiles = weight_tiles(w, layout);
    const auto size = [&](int64_t d) { return d >= 0 ? w.size(d) : int64_t{1}; };
    ASSERT_EQ(tiles.sizes(), (std::vector<int64_t>{size(c.tile), size(c.y), size(c.x)}));
    for (int64_t t = 0; t < tiles.size(0); ++t) {
      for (int64_t y = 0; y < tiles.size(1); ++y) {
        for (int64_t x = 0; x < tiles.size(2); ++x) {
          std::vector<int64_t> at = {3, 2, 1, 4};
          if (c.tile >= 0) at[c.tile] = t;
          if (c.y >= 0) at[c.y] = y;
          if (c.x >= 0) at[c.x] = x;
          EXPECT_EQ(tiles[t][y][x].item<double>(), w[at[0]][at[1]][at[2]][at[3]].item<double>())
              << "tile " << c.tile << " y " << c.y << " x " << c.x << " at " << t << "," << y << "," << x;
        }
      }
    }
  }
}

TEST(WeightTiles, MatrixVectorAndScalarDefaults) {
  auto m = counting({3, 4});
  auto tiles = weight_tiles(m, default_weight_layout(m.sizes()));
  ASSERT_EQ(tiles.sizes(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_TRUE(torch::equal(tiles[0], m));

  auto v = counting({6});
  auto row = weight_tiles(v, default_weight_layout(v.sizes()));
  ASSERT_EQ(row.sizes(), (std::vector<int64_t>{1, 1, 6}));
  EXPECT_TRUE(torch::equal(row[0][0], v));

  auto s = torch::tensor(2.5, torch::kDouble);
  auto one = weight_tiles(s, default_weight_layout(s.sizes()));
  ASSERT_EQ(one.sizes(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(one.item<double>(), 2.5);
}

TEST(WeightLayoutRequest, ARoleChosenDemotesTheDimensionThatHeldIt) {
  // Default for [16, 8, 3, 3]: Tile 1, Y 2, X 3, Index 0. X on dim 1: dim 1
  // leaves Tile (vacant now) and dim 3, which held X, becomes an Index.
  WeightLayoutRequest request;
  request.x_dim = 1;
  auto l = resolve_weight_layout({16, 8, 3, 3}, request);
  EXPECT_EQ(l.x_dim, 1);
  EXPECT_EQ(l.y_dim, 2);
  EXPECT_EQ(l.tile_dim, -1);
  EXPECT_TRUE(l.is_index(3));
  EXPECT_TRUE(l.is_index(0));

  // Tile on dim 0 for a matrix: the matrix's Y (dim 0) is vacated.
  WeightLayoutRequest tile_rows;
  tile_rows.tile_dim = 0;
  auto m = resolve_weight_layout({5, 7}, tile_rows);
  EXPECT_EQ(m.tile_dim, 0);
  EXPECT_EQ(m.y_dim, -1);
  EXPECT_EQ(m.x_dim, 1);

  // -1 leaves a role to no dimension.
  WeightLayoutRequest no_tile;
  no_tile.tile_dim = -1;
  auto c = resolve_weight_layout({16, 8, 3, 3}, no_tile);
  EXPECT_EQ(c.tile_dim, -1);
  EXPECT_TRUE(c.is_index(1));
}

TEST(WeightLayoutRequest, BadValuesAreRefusedSayingWhatFits) {
  const std::vector<int64_t> conv{16, 8, 3, 3};
  WeightLayoutRequest far;
  far.x_dim = 4;
  EXPECT_NE(thrown([&] { resolve_weight_layout(conv, far); }).find("x_dim 4 is out of range"), std::string::npos);
  EXPECT_NE(thrown([&] { resolve_weight_layout(conv, far); }).find("0..3"), std::string::npos);

  WeightLayoutRequest twice;
  twice.x_dim = 2;
  twice.y_dim = 2;
  EXPECT_NE(thrown([&] { resolve_weight_layout(conv, twice); }).find("both 2"), std::string::npos);

  WeightLayoutRequest out;
  out.index = {16};
  const std::string why = thrown([&] { resolve_weight_layout(conv, out); });
  EXPECT_NE(why.find("index 16 of dimension 0 is out of range"), std::string::npos) << why;
  EXPECT_NE(why.find("0..15"), std::string::npos) << why;

  // An index on a dimension that is not an Index is ignored.
  WeightLayoutRequest ignored;
  ignored.index = {0, 99, 99, 99};
  EXPECT_NO_THROW(resolve_weight_layout(conv, ignored));

  WeightLayoutRequest too_many;
  too_many.index = {0, 0, 0, 0, 0};
  EXPECT_NE(thrown([&] { resolve_weight_layout(conv, too_many); }).find("one index per dimension"), std::string::npos);
}

TEST(WeightStrip, DrawsTilesOnASymmetricScaleWithTransparentGaps) {
  auto w = torch::zeros({2, 3, 2, 2});
  w[1][0][0][0] = 4.0;
  w[1][2][1][1] = -2.0;
  w[0][0][0][0] = 100.0;  // another output channel: not in the picture, not in the scale
  WeightLayoutRequest request;
  request.index = {1};
  Strip s = render_weight_strip(w, resolve_weight_layout(w.sizes(), request));
  EXPECT_EQ(s.info.tiles, 3);
  EXPECT_EQ(s.info.tile_width, 2);
  EXPECT_EQ(s.info.tile_height, 2);
  EXPECT_EQ(s.image.width, 3 * 2 + 2);
  EXPECT_DOUBLE_EQ(s.info.scale_max, 4.0);
  EXPECT_EQ(s.image.at(0, 0), diverging(1.0));
  EXPECT_EQ(s.image.at(2, 0).a, 0);  // the gap
  EXPECT_EQ(s.image.at(2 * 3 + 1, 1), diverging(-0.5));
  EXPECT_NE(thrown([&] {
              render_weight_strip(torch::zeros({2}, torch::kLong), default_weight_layout({2}));
            }).find("cannot draw"),
            std::string::npos);
}

}  // namespace
