// Shampoo blocking (docs/shampoo.md, "Blocking"): merged shapes from the reference's examples and hand
// derivations, blocks checked against a brute-force coverage count, and the greedy
// merge rule checked as a property on random shapes.
#include "shampoo/koptim_BlockMap.hpp"
#include <koptim/shampoo/koptim_Blocking.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using koptim::shampoo::BlockingOptions;
using koptim::shampoo::BlockLayout;
using koptim::shampoo::compute_block_layout;
using Shape = std::vector<std::int64_t>;

BlockingOptions opts(std::int64_t max_dim, bool merge = true) {
  BlockingOptions o;
  o.max_preconditioner_dim = max_dim;
  o.use_merge_dims         = merge;
  return o;
}

std::int64_t product(const Shape& s) {
  std::int64_t p = 1;
  for (auto d : s) p *= d;
  return p;
}

// Every element of the merged tensor lies in exactly one block, and no block exceeds the
// maximum in any dimension: counted element by element.
void expect_exact_tiling(const BlockLayout& layout) {
  const Shape& shape       = layout.merged_shape;
  const std::int64_t total = product(shape);
  std::vector<int> hits(static_cast<std::size_t>(total), 0);
  for (const auto& b : layout.blocks) {
    ASSERT_EQ(b.sizes.size(), shape.size());
    for (std::size_t j = 0; j < shape.size(); ++j) {
      EXPECT_GE(b.sizes[j], 1);
      EXPECT_LE(b.sizes[j], layout.options.max_preconditioner_dim);
      EXPECT_LE(b.offsets[j] + b.sizes[j], shape[j]);
    }
    std::vector<std::int64_t> i(shape.size(), 0);
    for (std::int64_t e = 0; e < b.num_elements(); ++e) {
      std::int64_t flat = 0;
      for (std::size_t j = 0; j < shape.size(); ++j) flat = flat * shape[j] + b.offsets[j] + i[j];
      ++hits[static_cast<std::size_t>(flat)];
      for (std::size_t j = shape.size(); j-- > 0;) {
        if (++i[j] < b.sizes[j]) break;
        i[j] = 0;
      }
    }
  }
  for (std::int64_t e = 0; e < total; ++e) ASSERT_EQ(hits[static_cast<std::size_t>(e)], 1) << "element " << e;
}

TEST(Blocking, SpecExampleConvWith8192) {
  const auto l = compute_block_layout({32, 3, 64, 64}, opts(8192));
  EXPECT_EQ(l.merged_shape, (Shape{96, 4096}));
  EXPECT_EQ(l.merged_from, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_EQ(l.blocks[0].offsets, (Shape{0, 0}));
  EXPECT_EQ(l.blocks[0].sizes, (Shape{96, 4096}));
  EXPECT_EQ(l.blocks[0].order(), 2);
  expect_exact_tiling(l);
}

TEST(Blocking, SpecExampleConvWithDefault1024) {
  // From the last dimension: 64; 64*64 > 1024 starts a group; 64*3 = 192; 192*32 > 1024.
  const auto l = compute_block_layout({32, 3, 64, 64});
  EXPECT_EQ(l.merged_shape, (Shape{32, 192, 64}));
  EXPECT_EQ(l.merged_from, (std::vector<std::vector<int>>{{0}, {1, 2}, {3}}));
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_EQ(l.blocks[0].order(), 3);
  EXPECT_EQ(l.blocks[0].sizes, (Shape{32, 192, 64}));
}

TEST(Blocking, SpecExampleSmallKernel) {
  const auto l = compute_block_layout({64, 3, 3, 3}, opts(1024));
  EXPECT_EQ(l.merged_shape, (Shape{64, 27}));
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_EQ(l.blocks[0].sizes, (Shape{64, 27}));
}

TEST(Blocking, SmallMatrixBecomesVector) {
  const auto l = compute_block_layout({16, 32});
  EXPECT_EQ(l.merged_shape, (Shape{512}));
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_EQ(l.blocks[0].order(), 1);
  EXPECT_EQ(l.blocks[0].sizes, (Shape{512}));
  // Exactly at the bound still merges; one element more does not.
  EXPECT_EQ(compute_block_layout({32, 32}).merged_shape, (Shape{1024}));
  EXPECT_EQ(compute_block_layout({31, 33}).merged_shape, (Shape{1023}));
  EXPECT_EQ(compute_block_layout({25, 41}).merged_shape, (Shape{25, 41}));
}

TEST(Blocking, OrderFourTensors) {
  EXPECT_EQ(compute_block_layout({2, 3, 4, 5}).merged_shape, (Shape{120}));
  // 40; 40*30 > 1024; 30*20 = 600; 600*10 > 1024.
  const auto l = compute_block_layout({10, 20, 30, 40});
  EXPECT_EQ(l.merged_shape, (Shape{10, 600, 40}));
  EXPECT_EQ(l.merged_from, (std::vector<std::vector<int>>{{0}, {1, 2}, {3}}));
  // Nothing can merge under 100; every dimension fits, so one order-4 block.
  const auto k = compute_block_layout({10, 20, 30, 40}, opts(100));
  EXPECT_EQ(k.merged_shape, (Shape{10, 20, 30, 40}));
  ASSERT_EQ(k.blocks.size(), 1u);
  EXPECT_EQ(k.blocks[0].order(), 4);
  // Order 4 with splitting: (3,5,7,11) under 6 cannot merge (5*7, 7*11, 3*5 > 6); chunks
  // 1, 1, 2 (6+1), 2 (6+5) give 4 blocks.
  const auto c = compute_block_layout({3, 5, 7, 11}, opts(6));
  EXPECT_EQ(c.merged_shape, (Shape{3, 5, 7, 11}));
  ASSERT_EQ(c.blocks.size(), 4u);
  EXPECT_EQ(c.blocks[3].offsets, (Shape{0, 0, 6, 6}));
  EXPECT_EQ(c.blocks[3].sizes, (Shape{3, 5, 1, 5}));
  expect_exact_tiling(c);
}

TEST(Blocking, SplitsDimensionsLargerThanTheMaximum) {
  // 300 = 128 + 128 + 44 and 200 = 128 + 72: six blocks, last dimension's chunk fastest.
  const auto l = compute_block_layout({300, 200}, opts(128));
  EXPECT_EQ(l.merged_shape, (Shape{300, 200}));
  EXPECT_EQ(l.num_chunks, (Shape{3, 2}));
  const std::vector<Shape> offsets = {{0, 0}, {0, 128}, {128, 0}, {128, 128}, {256, 0}, {256, 128}};
  const std::vector<Shape> sizes   = {{128, 128}, {128, 72}, {128, 128}, {128, 72}, {44, 128}, {44, 72}};
  ASSERT_EQ(l.blocks.size(), 6u);
  for (std::size_t b = 0; b < 6; ++b) {
    EXPECT_EQ(l.blocks[b].index, b);
    EXPECT_EQ(l.blocks[b].offsets, offsets[b]) << "block " << b;
    EXPECT_EQ(l.blocks[b].sizes, sizes[b]) << "block " << b;
  }
  expect_exact_tiling(l);
  // A long vector: 2500 = 1024 + 1024 + 452.
  const auto v = compute_block_layout({2500});
  ASSERT_EQ(v.blocks.size(), 3u);
  EXPECT_EQ(v.blocks[2].offsets, (Shape{2048}));
  EXPECT_EQ(v.blocks[2].sizes, (Shape{452}));
}

TEST(Blocking, MergingOff) {
  const auto l = compute_block_layout({64, 3, 3, 3}, opts(1024, false));
  EXPECT_EQ(l.merged_shape, (Shape{64, 3, 3, 3}));
  ASSERT_EQ(l.blocks.size(), 1u);
  EXPECT_EQ(l.blocks[0].order(), 4);
  // Size-1 dimensions are still dropped; splitting still applies.
  const auto k = compute_block_layout({1, 5, 1, 2000}, opts(1024, false));
  EXPECT_EQ(k.merged_shape, (Shape{5, 2000}));
  EXPECT_EQ(k.merged_from, (std::vector<std::vector<int>>{{1}, {3}}));
  ASSERT_EQ(k.blocks.size(), 2u);
  EXPECT_EQ(k.blocks[1].offsets, (Shape{0, 1024}));
  EXPECT_EQ(k.blocks[1].sizes, (Shape{5, 976}));
}

TEST(Blocking, ScalarsAndSizeOneDimensions) {
  for (bool merge : {true, false}) {
    const auto s = compute_block_layout({}, opts(1024, merge));
    EXPECT_TRUE(s.original_shape.empty());
    EXPECT_EQ(s.merged_shape, (Shape{1}));
    ASSERT_EQ(s.blocks.size(), 1u);
    EXPECT_EQ(s.blocks[0].sizes, (Shape{1}));
    EXPECT_EQ(s.blocks[0].order(), 1);
    EXPECT_EQ(compute_block_layout({1, 1, 1}, opts(1024, merge)).merged_shape, (Shape{1}));
    EXPECT_EQ(compute_block_layout({1, 512, 1}, opts(1024, merge)).merged_shape, (Shape{512}));
  }
  const auto l = compute_block_layout({5, 1, 7});
  EXPECT_EQ(l.merged_shape, (Shape{35}));
  EXPECT_EQ(l.merged_from, (std::vector<std::vector<int>>{{0, 2}}));
  // Size-1 dimensions between large ones do not block a merge either.
  EXPECT_EQ(compute_block_layout({40, 1, 1, 20}).merged_shape, (Shape{800}));
}

TEST(Blocking, EmptyTensorsHaveNoBlocks) {
  const auto l = compute_block_layout({0, 10});
  EXPECT_EQ(l.merged_shape, (Shape{0}));
  EXPECT_TRUE(l.blocks.empty());
  EXPECT_EQ(l.num_elements(), 0);
}

TEST(Blocking, MergeRuleOnRandomShapes) {
  // Properties that pin the greedy rule down: elements preserved, groups are consecutive
  // original dimensions in order, a group of two or more stays within the maximum, and no
  // group could absorb its left neighbour's last dimension (greedy from the right).
  std::mt19937 gen(12345);
  std::uniform_int_distribution<int> order_dist(0, 4), dim_dist(1, 40), max_dist(1, 300);
  for (int trial = 0; trial < 2000; ++trial) {
    Shape shape(static_cast<std::size_t>(order_dist(gen)));
    for (auto& d : shape) d = dim_dist(gen) <= 6 ? 1 : dim_dist(gen);
    const std::int64_t m = max_dist(gen);
    const auto l         = compute_block_layout(shape, opts(m));
    EXPECT_EQ(product(l.merged_shape), product(shape));
    std::vector<int> seen;
    for (std::size_t g = 0; g < l.merged_shape.size(); ++g) {
      std::int64_t p = 1;
      for (int i : l.merged_from[g]) {
        p *= shape[static_cast<std::size_t>(i)];
        seen.push_back(i);
      }
      if (!l.merged_from[g].empty()) {
        EXPECT_EQ(p, l.merged_shape[g]);
      }
      if (l.merged_from[g].size() > 1) {
        EXPECT_LE(l.merged_shape[g], m);
      }
      if (g + 1 < l.merged_shape.size()) {
        const auto left_last = shape[static_cast<std::size_t>(l.merged_from[g].back())];
        EXPECT_GT(left_last * l.merged_shape[g + 1], m) << "shape index " << trial;
      }
    }
    for (std::size_t k = 1; k < seen.size(); ++k) EXPECT_LT(seen[k - 1], seen[k]);
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const bool in_group = std::find(seen.begin(), seen.end(), static_cast<int>(i)) != seen.end();
      EXPECT_EQ(in_group, shape[i] != 1);
    }
    expect_exact_tiling(l);
  }
}

TEST(Blocking, DescriptionSaysWhatHappened) {
  const auto l        = compute_block_layout({1, 32, 3, 64, 64});
  const std::string d = l.describe();
  EXPECT_NE(d.find("shape (1, 32, 3, 64, 64) -> (32, 192, 64)"), std::string::npos) << d;
  EXPECT_NE(d.find("dropped size-1 dims: 0"), std::string::npos) << d;
  EXPECT_NE(d.find("merged dim 1 = 192 = dims {2,3}"), std::string::npos) << d;
  EXPECT_NE(d.find("block 0: [0:32, 0:192, 0:64] order 3, factors 32x32 192x192 64x64"), std::string::npos) << d;
  const std::string v = compute_block_layout({16, 32}).describe();
  EXPECT_NE(v.find("-> (512,)"), std::string::npos) << v;
  const std::string s = compute_block_layout({}).describe();
  EXPECT_NE(s.find("0-D tensor treated as a 1-vector"), std::string::npos) << s;
}

TEST(Blocking, RejectsBadInput) {
  try {
    compute_block_layout({4, 4}, opts(0));
    FAIL() << "max_preconditioner_dim 0 accepted";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("max_preconditioner_dim = 0"), std::string::npos) << e.what();
  }
  try {
    compute_block_layout({4, -2});
    FAIL() << "negative size accepted";
  } catch (const koptim::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 1 of shape (4, -2) is -2"), std::string::npos) << e.what();
  }
}

}  // namespace

// BlockMap: every block element's memory offset against a computation through explicit
// multi-indices (block -> merged -> original dimensions -> strides of the View's layout), for
// both layouts; elements of a run are contiguous, and LayoutRight blocks have runs of their last
// extent (the gather and scatter then need one index computation per run).
TEST(BlockMap, OffsetsAndRunsMatchMultiIndices) {
  for (const Shape& shape : {Shape{10, 7}, Shape{3, 4, 5}, Shape{2, 3, 40, 6}, Shape{100}, Shape{6, 1, 9}}) {
    for (bool right : {true, false}) {
      for (std::int64_t max_dim : {4, 16, 1024}) {
        const auto layout = compute_block_layout(shape, opts(max_dim));
        koptim::TensorRef t;
        t.shape        = shape;
        t.layout_right = right || shape.size() == 1;
        t.size         = product(shape);
        const int r    = static_cast<int>(shape.size());
        std::vector<std::int64_t> stride(r, 1);
        for (int d = 1; d < r; ++d) {
          if (t.layout_right)
            stride[r - 1 - d] = stride[r - d] * shape[r - d];
          else
            stride[d] = stride[d - 1] * shape[d - 1];
        }
        for (const auto& blk : layout.blocks) {
          const auto map = koptim::shampoo::make_block_map(layout, blk, t);
          SCOPED_TRACE(::testing::Message() << "shape " << koptim::shape_string(shape) << (right ? " right" : " left")
                                            << " max " << max_dim << " block " << blk.index);
          for (std::int64_t e = 0; e < blk.num_elements(); ++e) {
            std::vector<std::int64_t> original(r, 0);
            std::int64_t rest = e;
            for (int j = blk.order() - 1; j >= 0; --j) {
              std::int64_t merged = blk.offsets[j] + rest % blk.sizes[j];
              rest /= blk.sizes[j];
              const auto& from = layout.merged_from[j];
              for (int g = static_cast<int>(from.size()) - 1; g >= 0; --g) {
                original[from[g]] = merged % shape[from[g]];
                merged /= shape[from[g]];
              }
            }
            std::int64_t offset = 0;
            for (int d = 0; d < r; ++d) offset += original[d] * stride[d];
            ASSERT_EQ(map(e), offset) << "element " << e;
            ASSERT_EQ(map(e), map(e - e % map.run) + e % map.run) << "element " << e << ", run " << map.run;
          }
          if (t.layout_right) EXPECT_EQ(map.run, blk.sizes.back());
          if (!t.layout_right && blk.sizes.back() > 1 && shape.size() > 1 && layout.merged_shape.size() > 1) {
            EXPECT_EQ(map.run, 1);
          }
        }
      }
    }
  }
}
