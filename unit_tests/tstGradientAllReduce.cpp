// koptim::comm::GradientAllReducer: the averaged gradients equal a plain MPI_Allreduce sum
// divided by the number of ranks, for parameters of mixed sizes, shapes, layouts and scalar
// types; the bucket plan (packing in registration order per scalar type, a parameter larger than
// a bucket alone) is checked against a plan worked out by hand.
#include "koptim_TestTensor.hpp"

#include <koptim/comm/koptim_GradientAllReduce.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using koptim::comm::Communicator;
using koptim::comm::GradientAllReducer;

// Values on a 1/16 grid, different on every rank and parameter: sums over a few ranks are
// exact, so the reference does not depend on the order MPI adds in.
double grad_value(int world_rank, int param, std::int64_t i) {
  return static_cast<double>((world_rank * 11 + param * 5 + static_cast<int>(i % 1000) * 3) % 37 - 18) / 16.0;
}

// A model of mixed parameters; the comments give each gradient's bytes.
struct Model {
  koptim_test::TestTensor<float> a{{100}, "a"};                             // 400
  koptim_test::TestTensor<double> b{{5, 10}, "b"};                          // 400
  koptim_test::TestTensor<float, Kokkos::LayoutLeft> c{{10, 10}, "c"};      // 400
  koptim_test::TestTensor<float> d{{4, 4, 4}, "d"};                         // 256
  koptim_test::TestTensor<float> e{{10, 10, 10}, "e"};                      // 4000
  koptim_test::TestTensor<double> f{{60}, "f"};                             // 480
  koptim_test::TestTensor<float> g{{1}, "g"};                               // 4
  koptim_test::TestTensor<double, Kokkos::LayoutLeft> h{{3, 10, 10}, "h"};  // 2400
  koptim_test::TestTensor<float> i{{2, 3}, "i"};                            // 24
  koptim_test::TestTensor<double> j{{1, 1, 1, 1}, "j"};                     // 8
  koptim::ParameterSet params;

  Model() {
    a.add_to(params, "a"), b.add_to(params, "b"), c.add_to(params, "c"), d.add_to(params, "d");
    e.add_to(params, "e"), f.add_to(params, "f"), g.add_to(params, "g"), h.add_to(params, "h");
    i.add_to(params, "i"), j.add_to(params, "j");
  }
};

// Fills every gradient with rank-dependent values (step makes each call's data different).
void fill(const koptim::ParameterSet& params, int step) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto& g = params[p].grad;
    koptim::dispatch(g.dtype, [&](auto t) {
      using T = decltype(t);
      auto h  = Kokkos::create_mirror_view(g.flat<T>());
      for (std::int64_t k = 0; k < g.size; ++k) h(k) = static_cast<T>(grad_value(rank, static_cast<int>(p) + step, k));
      Kokkos::deep_copy(g.flat<T>(), h);
    });
  }
}

// The gradients as doubles, parameter by parameter, in memory order.
std::vector<std::vector<double>> read(const koptim::ParameterSet& params) {
  std::vector<std::vector<double>> out;
  for (const auto& p : params.parameters()) {
    koptim::dispatch(p.grad.dtype, [&](auto t) {
      using T = decltype(t);
      auto h  = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.grad.flat<T>());
      out.emplace_back(h.data(), h.data() + h.extent(0));
    });
  }
  return out;
}

// The reference: each gradient by itself through MPI_Allreduce, then divided by the size, in
// the gradient's own precision.
std::vector<std::vector<double>> reference(const koptim::ParameterSet& params, MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<std::vector<double>> out;
  for (const auto& p : params.parameters()) {
    koptim::dispatch(p.grad.dtype, [&](auto t) {
      using T = decltype(t);
      auto h  = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.grad.flat<T>());
      std::vector<T> sum(h.extent(0));
      MPI_Allreduce(h.data(), sum.data(), static_cast<int>(sum.size()),
                    std::is_same<T, float>::value ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, comm);
      std::vector<double> mean;
      for (T s : sum) mean.push_back(static_cast<double>(s / static_cast<T>(size)));
      out.push_back(mean);
    });
  }
  return out;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const koptim::Error& e) {
    return e.what();
  }
  return {};
}

void check_mean(MPI_Comm user, std::size_t bucket_bytes) {
  Model m;
  auto comm = Communicator::create(user);
  GradientAllReducer reducer(comm, m.params, bucket_bytes);
  for (int step = 0; step < 3; ++step) {  // the buffers are reused from call to call
    fill(m.params, step);
    const auto expected = reference(m.params, user);
    reducer.all_reduce_mean();
    const auto got = read(m.params);
    for (std::size_t p = 0; p < got.size(); ++p)
      EXPECT_EQ(got[p], expected[p]) << "parameter " << m.params[p].name << ", bucket_bytes " << bucket_bytes;
  }
}

}  // namespace

TEST(GradientAllReduce, BucketPlanFollowsRegistrationOrderPerScalarType) {
  Model m;
  auto comm = Communicator::create(MPI_COMM_WORLD);
  // 1024-byte buckets, worked out by hand from the byte counts in Model:
  //   float32: [a c] (800; d would make 1056), [d] (256; e does not fit), [e] (4000 > 1024:
  //            alone), [g i] (28)
  //   float64: [b f] (880), [h] (2400: alone), [j] (h's bucket is full)
  // Buckets are numbered in the order they are opened.
  GradientAllReducer reducer(comm, m.params, 1024);
  EXPECT_EQ(reducer.num_buckets(), 7u);
  EXPECT_EQ(reducer.num_messages_per_call(), 7u);
  const std::vector<std::size_t> sizes = {2, 2, 1, 1, 2, 1, 1};  // [a c] [b f] [d] [e] [g i] [h] [j]
  const std::vector<std::size_t> bytes = {800, 880, 256, 4000, 28, 2400, 8};
  for (std::size_t k = 0; k < 7; ++k) {
    EXPECT_EQ(reducer.bucket_size(k), sizes[k]) << k;
    EXPECT_EQ(reducer.bucket_bytes(k), bytes[k]) << k;
  }
  // The default 25 MiB: one bucket per scalar type. One byte: every gradient alone.
  EXPECT_EQ(GradientAllReducer(comm, m.params).num_buckets(), 2u);
  EXPECT_EQ(GradientAllReducer(comm, m.params, 1).num_buckets(), 10u);
}

TEST(GradientAllReduce, MeanEqualsPlainAllReduceWorld) {
  for (std::size_t bucket_bytes : {std::size_t(1), std::size_t(1024), std::size_t(4096), std::size_t(25) << 20})
    check_mean(MPI_COMM_WORLD, bucket_bytes);
}

TEST(GradientAllReduce, MeanEqualsPlainAllReduceSubCommunicator) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sub);
  check_mean(sub, 1024);
  MPI_Comm_free(&sub);
}

TEST(GradientAllReduce, RanksWithDifferentParametersFailOnEveryRank) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Model m;
  koptim_test::TestTensor<float> extra({7}, "extra");
  if (rank == size - 1) extra.add_to(m.params, "extra");
  auto comm             = Communicator::create(MPI_COMM_WORLD);
  const std::string msg = message_of([&] { GradientAllReducer(comm, m.params, 1024); });
  if (size == 1) {
    EXPECT_EQ(msg, "");
  } else {
    EXPECT_NE(msg.find("the ranks registered different parameters"), std::string::npos) << msg;
    // The lowest rank that differs from rank 0, and where.
    const std::size_t position = m.params.parameters().size() - (rank == size - 1 ? 1 : 0);
    EXPECT_NE(msg.find("(rank " + std::to_string(size - 1) + ": at position " + std::to_string(position) +
                       " (from 0): parameter 'extra' float32 7 where rank 0 has nothing)"),
              std::string::npos)
        << msg;
  }
  // Different bucket_bytes would pair buckets of different lengths: also rejected.
  const std::string msg2 = message_of([&] { GradientAllReducer(comm, Model().params, 1000 + rank); });
  if (size > 1) {
    EXPECT_NE(msg2.find("different bucket_bytes (rank 1: bucket_bytes 1001 where rank 0 has bucket_bytes 1000)"),
              std::string::npos)
        << msg2;
  }
}

// A name with a line break (allowed) cannot shift the comparison: the rank that differs is
// named, not rank 0 against itself.
TEST(GradientAllReduce, NamesWithLineBreaksDoNotConfuseTheMismatchReport) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  koptim::ParameterSet ps;
  koptim_test::TestTensor<float> t({rank == size - 1 ? 8 : 7}, "t");
  t.add_to(ps, "a\nb");
  auto comm             = Communicator::create(MPI_COMM_WORLD);
  const std::string msg = message_of([&] { GradientAllReducer(comm, ps, 1024); });
  if (size == 1) {
    EXPECT_EQ(msg, "");
  } else {
    EXPECT_NE(
        msg.find("(rank " + std::to_string(size - 1) +
                 ": at position 0 (from 0): parameter 'a\nb' float32 8 where rank 0 has parameter 'a\nb' float32 7)"),
        std::string::npos)
        << msg;
  }
}

// Parameters may share one gradient View (a ParameterSet only reads gradients), but the mean is
// taken in place: the shared memory was reduced once per parameter (averaged twice when each had
// a bucket of its own; two teams storing to the same addresses in one bucket). Now once, in
// every bucket plan; gradients that overlap only in part are refused on every rank.
TEST(GradientAllReduce, SharedGradientIsReducedOnce) {
  Kokkos::View<float*> wp("wp", 7), wq("wq", 7), g("g", 7), wr("wr", 5), gr("gr", 5);
  koptim::ParameterSet params;
  params.add("p", wp, g);
  params.add("q", wq, g);
  params.add("r", wr, gr);
  auto comm = Communicator::create(MPI_COMM_WORLD);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const std::size_t bucket_bytes : {std::size_t(1), std::size_t(1) << 20}) {
    GradientAllReducer reducer(comm, params, bucket_bytes);
    EXPECT_EQ(reducer.num_buckets(), bucket_bytes == 1 ? 2u : 1u);
    if (bucket_bytes > 1) EXPECT_EQ(reducer.bucket_size(0), 2u);
    // Thirds of a grid value: the sums and means round, so a second averaging can show.
    const auto value = [&](int r, int k) { return static_cast<float>((r * 7 + k * 3 % 11 + 1) / 3.0); };
    auto gh          = Kokkos::create_mirror_view(g);
    auto rh          = Kokkos::create_mirror_view(gr);
    std::vector<float> sum_g(7), sum_r(5);
    for (int k = 0; k < 7; ++k) gh(k) = value(rank, k);
    for (int k = 0; k < 5; ++k) rh(k) = value(rank, k + 7);
    MPI_Allreduce(gh.data(), sum_g.data(), 7, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(rh.data(), sum_r.data(), 5, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    Kokkos::deep_copy(g, gh);
    Kokkos::deep_copy(gr, rh);
    reducer.all_reduce_mean();
    Kokkos::deep_copy(gh, g);
    Kokkos::deep_copy(rh, gr);
    for (int k = 0; k < 7; ++k) EXPECT_EQ(gh(k), sum_g[k] / static_cast<float>(size)) << k << ", " << bucket_bytes;
    for (int k = 0; k < 5; ++k) EXPECT_EQ(rh(k), sum_r[k] / static_cast<float>(size)) << k << ", " << bucket_bytes;
  }
  Kokkos::View<float*> big("big", 10), wa("wa", 6), wb("wb", 6);
  koptim::ParameterSet overlapping;
  overlapping.add("a", wa, Kokkos::subview(big, std::make_pair(0, 6)));
  overlapping.add("b", wb, Kokkos::subview(big, std::make_pair(4, 10)));
  const std::string m = message_of([&] { GradientAllReducer bad(comm, overlapping); });
  EXPECT_NE(m.find("the gradients of parameters 'a' and 'b' overlap in part"), std::string::npos) << m;
}

TEST(GradientAllReduce, ZeroBucketBytesIsRejected) {
  Model m;
  auto comm             = Communicator::create(MPI_COMM_WORLD);
  const std::string msg = message_of([&] { GradientAllReducer(comm, m.params, 0); });
  EXPECT_EQ(msg, "koptim::comm::GradientAllReducer: bucket_bytes = 0 is not allowed; allowed: at least 1");
}
