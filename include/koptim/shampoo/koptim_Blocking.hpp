// Shampoo's blocking: how a parameter tensor of any shape is cut into the blocks that get
// Kronecker-factored preconditioners (docs/shampoo.md, "Blocking").
//
// compute_block_layout() is a pure function of a shape and two options. It drops size-1
// dimensions (a 0-D tensor becomes a 1-vector), optionally merges adjacent dimensions from
// the last one while their product stays within max_preconditioner_dim, and then splits
// every dimension into chunks of at most max_preconditioner_dim; each combination of chunks
// is one block, listed in row-major order of the chunk indices (the last dimension's chunk
// varies fastest). Offsets and sizes refer to the merged shape, which is a row-major
// reshape of the original tensor, so a block is a box in that reshaped view. describe()
// answers the user's question "what did it do to my tensor?".
#ifndef KOPTIM_SHAMPOO_BLOCKING_HPP
#define KOPTIM_SHAMPOO_BLOCKING_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/core/koptim_Tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace koptim {
namespace shampoo {

struct BlockingOptions {
  // Largest side of a factor matrix; also the bound on merged dimensions.
  std::int64_t max_preconditioner_dim = 1024;
  // Merge adjacent small dimensions (after dropping size-1 dimensions).
  bool use_merge_dims = true;
};

struct Block {
  // Position of this block in BlockLayout::blocks.
  std::size_t index = 0;
  // Per merged dimension: where the block starts and how long it is.
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;

  // Number of dimensions, hence of factor matrices; factor j is sizes[j] x sizes[j].
  int order() const { return static_cast<int>(sizes.size()); }
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (auto s : sizes) n *= s;
    return n;
  }
};

struct BlockLayout {
  std::vector<std::int64_t> original_shape;
  // The shape the blocks refer to: a row-major reshape of the original tensor.
  std::vector<std::int64_t> merged_shape;
  // For each merged dimension, the original dimensions (indices, ascending) it is made of.
  // Dropped size-1 dimensions appear in no group; a 0-D tensor's single dimension has none.
  std::vector<std::vector<int>> merged_from;
  // Number of chunks along each merged dimension.
  std::vector<std::int64_t> num_chunks;
  std::vector<Block> blocks;
  BlockingOptions options;

  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (auto s : original_shape) n *= s;
    return n;
  }
  std::string describe() const;
};

namespace Impl {

// Chunk c of a dimension of length d cut into pieces of at most m: every chunk has length m
// except the last, as torch.split does.
inline std::int64_t chunk_size(std::int64_t d, std::int64_t m, std::int64_t c) {
  const std::int64_t rest = d - c * m;
  return rest < m ? rest : m;
}

}  // namespace Impl

// Validates the inputs: koptim::ConfigError for a bad option, koptim::ShapeError for a bad
// shape, each naming the offending value.
inline BlockLayout compute_block_layout(const std::vector<std::int64_t>& shape, const BlockingOptions& options = {}) {
  if (options.max_preconditioner_dim < 1) {
    throw koptim::ConfigError("koptim::shampoo::compute_block_layout: max_preconditioner_dim = " +
                              std::to_string(options.max_preconditioner_dim) + " is invalid; it must be >= 1");
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      throw koptim::ShapeError("koptim::shampoo::compute_block_layout: dimension " + std::to_string(i) + " of shape " +
                               shape_string(shape) + " is " + std::to_string(shape[i]) + "; sizes must be >= 0");
    }
  }

  BlockLayout layout;
  layout.original_shape = shape;
  layout.options        = options;
  const std::int64_t m  = options.max_preconditioner_dim;

  // Step 1: drop size-1 dimensions; keep the original indices for the description.
  std::vector<std::int64_t> squeezed;
  std::vector<int> squeezed_from;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1) {
      squeezed.push_back(shape[i]);
      squeezed_from.push_back(static_cast<int>(i));
    }
  }
  if (squeezed.empty()) {
    // A scalar or an all-ones tensor still needs one block with its single element.
    layout.merged_shape = {1};
    layout.merged_from  = {{}};
  } else if (!options.use_merge_dims) {
    layout.merged_shape = squeezed;
    for (int i : squeezed_from) layout.merged_from.push_back({i});
  } else {
    // Step 2: walk from the last dimension towards the first, growing the current group while
    // the product stays within m. The product test divides first so huge shapes cannot overflow.
    std::vector<std::int64_t> rev_shape;
    std::vector<std::vector<int>> rev_from;
    for (std::size_t k = squeezed.size(); k-- > 0;) {
      const std::int64_t d = squeezed[k];
      if (!rev_shape.empty()) {
        const std::int64_t cur = rev_shape.back();
        const bool fits        = d == 0 || cur == 0 || cur <= m / d;
        if (fits) {
          rev_shape.back() = cur * d;
          rev_from.back().insert(rev_from.back().begin(), squeezed_from[k]);
          continue;
        }
      }
      rev_shape.push_back(d);
      rev_from.push_back({squeezed_from[k]});
    }
    layout.merged_shape.assign(rev_shape.rbegin(), rev_shape.rend());
    layout.merged_from.assign(rev_from.rbegin(), rev_from.rend());
  }

  // Step 3: chunks of at most m along every merged dimension; all combinations are blocks.
  const std::size_t order = layout.merged_shape.size();
  std::int64_t num_blocks = 1;
  for (auto d : layout.merged_shape) {
    const std::int64_t c = (d + m - 1) / m;
    layout.num_chunks.push_back(c);
    num_blocks *= c;
  }
  layout.blocks.reserve(static_cast<std::size_t>(num_blocks));
  std::vector<std::int64_t> chunk(order, 0);
  for (std::int64_t b = 0; b < num_blocks; ++b) {
    Block block;
    block.index = static_cast<std::size_t>(b);
    for (std::size_t j = 0; j < order; ++j) {
      block.offsets.push_back(chunk[j] * m);
      block.sizes.push_back(Impl::chunk_size(layout.merged_shape[j], m, chunk[j]));
    }
    layout.blocks.push_back(std::move(block));
    for (std::size_t j = order; j-- > 0;) {  // odometer, last dimension fastest
      if (++chunk[j] < layout.num_chunks[j]) break;
      chunk[j] = 0;
    }
  }
  return layout;
}

// Multi-line, human-readable: the original and merged shapes, which original dimensions went
// into each merged one, and every block with its offsets and sizes.
inline std::string BlockLayout::describe() const {
  std::ostringstream os;
  os << "shape " << shape_string(original_shape) << " -> " << shape_string(merged_shape) << " (max_preconditioner_dim "
     << options.max_preconditioner_dim << ", use_merge_dims " << (options.use_merge_dims ? "true" : "false") << ")\n";
  std::vector<int> dropped;
  for (std::size_t i = 0; i < original_shape.size(); ++i) {
    if (original_shape[i] == 1) dropped.push_back(static_cast<int>(i));
  }
  if (original_shape.empty()) {
    os << "  0-D tensor treated as a 1-vector\n";
  } else if (!dropped.empty()) {
    os << "  dropped size-1 dims:";
    for (int i : dropped) os << ' ' << i;
    os << '\n';
  }
  for (std::size_t j = 0; j < merged_shape.size(); ++j) {
    os << "  merged dim " << j << " = " << merged_shape[j];
    if (merged_from[j].size() > 1) {
      os << " = dims {";
      for (std::size_t k = 0; k < merged_from[j].size(); ++k) os << (k ? "," : "") << merged_from[j][k];
      os << "}";
    } else if (merged_from[j].size() == 1) {
      os << " = dim " << merged_from[j][0];
    }
    os << ", " << num_chunks[j] << (num_chunks[j] == 1 ? " chunk\n" : " chunks\n");
  }
  os << "  " << blocks.size() << (blocks.size() == 1 ? " block" : " blocks") << ":\n";
  for (const auto& b : blocks) {
    os << "    block " << b.index << ": [";
    for (std::size_t j = 0; j < b.sizes.size(); ++j) {
      os << (j ? ", " : "") << b.offsets[j] << ':' << b.offsets[j] + b.sizes[j];
    }
    os << "] order " << b.order() << ", factors";
    for (auto s : b.sizes) os << ' ' << s << 'x' << s;
    os << '\n';
  }
  return os.str();
}

inline std::ostream& operator<<(std::ostream& os, const BlockLayout& layout) { return os << layout.describe(); }

}  // namespace shampoo
}  // namespace koptim

#endif
