// The mode-j products of koptim_Gemm.hpp against sums over explicit multi-indices, for every
// mode of tensors of order 2 to 4, in float and double: Gram matrices of unfoldings
// (L <- beta L + alpha G_(j) G_(j)^T; through BLAS syrk and a mirrored triangle in host
// memory, GEMM elsewhere: the result must be exactly symmetric either way) and mode products;
// with host memory also their host-serial forms. Batched GEMM (koptim_BatchedGemm.hpp) against
// sums in double, through the portable kernel and the automatic choice (cuBLAS on a CUDA build),
// and ProductPlan against the products one at a time.
#include <koptim/linalg/koptim_BatchedGemm.hpp>
#include <koptim/linalg/koptim_Gemm.hpp>
#include "linalg/koptim_HandleCache.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace {

using Shape = std::vector<std::int64_t>;

std::int64_t product(const Shape& s) {
  std::int64_t p = 1;
  for (auto d : s) p *= d;
  return p;
}

// Row-major multi-index of flat index e.
std::vector<std::int64_t> unflatten(std::int64_t e, const Shape& s) {
  std::vector<std::int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = e % s[d];
    e /= s[d];
  }
  return idx;
}

template <class T>
Kokkos::View<T*> device_copy(const std::vector<double>& x) {
  Kokkos::View<T*> v("v", x.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < x.size(); ++i) h(i) = static_cast<T>(x[i]);
  Kokkos::deep_copy(v, h);
  return v;
}

template <class T>
std::vector<double> host_values(const Kokkos::View<T*>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, koptim::MemorySpace>::accessible;

template <class T>
void check_mode_products(double tol) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const Shape& shape : {Shape{5, 7}, Shape{3, 4, 6}, Shape{2, 3, 4, 5}, Shape{1, 9}, Shape{9, 1}}) {
    const std::int64_t n = product(shape);
    std::vector<double> g(n);
    for (auto& x : g) x = static_cast<double>(static_cast<T>(normal(rng)));
    const auto G = device_copy<T>(g);
    for (int j = 0; j < static_cast<int>(shape.size()); ++j) {
      SCOPED_TRACE(::testing::Message() << "order " << shape.size() << " mode " << j << " shape[0] " << shape[0]);
      const std::int64_t d = shape[j];
      // A symmetric starting L and a general A, as values of T.
      std::vector<double> L0(d * d), A(d * d);
      for (std::int64_t a = 0; a < d; ++a) {
        for (std::int64_t b = 0; b <= a; ++b)
          L0[a * d + b] = L0[b * d + a] = static_cast<double>(static_cast<T>(normal(rng)));
        for (std::int64_t b = 0; b < d; ++b) A[a * d + b] = static_cast<double>(static_cast<T>(normal(rng)));
      }
      const double alpha = 0.25, beta = 0.5;
      std::vector<double> expect(L0);
      for (auto& x : expect) x *= beta;
      for (std::int64_t e = 0; e < n; ++e) {
        for (std::int64_t f = 0; f < n; ++f) {
          auto ie = unflatten(e, shape), jf = unflatten(f, shape);
          bool same_rest = true;
          for (std::size_t k = 0; k < shape.size(); ++k)
            same_rest = same_rest && (k == std::size_t(j) || ie[k] == jf[k]);
          if (same_rest) expect[ie[j] * d + jf[j]] += alpha * g[e] * g[f];
        }
      }
      auto L = device_copy<T>(L0);
      koptim::linalg::gram_of_unfolding<T>(koptim::ExecutionSpace(), G.data(), shape, j, static_cast<T>(alpha),
                                           static_cast<T>(beta), L.data());
      const auto got = host_values(L);
      for (std::int64_t a = 0; a < d; ++a) {
        for (std::int64_t b = 0; b < d; ++b) {
          EXPECT_NEAR(got[a * d + b], expect[a * d + b], tol * (1.0 + std::abs(expect[a * d + b]))) << a << ", " << b;
          EXPECT_EQ(got[a * d + b], got[b * d + a]) << a << ", " << b;  // exactly symmetric
        }
      }
      // The host-serial form (what Shampoo's batches of blocks call on each host thread): the
      // same BLAS calls, so the same matrix to the bit.
      if constexpr (host_memory) {
        auto Ls = device_copy<T>(L0);
        koptim::linalg::host_gram_of_unfolding<T>(G.data(), shape, j, static_cast<T>(alpha), static_cast<T>(beta),
                                                  Ls.data());
        EXPECT_EQ(host_values(Ls), got);
      }
      // Y = M x_j op(A): Y[.. a ..] = sum_b op(A)_ab M[.. b ..]; A is handed over column-major.
      for (char trans : {'N', 'T'}) {
        std::vector<double> Acm(d * d);
        for (std::int64_t a = 0; a < d; ++a)
          for (std::int64_t b = 0; b < d; ++b) Acm[a + b * d] = A[a * d + b];
        const auto Ad = device_copy<T>(Acm);
        Kokkos::View<T*> Y("Y", n), Ys("Ys", n);
        koptim::linalg::mode_product<T>(koptim::ExecutionSpace(), G.data(), shape, j, Ad.data(), trans, Y.data());
        const auto y = host_values(Y);
        std::vector<double> ys;
        if constexpr (host_memory) {
          koptim::linalg::host_mode_product<T>(G.data(), shape, j, Ad.data(), trans, Ys.data());
          ys = host_values(Ys);
        }
        for (std::int64_t e = 0; e < n; ++e) {
          auto idx       = unflatten(e, shape);
          const auto row = idx[j];
          double sum     = 0;
          for (std::int64_t b = 0; b < d; ++b) {
            idx[j]          = b;
            std::int64_t fl = 0;
            for (std::size_t k = 0; k < shape.size(); ++k) fl = fl * shape[k] + idx[k];
            sum += (trans == 'N' ? A[row * d + b] : A[b * d + row]) * g[fl];
          }
          EXPECT_NEAR(y[e], sum, tol * (1.0 + std::abs(sum))) << "trans " << trans << " element " << e;
          if (host_memory)
            EXPECT_NEAR(ys[e], sum, tol * (1.0 + std::abs(sum))) << "host-serial, trans " << trans << " element " << e;
        }
      }
    }
  }
}

TEST(Gemm, ModeProductsFloat) { check_mode_products<float>(2e-5); }
TEST(Gemm, ModeProductsDouble) { check_mode_products<double>(1e-13); }

using koptim::linalg::BatchedGemmBackend;
using koptim::linalg::GemmShape;

// A table of operand addresses in device memory, in the layout of Impl::GemmOperands.
Kokkos::View<std::uintptr_t*> address_table(const std::vector<std::array<std::uintptr_t, 3>>& ops) {
  const std::size_t n = ops.size();
  Kokkos::View<std::uintptr_t*> t("addresses", 3 * n);
  auto h = Kokkos::create_mirror_view(t);
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) h(c * n + i) = ops[i][c];
  Kokkos::deep_copy(t, h);
  return t;
}

// Batches of every op combination and of sizes around the 32 x 32 tile (1, 31, 33, 70; k = 0),
// leading dimensions beyond the rows, beta = 0 over a C of NaN (BLAS: C is not read) and
// beta != 0: every element against the sum in double of the same values.
// team_size > 0: the portable kernel with that many threads per team (Impl::portable_gemm_batched).
template <class T>
void check_gemm_batched(BatchedGemmBackend backend, double tol, int team_size = 0) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<std::array<int, 3>> sizes = {{1, 1, 1}, {31, 33, 70}, {33, 1, 31}, {70, 40, 0}, {64, 64, 64}};
  for (const char ta : {'N', 'T'})
    for (const char tb : {'N', 'T'})
      for (const auto& mnk : sizes)
        for (const double beta : {0.0, 0.5}) {
          const int m = mnk[0], n = mnk[1], k = mnk[2];
          SCOPED_TRACE(::testing::Message() << ta << tb << " m " << m << " n " << n << " k " << k << " beta " << beta);
          GemmShape s{ta, tb, m, n, k, 0, 0, m + 3};
          const int ra = ta == 'N' ? m : k, ca = ta == 'N' ? k : m, rb = tb == 'N' ? k : n, cb = tb == 'N' ? n : k;
          s.lda                 = ra + 2;
          s.ldb                 = rb + 1;
          const int count       = 5;
          const std::int64_t sa = std::int64_t(s.lda) * ca, sb = std::int64_t(s.ldb) * cb, sc = std::int64_t(s.ldc) * n;
          std::vector<double> a(count * sa), b(count * sb), c(count * sc);
          for (auto& x : a) x = static_cast<double>(static_cast<T>(normal(rng)));
          for (auto& x : b) x = static_cast<double>(static_cast<T>(normal(rng)));
          for (auto& x : c) x = beta == 0.0 ? std::nan("") : static_cast<double>(static_cast<T>(normal(rng)));
          const auto A = device_copy<T>(a), B = device_copy<T>(b), C = device_copy<T>(c);
          // The problems in another order than their storage.
          std::vector<std::array<std::uintptr_t, 3>> ops;
          for (int i = count - 1; i >= 0; --i)
            ops.push_back({reinterpret_cast<std::uintptr_t>(A.data() + i * sa),
                           reinterpret_cast<std::uintptr_t>(B.data() + i * sb),
                           reinterpret_cast<std::uintptr_t>(C.data() + i * sc)});
          const auto table   = address_table(ops);
          const double alpha = -1.5;
          const koptim::linalg::Impl::GemmOperands<T> operands{table.data(), count, 0, count};
          if (team_size > 0)
            koptim::linalg::Impl::portable_gemm_batched(koptim::ExecutionSpace(), s, static_cast<T>(alpha), operands,
                                                        static_cast<T>(beta), team_size);
          else
            koptim::linalg::gemm_batched(koptim::ExecutionSpace(), s, static_cast<T>(alpha), operands,
                                         static_cast<T>(beta), backend);
          const auto got = host_values(C);
          for (int p = 0; p < count; ++p)
            for (int j = 0; j < n; ++j)
              for (int i = 0; i < s.ldc; ++i) {
                const double before = c[p * sc + i + std::int64_t(j) * s.ldc];
                const double now    = got[p * sc + i + std::int64_t(j) * s.ldc];
                if (i >= m) {  // between the columns: untouched
                  EXPECT_TRUE(std::isnan(before) ? std::isnan(now) : now == before) << p << " " << i << " " << j;
                  continue;
                }
                double sum = 0, mag = 0;
                for (int l = 0; l < k; ++l) {
                  const double x =
                      ta == 'N' ? a[p * sa + i + std::int64_t(l) * s.lda] : a[p * sa + l + std::int64_t(i) * s.lda];
                  const double y =
                      tb == 'N' ? b[p * sb + l + std::int64_t(j) * s.ldb] : b[p * sb + j + std::int64_t(l) * s.ldb];
                  sum += x * y;
                  mag += std::abs(x * y);
                }
                const double kept   = beta == 0.0 ? 0.0 : beta * before;  // before is NaN when beta = 0
                const double expect = alpha * sum + kept;
                EXPECT_NEAR(now, expect, tol * (1.0 + std::abs(alpha) * mag + std::abs(kept)))
                    << "problem " << p << " C(" << i << ", " << j << ")";
              }
        }
}

TEST(Gemm, BatchedPortableFloat) { check_gemm_batched<float>(BatchedGemmBackend::portable, 1e-6); }
TEST(Gemm, BatchedPortableDouble) { check_gemm_batched<double>(BatchedGemmBackend::portable, 1e-14); }
TEST(Gemm, BatchedAutomaticFloat) { check_gemm_batched<float>(BatchedGemmBackend::automatic, 1e-6); }
TEST(Gemm, BatchedAutomaticDouble) { check_gemm_batched<double>(BatchedGemmBackend::automatic, 1e-14); }
// The portable kernel with several threads per team where the backend has them (a GPU's
// automatic choice; one thread per team on host backends otherwise).
TEST(Gemm, BatchedPortableTeams) {
  const int threads = std::min(4, koptim::ExecutionSpace().concurrency());
  if (threads < 2) GTEST_SKIP() << "one thread: no team of several";
  check_gemm_batched<float>(BatchedGemmBackend::portable, 1e-6, threads);
  check_gemm_batched<double>(BatchedGemmBackend::portable, 1e-14, threads);
}

// A plan of Gram matrices and chained mode products over `copies` tensors of each of four shapes
// (orders 1 to 3; every mode), against the same products made one at a time: to the bit through
// the host form (the same BLAS calls), to rounding through the GEMM groups. The groups do not
// depend on how many tensors share a shape.
template <class T>
void check_product_plan(BatchedGemmBackend backend, double tol) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<Shape> shapes = {{6}, {7, 5}, {3, 4, 6}, {2, 9, 1}};
  std::size_t groups[2]           = {0, 0};
  for (const int copies : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << copies << " copies");
    koptim::linalg::ProductPlan<T> grams, modes;
    struct Case {
      Shape shape;
      Kokkos::View<T*> g, y0, y1;                 // y0 = g x_0 A_0 (stage 0), y1 = y0 x_last A_last (stage 1)
      std::vector<Kokkos::View<T*>> L, L_one, A;  // per mode: factor (plan, one at a time), matrix
      Kokkos::View<T*> y0_one, y1_one;
    };
    std::vector<Case> cases;
    for (int c = 0; c < copies; ++c)
      for (const auto& shape : shapes) {
        Case k;
        k.shape              = shape;
        const std::int64_t n = product(shape);
        std::vector<double> g(n);
        for (auto& x : g) x = static_cast<double>(static_cast<T>(normal(rng)));
        k.g  = device_copy<T>(g);
        k.y0 = Kokkos::View<T*>("y0", n), k.y1 = Kokkos::View<T*>("y1", n);
        k.y0_one = Kokkos::View<T*>("y0", n), k.y1_one = Kokkos::View<T*>("y1", n);
        for (std::size_t j = 0; j < shape.size(); ++j) {
          const std::int64_t d = shape[j];
          std::vector<double> l0(d * d), a(d * d);
          for (std::int64_t r = 0; r < d; ++r)
            for (std::int64_t q = 0; q <= r; ++q)
              l0[r * d + q] = l0[q * d + r] = static_cast<double>(static_cast<T>(normal(rng)));
          for (auto& x : a) x = static_cast<double>(static_cast<T>(normal(rng)));
          k.L.push_back(device_copy<T>(l0));
          k.L_one.push_back(device_copy<T>(l0));
          k.A.push_back(device_copy<T>(a));
        }
        cases.push_back(k);
      }
    for (auto& k : cases) {
      const int last = static_cast<int>(k.shape.size()) - 1;
      for (int j = 0; j <= last; ++j) grams.add_gram(0, k.g.data(), k.shape, j, k.L[j].data());
      modes.add_mode_product(0, k.g.data(), k.shape, 0, k.A[0].data(), 'N', k.y0.data());
      modes.add_mode_product(1, k.y0.data(), k.shape, last, k.A[last].data(), 'T', k.y1.data());
    }
    grams.finish();
    modes.finish();
    const koptim::ExecutionSpace exec;
    grams.run(exec, T(0.25), T(0.5), backend);
    modes.run(exec, T(1), T(0), backend);
    exec.fence();
    for (auto& k : cases) {
      const int last = static_cast<int>(k.shape.size()) - 1;
      // With host memory the host-serial forms (the BLAS calls the plan's host stages make;
      // mode_product goes through Kokkos Kernels, which may take its own kernel for small sizes).
      if constexpr (host_memory) {
        for (int j = 0; j <= last; ++j)
          koptim::linalg::host_gram_of_unfolding<T>(k.g.data(), k.shape, j, T(0.25), T(0.5), k.L_one[j].data());
        koptim::linalg::host_mode_product<T>(k.g.data(), k.shape, 0, k.A[0].data(), 'N', k.y0_one.data());
        koptim::linalg::host_mode_product<T>(k.y0_one.data(), k.shape, last, k.A[last].data(), 'T', k.y1_one.data());
      } else {
        for (int j = 0; j <= last; ++j)
          koptim::linalg::gram_of_unfolding<T>(exec, k.g.data(), k.shape, j, T(0.25), T(0.5), k.L_one[j].data());
        koptim::linalg::mode_product<T>(exec, k.g.data(), k.shape, 0, k.A[0].data(), 'N', k.y0_one.data());
        koptim::linalg::mode_product<T>(exec, k.y0_one.data(), k.shape, last, k.A[last].data(), 'T', k.y1_one.data());
      }
      exec.fence();
      std::vector<std::pair<Kokkos::View<T*>, Kokkos::View<T*>>> pairs = {{k.y0, k.y0_one}, {k.y1, k.y1_one}};
      for (int j = 0; j <= last; ++j) pairs.push_back({k.L[j], k.L_one[j]});
      for (const auto& pr : pairs) {
        const auto got = host_values(pr.first), expect = host_values(pr.second);
        if (host_memory && backend == BatchedGemmBackend::automatic) {
          EXPECT_EQ(got, expect);
          continue;
        }
        ASSERT_EQ(got.size(), expect.size());
        for (std::size_t e = 0; e < got.size(); ++e) EXPECT_NEAR(got[e], expect[e], tol * (1.0 + std::abs(expect[e])));
      }
    }
    groups[copies == 1 ? 0 : 1] = grams.groups() + modes.groups();
  }
  EXPECT_EQ(groups[0], groups[1]);
  EXPECT_GT(groups[0], 0u);
}

TEST(Gemm, ProductPlanFloat) {
  check_product_plan<float>(BatchedGemmBackend::automatic, 1e-5);
  check_product_plan<float>(BatchedGemmBackend::portable, 1e-5);
}
TEST(Gemm, ProductPlanDouble) {
  check_product_plan<double>(BatchedGemmBackend::automatic, 1e-13);
  check_product_plan<double>(BatchedGemmBackend::portable, 1e-13);
}

// The per-stream handles of the CUDA libraries (linalg/koptim_HandleCache.hpp), with stand-ins for
// a library's calls that log what they do: one handle per stream, the same one at each call;
// beyond max_handles streams the one used least recently is destroyed after a device
// synchronization, and its stream gets a new handle when it comes back; a failed creation throws
// and changes nothing.
namespace handles {
int created = 0;
bool refuse = false;
std::vector<std::string> log;
int create(int* h) {
  if (refuse) return 7;
  *h = ++created;
  return 0;
}
int destroy(int h) {
  log.push_back("destroy " + std::to_string(h));
  return 0;
}
void quiesce() { log.push_back("synchronize"); }
}  // namespace handles

TEST(HandleCache, OneHandlePerStreamAndTheLeastRecentlyUsedGivesWay) {
  using Cache = koptim::linalg::Impl::HandleCache<const void*, int, int>;
  // Kept until Kokkos::finalize, whose hook destroys its handles (as the library's are).
  auto& cache = *new Cache(handles::create, handles::destroy, 0, "createHandle", handles::quiesce);
  handles::log.clear();
  constexpr int kept = static_cast<int>(Cache::max_handles);
  std::array<char, 2 * Cache::max_handles> streams{};
  std::lock_guard<std::mutex> lock(cache.mutex);
  const int first = cache.get(&streams[0]);
  EXPECT_EQ(cache.get(&streams[0]), first);
  for (int s = 1; s < kept; ++s) EXPECT_EQ(cache.get(&streams[s]), first + s);
  EXPECT_EQ(cache.size(), Cache::max_handles);
  EXPECT_EQ(cache.get(&streams[0]), first);  // stream 1's handle is now the one used least recently
  EXPECT_TRUE(handles::log.empty());
  const int next = cache.get(&streams[kept]);
  EXPECT_EQ(next, first + kept);
  using Log = std::vector<std::string>;
  EXPECT_EQ(handles::log, (Log{"synchronize", "destroy " + std::to_string(first + 1)}));
  EXPECT_EQ(cache.size(), Cache::max_handles);
  EXPECT_EQ(cache.get(&streams[0]), first);
  EXPECT_EQ(cache.get(&streams[kept]), next);
  // Stream 1 comes back: a new handle, in place of stream 2's (now the least recently used).
  EXPECT_EQ(cache.get(&streams[1]), next + 1);
  EXPECT_EQ(handles::log.back(), "destroy " + std::to_string(first + 2));
  handles::refuse = true;
  try {
    cache.get(&streams[kept + 1]);
    ADD_FAILURE() << "no error";
  } catch (const koptim::Error& e) {
    EXPECT_EQ(std::string(e.what()), "koptim::linalg: createHandle failed (status 7)");
  }
  handles::refuse = false;
  EXPECT_EQ(cache.size(), Cache::max_handles);
  EXPECT_EQ(handles::log.size(), 4u);
  EXPECT_EQ(cache.get(&streams[3]), first + 3);  // kept through the failure
}

}  // namespace
