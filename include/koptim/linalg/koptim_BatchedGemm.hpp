// Batched matrix products: many GEMMs of one shape in one call, and ProductPlan, the fixed lists
// of Gram matrices and mode products that a Shampoo phase forms over all its blocks.
//
// A batch's operands are addresses in device memory (three arrays: the A's, the B's, the C's), so
// that the matrices of a batch may lie anywhere (the blocks of one shape are separate Views). With
// a CUDA Kokkos and Kokkos Kernels' cuBLAS TPL a batch is one cublas<t>gemmBatched call on the
// instance's stream; elsewhere it is koptim's portable kernel (a team per 32 x 32 tile of a
// product's C, the A and B panels in team scratch). With host memory a ProductPlan runs the
// products through host BLAS instead, the problems of a stage at once on the host threads.
#ifndef KOPTIM_LINALG_BATCHED_GEMM_HPP
#define KOPTIM_LINALG_BATCHED_GEMM_HPP

#include <koptim/core/koptim_Error.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace koptim {
namespace linalg {

// C <- alpha op(A) op(B) + beta C, column-major: op(A) m x k, op(B) k x n, C m x n; op = 'N' or
// 'T'. BLAS semantics: with beta = 0, C is not read.
struct GemmShape {
  char ta = 'N', tb = 'N';
  int m = 0, n = 0, k = 0, lda = 1, ldb = 1, ldc = 1;
  bool operator<(const GemmShape& o) const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldc) < std::tie(o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc);
  }
};

// Which implementation a batch runs on: automatic (cuBLAS where Kokkos runs on CUDA and Kokkos
// Kernels has the cuBLAS TPL, the portable kernel elsewhere) or portable (koptim's kernel always:
// what tests use to run it on a CPU).
enum class BatchedGemmBackend { automatic, portable };

namespace Impl {

// The operands of a batch in device memory: count A addresses, then count B's, then count C's.
template <class T>
struct GemmOperands {
  const std::uintptr_t* table = nullptr;  // 3 * stride entries
  std::int64_t stride = 0, first = 0, count = 0;
  KOKKOS_INLINE_FUNCTION const T* a(std::int64_t i) const { return reinterpret_cast<const T*>(table[first + i]); }
  KOKKOS_INLINE_FUNCTION const T* b(std::int64_t i) const {
    return reinterpret_cast<const T*>(table[stride + first + i]);
  }
  KOKKOS_INLINE_FUNCTION T* c(std::int64_t i) const { return reinterpret_cast<T*>(table[2 * stride + first + i]); }
};

// One cublas<t>gemmBatched call on exec's stream; false where koptim has no cuBLAS (not a CUDA
// build, or Kokkos Kernels without the cuBLAS TPL): then nothing was done. Throws on a cuBLAS
// error. src/linalg/koptim_CudaLibraries.cpp.
bool cublas_gemm_batched(const ExecutionSpace& exec, const GemmShape& s, float alpha, const GemmOperands<float>& ops,
                         float beta);
bool cublas_gemm_batched(const ExecutionSpace& exec, const GemmShape& s, double alpha, const GemmOperands<double>& ops,
                         double beta);

constexpr int gemm_tile = 32;

// The portable kernel: a team per tile of a problem's C; per panel of k, the team loads op(A)'s
// tile x tile panel and op(B)'s into scratch (zeros outside the matrices), then adds their
// product to the tile's sums in scratch; the sums go to C at the end (C read only when beta != 0).
template <class T, class ExecSpace>
struct TiledGemmBatch {
  using Member  = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  GemmShape s;
  T alpha, beta;
  GemmOperands<T> ops;
  int tiles_m, tiles_n;

  static std::size_t scratch_bytes() { return 3 * Scratch::shmem_size(gemm_tile * gemm_tile); }

  // tile(r + t c) = op(X)(r0 + r, c0 + c) for r, c < t, 0 outside the rows x cols matrix op(X);
  // X column-major with leading dimension ld, op(X) = X^T when trans. The index that walks X's
  // memory contiguously varies fastest.
  KOKKOS_INLINE_FUNCTION static void load(const Member& team, const Scratch& tile, const T* X, bool trans, int ld,
                                          int r0, int c0, int rows, int cols) {
    constexpr int t = gemm_tile;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t * t), [&](const int e) {
      const int x = e % t, y = e / t;
      const int r = trans ? y : x, c = trans ? x : y;
      const bool in   = r0 + r < rows && c0 + c < cols;
      tile(r + t * c) = !in     ? T(0)
                        : trans ? X[(c0 + c) + std::int64_t(r0 + r) * ld]
                                : X[(r0 + r) + std::int64_t(c0 + c) * ld];
    });
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    constexpr int t  = gemm_tile;
    const int league = team.league_rank();
    const int per    = tiles_m * tiles_n;
    const int p = league / per, i0 = (league % per) / tiles_n * t, j0 = (league % per) % tiles_n * t;
    const T* A = ops.a(p);
    const T* B = ops.b(p);
    T* C       = ops.c(p);
    Scratch as(team.team_scratch(0), t * t), bs(team.team_scratch(0), t * t), cs(team.team_scratch(0), t * t);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t * t), [&](const int e) { cs(e) = T(0); });
    const bool ta = s.ta == 'T', tb = s.tb == 'T';
    for (int l0 = 0; l0 < s.k; l0 += t) {
      team.team_barrier();                             // the previous panel's products are done
      load(team, as, A, ta, s.lda, i0, l0, s.m, s.k);  // as(i + t l) = op(A)(i0 + i, l0 + l)
      load(team, bs, B, tb, s.ldb, l0, j0, s.k, s.n);  // bs(l + t j) = op(B)(l0 + l, j0 + j)
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t * t), [&](const int e) {
        const int i = e % t, j = e / t;
        T sum = cs(e);
        for (int l = 0; l < t; ++l) sum += as(i + t * l) * bs(l + t * j);
        cs(e) = sum;
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, t * t), [&](const int e) {
      const int i = i0 + e % t, j = j0 + e / t;
      if (i >= s.m || j >= s.n) return;
      T& c = C[i + std::int64_t(j) * s.ldc];
      c    = beta == T(0) ? alpha * cs(e) : alpha * cs(e) + beta * c;
    });
  }
};

// team_size: 0 lets Kokkos choose (one thread per team on host backends); tests set more on
// threaded backends to exercise the team's synchronisation.
template <class T, class ExecSpace>
void portable_gemm_batched(const ExecSpace& exec, const GemmShape& s, T alpha, const GemmOperands<T>& ops, T beta,
                           int team_size = 0) {
  const int tiles_m = (s.m + gemm_tile - 1) / gemm_tile, tiles_n = (s.n + gemm_tile - 1) / gemm_tile;
  const std::int64_t league = ops.count * tiles_m * tiles_n;
  if (league == 0) return;
  if (league > INT_MAX) {
    // A TeamPolicy's league is an int: launched in chunks of whole matrices (KOKKOS_ASSERT, off in
    // release builds, let the cast below drop tiles without a word).
    const std::int64_t per = static_cast<std::int64_t>(tiles_m) * tiles_n, chunk = INT_MAX / per;
    if (chunk == 0)
      throw koptim::ShapeError("koptim::linalg::gemm_batched: a " + std::to_string(s.m) + " x " + std::to_string(s.n) +
                               " product has more than 2^31 - 1 tiles of " + std::to_string(gemm_tile) + " x " +
                               std::to_string(gemm_tile));
    for (std::int64_t at = 0; at < ops.count; at += chunk) {
      GemmOperands<T> part = ops;
      part.first           = ops.first + at;
      part.count           = std::min(chunk, ops.count - at);
      portable_gemm_batched(exec, s, alpha, part, beta, team_size);
    }
    return;
  }
  const TiledGemmBatch<T, ExecSpace> f{s, alpha, beta, ops, tiles_m, tiles_n};
  const auto scratch = Kokkos::PerTeam(TiledGemmBatch<T, ExecSpace>::scratch_bytes());
  if (team_size > 0)
    Kokkos::parallel_for(
        "koptim::linalg::gemm_batched",
        Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(league), team_size).set_scratch_size(0, scratch), f);
  else
    Kokkos::parallel_for(
        "koptim::linalg::gemm_batched",
        Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(league), Kokkos::AUTO).set_scratch_size(0, scratch), f);
}

}  // namespace Impl

// C_i <- alpha op(A_i) op(B_i) + beta C_i for the count problems of ops, on the instance exec.
template <class T, class ExecSpace>
void gemm_batched(const ExecSpace& exec, const GemmShape& s, T alpha, const Impl::GemmOperands<T>& ops, T beta,
                  BatchedGemmBackend backend = BatchedGemmBackend::automatic) {
  if (ops.count == 0 || s.m == 0 || s.n == 0) return;
  // k = 0 (C <- beta C, and C <- 0 for beta = 0 whatever C held, as BLAS defines it) stays with the
  // portable kernel, which the host tests check on NaN-filled outputs, rather than depend on how a
  // cuBLAS version treats an empty inner dimension and its leading dimensions.
  if constexpr (std::is_same<ExecSpace, ExecutionSpace>::value) {
    if (backend == BatchedGemmBackend::automatic && s.k > 0 && Impl::cublas_gemm_batched(exec, s, alpha, ops, beta))
      return;
  }
  Impl::portable_gemm_batched(exec, s, alpha, ops, beta);
}

// A fixed list of products over tensors in memory of MemorySpace, run again and again (the same
// addresses each time): Gram matrices L <- beta L + alpha G_(j) G_(j)^T and mode products
// Y = M x_j op(A) (alpha 1, beta 0), each at a stage; the products of a stage are independent of
// each other (distinct outputs, inputs no product of the stage writes), stages run in order. The
// operand tables are built once (finish()); run() allocates nothing.
//
// With host memory (and the automatic backend) a stage is one parallel loop over its products on
// the host threads, each product the host-serial BLAS calls of host_gram_of_unfolding or
// host_mode_product (the same results as those, to the bit). Otherwise the products become GEMMs
// grouped by shape (a Gram matrix of a mode j < last is a sum of slices: one GEMM per slice, the
// slices in successive sub-stages, the first with beta, the others adding), one gemm_batched per
// group: the number of calls depends on the shapes, not on how many tensors share them.
template <class T>
class ProductPlan {
 public:
  // At stage: L <- beta L + alpha G_(j) G_(j)^T (alpha, beta: run()'s), with G a row-major tensor
  // of the given shape and L its d_j x d_j matrix (column-major; symmetric).
  void add_gram(int stage, const T* G, const std::vector<std::int64_t>& shape, int j, T* L) {
    add({Product::gram, stage, G, shape, j, nullptr, 'N', L});
  }
  // At stage: Y = M x_j op(A) (see mode_product; Y must not alias M).
  void add_mode_product(int stage, const T* M, const std::vector<std::int64_t>& shape, int j, const T* A, char trans,
                        T* Y) {
    add({Product::mode, stage, M, shape, j, A, trans, Y});
  }
  // Every extent fits BLAS's int (else add_* threw).
  static bool fits(const std::vector<std::int64_t>& shape) { return fits_host_blas(shape); }

  // Builds the GEMM groups and their operand table (device memory: set-up, not run()).
  void finish() {
    std::map<std::tuple<std::int64_t, GemmShape, bool>, std::vector<std::array<std::uintptr_t, 3>>> groups;
    for (const auto& p : products_) {
      const ModeSplit s(p.shape, p.j);
      const int d = static_cast<int>(s.dim), pre = static_cast<int>(s.pre), post = static_cast<int>(s.post);
      const auto at = [](const T* x, std::int64_t off) { return reinterpret_cast<std::uintptr_t>(x + off); };
      if (p.kind == Product::gram) {
        if (post == 1) {
          // Gt (d x pre) Gt^T.
          groups[{sub_stage(p.stage, 0), GemmShape{'N', 'T', d, d, pre, d, d, d}, false}].push_back(
              {at(p.in, 0), at(p.in, 0), at(p.out, 0)});
        } else {
          // Slice q: S_q^T S_q with S_q the (post x d) column-major slice.
          for (int q = 0; q < pre; ++q)
            groups[{sub_stage(p.stage, q), GemmShape{'T', 'N', d, d, post, post, post, d}, q > 0}].push_back(
                {at(p.in, std::int64_t(q) * d * post), at(p.in, std::int64_t(q) * d * post), at(p.out, 0)});
        }
      } else if (post == 1) {
        // Yt (d x pre) = op(A) Mt.
        groups[{sub_stage(p.stage, 0), GemmShape{p.trans, 'N', d, pre, d, d, d, d}, false}].push_back(
            {at(p.a, 0), at(p.in, 0), at(p.out, 0)});
      } else {
        // Per slice q: Yt_q (post x d) = Mt_q op(A)^T.
        const char tb = p.trans == 'T' ? 'N' : 'T';
        for (int q = 0; q < pre; ++q)
          groups[{sub_stage(p.stage, 0), GemmShape{'N', tb, post, d, d, post, d, post}, false}].push_back(
              {at(p.in, std::int64_t(q) * d * post), at(p.a, 0), at(p.out, std::int64_t(q) * d * post)});
      }
    }
    std::int64_t total = 0;
    for (const auto& g : groups) total += static_cast<std::int64_t>(g.second.size());
    std::vector<std::uintptr_t> table(3 * total);
    groups_.clear();
    std::int64_t first = 0;
    for (const auto& g : groups) {
      const auto n = static_cast<std::int64_t>(g.second.size());
      for (std::int64_t i = 0; i < n; ++i)
        for (int c = 0; c < 3; ++c) table[c * total + first + i] = g.second[i][c];
      groups_.push_back({std::get<1>(g.first), std::get<2>(g.first), first, n});
      first += n;
    }
    table_ = Kokkos::View<std::uintptr_t*, MemorySpace>("koptim::linalg::product_plan", table.size());
    Kokkos::deep_copy(table_,
                      Kokkos::View<const std::uintptr_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                          table.data(), table.size()));
    stride_ = total;
    host_stages_.clear();
    for (std::size_t i = 0; i < products_.size(); ++i) {
      if (host_stages_.size() <= static_cast<std::size_t>(products_[i].stage))
        host_stages_.resize(products_[i].stage + 1);
      host_stages_[products_[i].stage].push_back(i);
    }
  }

  bool empty() const { return products_.empty(); }
  // GEMM groups (one gemm_batched each, without the host form).
  std::size_t groups() const { return groups_.size(); }

  void run(const ExecutionSpace& exec, T alpha, T beta,
           BatchedGemmBackend backend = BatchedGemmBackend::automatic) const {
    if (products_.empty()) return;
    constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
    if (host && backend == BatchedGemmBackend::automatic) {
      for (const auto& stage : host_stages_) run_host_stage(exec, stage, alpha, beta);
      return;
    }
    for (const auto& g : groups_) {
      const Impl::GemmOperands<T> ops{table_.data(), stride_, g.first, g.count};
      gemm_batched(exec, g.shape, alpha, ops, g.accumulate ? T(1) : beta, backend);
    }
  }

 private:
  struct Product {
    enum Kind { gram, mode } kind;
    int stage;
    const T* in;
    std::vector<std::int64_t> shape;
    int j;
    const T* a;
    char trans;
    T* out;
  };
  void add(const Product& p) {
    if (!fits(p.shape))
      throw koptim::Error("koptim::linalg::ProductPlan: a tensor of more than INT_MAX elements (BLAS's int)");
    products_.push_back(p);
  }
  void run_host_stage(const ExecutionSpace& exec, const std::vector<std::size_t>& stage, T alpha, T beta) const {
    if (stage.empty()) return;
    host_blas_fence(exec, "before a stage of products");  // kernels wrote the inputs
    // The products at once on the host threads; host_batch fences them before kernels read the
    // results, and carries an exception of one product out of the parallel region.
    koptim::Impl::host_batch(koptim::Impl::host_instance(exec), "koptim::linalg::products", stage.size(),
                             [&](const std::size_t i) {
                               const Product& q = products_[stage[i]];
                               if (q.kind == Product::gram)
                                 host_gram_of_unfolding<T>(q.in, q.shape, q.j, alpha, beta, q.out);
                               else
                                 host_mode_product<T>(q.in, q.shape, q.j, q.a, q.trans, q.out);
                             });
  }

  struct Group {
    GemmShape shape;
    bool accumulate;  // beta = 1 (a Gram matrix's later slices)
    std::int64_t first, count;
  };
  // The order of the GEMMs: by stage, then by a Gram matrix's slice.
  static std::int64_t sub_stage(int stage, int slice) { return (static_cast<std::int64_t>(stage) << 32) + slice; }
  std::vector<Product> products_;
  std::vector<std::vector<std::size_t>> host_stages_;
  std::vector<Group> groups_;
  Kokkos::View<std::uintptr_t*, MemorySpace> table_;
  std::int64_t stride_ = 0;
};

}  // namespace linalg
}  // namespace koptim

#endif
