// Where the elements of a Shampoo block live in the user's tensor: a block is a box in the
// merged (row-major reshaped) shape; its element e (row-major over the block) sits at one
// memory offset of the user's View, whatever that View's layout. The map is a small value type
// used inside kernels to gather a block into a contiguous buffer and to scatter updates back.
#ifndef KOPTIM_SRC_SHAMPOO_BLOCKMAP_HPP
#define KOPTIM_SRC_SHAMPOO_BLOCKMAP_HPP

#include <koptim/core/koptim_Tensor.hpp>
#include <koptim/shampoo/koptim_Blocking.hpp>

namespace koptim {
namespace shampoo {

struct BlockMap {
  int order                 = 0;   // merged dimensions of the block
  std::int64_t size[4]      = {};  // block extents
  std::int64_t offset[4]    = {};  // block start in the merged shape
  int groups[4]             = {};  // original dimensions merged into each merged dimension
  std::int64_t extent[4][4] = {};  // their extents (outermost first)
  std::int64_t stride[4][4] = {};  // their memory strides in the user's View
  // Elements e .. e + run - 1 of a run (e a multiple of run) are contiguous in memory from
  // (*this)(e): run is the block's last extent when its rows are contiguous (LayoutRight, most
  // blockings), else 1. Kernels then need one index computation per run, not per element.
  std::int64_t run = 1;

  // Memory offset in the user's View of the block's element e.
  KOKKOS_INLINE_FUNCTION std::int64_t operator()(std::int64_t e) const {
    std::int64_t off = 0;
    for (int j = order - 1; j >= 0; --j) {
      std::int64_t m = offset[j] + e % size[j];
      e /= size[j];
      for (int g = groups[j] - 1; g >= 0; --g) {
        off += (m % extent[j][g]) * stride[j][g];
        m /= extent[j][g];
      }
    }
    return off;
  }
};

inline BlockMap make_block_map(const BlockLayout& layout, const Block& block, const TensorRef& t) {
  BlockMap m;
  const int r = static_cast<int>(t.shape.size());
  std::vector<std::int64_t> strides(r, 1);
  if (t.layout_right) {
    for (int d = r - 2; d >= 0; --d) strides[d] = strides[d + 1] * t.shape[d + 1];
  } else {
    for (int d = 1; d < r; ++d) strides[d] = strides[d - 1] * t.shape[d - 1];
  }
  m.order = block.order();
  for (int j = 0; j < m.order; ++j) {
    m.size[j]        = block.sizes[j];
    m.offset[j]      = block.offsets[j];
    const auto& from = layout.merged_from[j];
    m.groups[j]      = static_cast<int>(from.size());
    for (std::size_t g = 0; g < from.size(); ++g) {
      m.extent[j][g] = t.shape[from[g]];
      m.stride[j][g] = strides[from[g]];
    }
  }
  if (m.order > 0) {
    const std::int64_t last = m.size[m.order - 1];
    bool contiguous         = true;
    for (std::int64_t e = 1; e < last && contiguous; ++e) contiguous = m(e) == m(e - 1) + 1;
    if (contiguous) m.run = last;
  }
  return m;
}

}  // namespace shampoo
}  // namespace koptim

#endif
