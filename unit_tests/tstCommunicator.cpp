// koptim::comm::Communicator (MPI backend) against plain MPI calls, on MPI_COMM_WORLD and on a
// sub-communicator; errors that must reach every rank with the same message; the host control
// plane; split_groups; the bf16 conversions against a brute-force nearest-value reference.
// Registered at 1 to 4 ranks; every test calls the collectives on every rank.
#include <koptim/comm/koptim_BF16.hpp>
#include <koptim/comm/koptim_Communicator.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using koptim::MemorySpace;
using koptim::comm::Communicator;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Values on a 1/16 grid: sums of a few are exact, whatever order MPI adds them in.
double grid_value(int rank, std::size_t i) {
  return static_cast<double>((rank * 7 + static_cast<int>(i) * 3) % 29 - 14) / 16.0;
}

template <class T>
Kokkos::View<T*, MemorySpace> make_view(const std::vector<T>& v, const std::string& label) {
  Kokkos::View<T*, MemorySpace> d(label, v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

template <class T>
std::vector<T> to_vector(const Kokkos::View<T*, MemorySpace>& d) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  return std::vector<T>(h.data(), h.data() + h.extent(0));
}

template <class T>
MPI_Datatype mpi_type() {
  return std::is_same<T, float>::value ? MPI_FLOAT : std::is_same<T, double>::value ? MPI_DOUBLE : MPI_UINT16_T;
}

// The evens and the odds of MPI_COMM_WORLD; freed by the caller.
MPI_Comm split_even_odd() {
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &c);
  return c;
}

template <class T>
void check_all_reduce(MPI_Comm user) {
  auto comm = Communicator::create(user);
  int rank = 0, size = 0;
  MPI_Comm_rank(user, &rank);
  MPI_Comm_size(user, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), size);
  EXPECT_EQ(comm->backend(), koptim::comm::Backend::mpi);
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(100003)}) {
    std::vector<T> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<T>(grid_value(world_rank(), i));
    std::vector<T> expected(n);
    MPI_Allreduce(mine.data(), expected.data(), static_cast<int>(n), mpi_type<T>(), MPI_SUM, user);
    auto d = make_view(mine, "data");
    comm->all_reduce_sum(d);
    EXPECT_EQ(to_vector(d), expected) << "n = " << n;
  }
}

template <class T>
void check_all_gather(MPI_Comm user) {
  auto comm      = Communicator::create(user);
  const int size = comm->size(), rank = comm->rank();
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(777)}) {
    std::vector<T> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<T>(1000 * world_rank() + i);
    std::vector<T> expected(n * size);
    MPI_Allgather(mine.data(), static_cast<int>(n), mpi_type<T>(), expected.data(), static_cast<int>(n), mpi_type<T>(),
                  user);
    auto send = make_view(mine, "send");
    Kokkos::View<T*, MemorySpace> recv("recv", n * size);
    comm->all_gather(send, recv);
    EXPECT_EQ(to_vector(recv), expected) << "n = " << n;
    // In place: send is this rank's block of recv.
    Kokkos::View<T*, MemorySpace> recv2("recv2", n * size);
    auto block = Kokkos::subview(recv2, std::make_pair(rank * n, (rank + 1) * n));
    Kokkos::deep_copy(block, send);
    comm->all_gather(block, recv2);
    EXPECT_EQ(to_vector(recv2), expected) << "in place, n = " << n;
  }
}

// Blocks of different sizes against plain MPI_Allgatherv: rank r sends scale * ((3 r + 1) % 7)
// elements (1, 4, 0, 3, ... times scale: rank 2 sends none from 3 ranks on), out of place and in
// place.
template <class T>
void check_all_gather_blocks(MPI_Comm user) {
  auto comm      = Communicator::create(user);
  const int size = comm->size(), rank = comm->rank();
  for (std::size_t scale : {std::size_t(0), std::size_t(1), std::size_t(111)}) {
    std::vector<std::size_t> counts(size), first(size, 0);
    std::vector<int> icounts(size), idispls(size);
    for (int r = 0; r < size; ++r) {
      counts[r]  = scale * static_cast<std::size_t>((3 * r + 1) % 7);
      first[r]   = r == 0 ? 0 : first[r - 1] + counts[r - 1];
      icounts[r] = static_cast<int>(counts[r]), idispls[r] = static_cast<int>(first[r]);
    }
    const std::size_t n = counts[rank], total = first.back() + counts.back();
    std::vector<T> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<T>(1000 * world_rank() + i);
    std::vector<T> expected(total);
    MPI_Allgatherv(mine.data(), static_cast<int>(n), mpi_type<T>(), expected.data(), icounts.data(), idispls.data(),
                   mpi_type<T>(), user);
    auto send = make_view(mine, "send");
    Kokkos::View<T*, MemorySpace> recv("recv", total);
    comm->all_gather(send, recv, counts);
    EXPECT_EQ(to_vector(recv), expected) << "scale " << scale;
    Kokkos::View<T*, MemorySpace> recv2("recv2", total);
    auto block = Kokkos::subview(recv2, std::make_pair(first[rank], first[rank] + n));
    Kokkos::deep_copy(block, send);
    comm->all_gather(block, recv2, counts);
    EXPECT_EQ(to_vector(recv2), expected) << "in place, scale " << scale;
  }
}

// Every rank caught an exception of type E; its message is returned (empty if nothing thrown).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return {};
}

}  // namespace

// KOPTIM_MPI_CUDA_AWARE overrides the MPI's own answer with exactly 0 or 1; anything else is
// refused naming the variable (it acts only for device memory, so asked directly here; that
// every rank's create refuses a bad value on any rank is tstRankAgreement.cpp's).
TEST(Communicator, CudaAwareOverrideIsZeroOrOne) {
  const char* old         = std::getenv("KOPTIM_MPI_CUDA_AWARE");
  const std::string saved = old ? old : "";
  setenv("KOPTIM_MPI_CUDA_AWARE", "1", 1);
  EXPECT_TRUE(koptim::Impl::mpi_reports_cuda_support());
  setenv("KOPTIM_MPI_CUDA_AWARE", "0", 1);
  EXPECT_FALSE(koptim::Impl::mpi_reports_cuda_support());
  for (const char* v : {"", "false", "no", "00", "1 ", "true", "2"}) {
    setenv("KOPTIM_MPI_CUDA_AWARE", v, 1);
    try {
      koptim::Impl::mpi_reports_cuda_support();
      ADD_FAILURE() << "accepted '" << v << "'";
    } catch (const koptim::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KOPTIM_MPI_CUDA_AWARE = '") + v + "' is not allowed"),
                std::string::npos)
          << e.what();
    }
  }
  if (old)
    setenv("KOPTIM_MPI_CUDA_AWARE", saved.c_str(), 1);
  else
    unsetenv("KOPTIM_MPI_CUDA_AWARE");
}

TEST(Communicator, AllReduceSumWorld) {
  check_all_reduce<float>(MPI_COMM_WORLD);
  check_all_reduce<double>(MPI_COMM_WORLD);
}

TEST(Communicator, AllReduceSumSubCommunicator) {
  MPI_Comm sub = split_even_odd();
  check_all_reduce<float>(sub);
  check_all_reduce<double>(sub);
  MPI_Comm_free(&sub);
}

TEST(Communicator, AllGatherWorld) {
  check_all_gather<float>(MPI_COMM_WORLD);
  check_all_gather<double>(MPI_COMM_WORLD);
  check_all_gather<std::uint16_t>(MPI_COMM_WORLD);
}

TEST(Communicator, AllGatherSubCommunicator) {
  MPI_Comm sub = split_even_odd();
  check_all_gather<float>(sub);
  check_all_gather<double>(sub);
  check_all_gather<std::uint16_t>(sub);
  MPI_Comm_free(&sub);
}

TEST(Communicator, AllGatherOfUnequalBlocks) {
  check_all_gather_blocks<float>(MPI_COMM_WORLD);
  check_all_gather_blocks<double>(MPI_COMM_WORLD);
  check_all_gather_blocks<std::uint16_t>(MPI_COMM_WORLD);
  MPI_Comm sub = split_even_odd();
  check_all_gather_blocks<float>(sub);
  MPI_Comm_free(&sub);
}

// MPI's counts are int: with the limit lowered to 100 elements, the same reductions (n up to
// 100003) and gathers (n = 777 per rank) go in pieces, the gathers as each rank's broadcast of its
// block, and give the same results.
TEST(Communicator, CountsBeyondMpisLimitGoInPieces) {
  struct Limit {
    Limit() { koptim::Impl::set_mpi_count_limit(100); }
    ~Limit() { koptim::Impl::set_mpi_count_limit(0); }
  } limit;
  EXPECT_EQ(koptim::Impl::mpi_count_limit(), 100u);
  check_all_reduce<float>(MPI_COMM_WORLD);
  check_all_reduce<double>(MPI_COMM_WORLD);
  check_all_gather<float>(MPI_COMM_WORLD);
  check_all_gather<double>(MPI_COMM_WORLD);
  check_all_gather<std::uint16_t>(MPI_COMM_WORLD);
  // Unequal blocks beyond the limit in total (up to 111 * 6 per rank) go as broadcasts too.
  check_all_gather_blocks<float>(MPI_COMM_WORLD);
  check_all_gather_blocks<std::uint16_t>(MPI_COMM_WORLD);
  MPI_Comm sub = split_even_odd();
  check_all_gather<float>(sub);
  check_all_gather_blocks<double>(sub);
  MPI_Comm_free(&sub);
}

TEST(Communicator, OwnsADuplicate) {
  MPI_Comm sub = split_even_odd();
  {
    auto comm  = Communicator::create(sub);
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(comm->mpi_comm(), sub, &result);
    EXPECT_EQ(result, MPI_CONGRUENT);  // same group and order, a different context
  }
  MPI_Comm_free(&sub);  // the Communicator freed its duplicate; the user's stays valid until here
  // Host memory never needs CUDA-aware MPI.
  constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
  if (host_memory) EXPECT_FALSE(Communicator::create(MPI_COMM_WORLD)->mpi_is_cuda_aware());
}

TEST(Communicator, MismatchedAllGatherCountsFailOnEveryRank) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  // Each rank sends rank + 1 elements into a recv sized for its own count.
  Kokkos::View<float*, MemorySpace> send("send", rank + 1), recv("recv", (rank + 1) * size);
  const std::string msg = message_of<koptim::ShapeError>([&] { comm->all_gather(send, recv); });
  if (size == 1) {
    EXPECT_EQ(msg, "");
  } else {
    EXPECT_EQ(msg, "koptim::comm::Communicator::all_gather: the ranks pass different element counts (from 1 to " +
                       std::to_string(size) + "); every rank must pass the same count");
  }
  EXPECT_TRUE(comm->same_on_all_ranks(msg));
  // The communicator still works afterwards: nothing was left half-sent.
  EXPECT_EQ(comm->sum(1), size);
}

// Unequal blocks: counts that differ between ranks, a wrong number of counts, a send or a recv of
// the wrong size on one rank, an overlap: ShapeError on every rank, the same message.
TEST(Communicator, BadBlockCountsFailOnEveryRank) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank(), bad = size - 1;
  std::vector<std::size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = static_cast<std::size_t>(r + 2);
  const std::size_t total = static_cast<std::size_t>(size * (size + 3) / 2);
  Kokkos::View<float*, MemorySpace> send("send", counts[rank]), recv("recv", total);
  auto check = [&](const std::string& msg, const std::string& want) {
    EXPECT_EQ(msg, want);
    EXPECT_TRUE(comm->same_on_all_ranks(msg));
  };
  // The last rank's counts differ in one entry (at one rank nothing differs; its send is then the
  // wrong size).
  std::vector<std::size_t> other = counts;
  if (rank == bad) other[0] += 1;
  const std::string differ = message_of<koptim::ShapeError>([&] { comm->all_gather(send, recv, other); });
  if (size > 1) {
    check(differ, "koptim::comm::Communicator::all_gather: the ranks pass different counts (rank " +
                      std::to_string(bad) +
                      ": counts[0] = 3 where rank 0 passes 2); every rank must pass the same "
                      "counts, one per rank (rank r's block size)");
  } else {
    check(differ,
          "koptim: rank 0: koptim::comm::Communicator::all_gather: send (View 'send') has 2 elements; it "
          "needs counts[rank()] = counts[0] = 3");
  }
  // One count too many on the last rank only, then on every rank.
  std::vector<std::size_t> longer = counts;
  longer.push_back(1);
  if (size > 1) {
    check(message_of<koptim::ShapeError>([&] { comm->all_gather(send, recv, rank == bad ? longer : counts); }),
          "koptim::comm::Communicator::all_gather: the ranks pass different counts (rank " + std::to_string(bad) +
              ": " + std::to_string(size + 1) + " counts where rank 0 passes " + std::to_string(size) +
              "); every rank must pass the same counts, one per rank (rank r's block size)");
  }
  check(message_of<koptim::ShapeError>([&] { comm->all_gather(send, recv, longer); }),
        "koptim: rank 0: koptim::comm::Communicator::all_gather: counts has " + std::to_string(size + 1) +
            " entries; it needs one per rank, size() = " + std::to_string(size));
  // The last rank's send one element short.
  Kokkos::View<float*, MemorySpace> short_send("short", counts[rank] - (rank == bad ? 1 : 0));
  check(message_of<koptim::ShapeError>([&] { comm->all_gather(short_send, recv, counts); }),
        "koptim: rank " + std::to_string(bad) + ": koptim::comm::Communicator::all_gather: send (View 'short') has " +
            std::to_string(counts[bad] - 1) + " elements; it needs counts[rank()] = counts[" + std::to_string(bad) +
            "] = " + std::to_string(counts[bad]));
  // send inside recv but not at this rank's block.
  Kokkos::View<float*, MemorySpace> wide("wide", total + 1);
  std::size_t first = 0;
  for (int r = 0; r < rank; ++r) first += counts[r];
  auto shifted              = Kokkos::subview(wide, std::make_pair(first + 1, first + 1 + counts[rank]));
  auto dst                  = Kokkos::subview(wide, std::make_pair(std::size_t(0), total));
  const std::string overlap = message_of<koptim::ShapeError>([&] { comm->all_gather(shifted, dst, counts); });
  EXPECT_NE(overlap.find("send overlaps recv but is not rank()'s block of it"), std::string::npos) << overlap;
  EXPECT_EQ(overlap.rfind("koptim: rank 0: ", 0), 0u) << overlap;
  // The communicator still works afterwards.
  comm->all_gather(send, recv, counts);
  EXPECT_EQ(comm->sum(1), size);
}

TEST(Communicator, WrongRecvExtentOnOneRankFailsOnEveryRank) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  const int bad = size - 1;
  Kokkos::View<double*, MemorySpace> send("send", 5), recv("recv", 5 * size + (rank == bad ? 1 : 0));
  const std::string msg = message_of<koptim::ShapeError>([&] { comm->all_gather(send, recv); });
  EXPECT_EQ(msg, "koptim: rank " + std::to_string(bad) +
                     ": koptim::comm::Communicator::all_gather: recv (View 'recv') has " +
                     std::to_string(5 * size + 1) + " elements; it needs size() * count = " + std::to_string(size) +
                     " * 5 = " + std::to_string(5 * size));
  // all_reduce_sum with different lengths: an error everywhere, not a truncated message.
  Kokkos::View<float*, MemorySpace> data("data", 10 + rank);
  const std::string msg2 = message_of<koptim::ShapeError>([&] { comm->all_reduce_sum(data); });
  if (size > 1) {
    EXPECT_NE(msg2.find("different element counts (from 10 to " + std::to_string(9 + size) + ")"), std::string::npos)
        << msg2;
  } else {
    EXPECT_EQ(msg2, "");
  }
  EXPECT_TRUE(comm->same_on_all_ranks(msg2));
}

TEST(Communicator, OverlappingSendIsRejected) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  Kokkos::View<float*, MemorySpace> recv("recv", 4 * size + 1);
  // send overlaps recv at a block that is not this rank's (shifted by one element).
  auto send             = Kokkos::subview(recv, std::make_pair(rank * 4 + 1, rank * 4 + 5));
  auto dst              = Kokkos::subview(recv, std::make_pair(0, 4 * size));
  const std::string msg = message_of<koptim::ShapeError>([&] { comm->all_gather(send, dst); });
  EXPECT_NE(msg.find("send overlaps recv but is not rank()'s block of it"), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("koptim: rank 0: ", 0), 0u) << msg;
}

TEST(Communicator, AgreeOnError) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  // Nobody fails: nothing thrown on any rank.
  EXPECT_NO_THROW(comm->agree_on_error(""));
  // Only the last rank fails: every rank throws its message.
  const int last  = size - 1;
  std::string msg = message_of<koptim::Error>(
      [&] { comm->agree_on_error(rank == last ? "file missing on " + std::to_string(rank) : ""); });
  EXPECT_EQ(msg, "koptim: rank " + std::to_string(last) + ": file missing on " + std::to_string(last));
  // Several ranks fail with different messages: the lowest failing rank's message everywhere.
  if (size >= 3) {
    msg = message_of<koptim::Error>([&] { comm->agree_on_error(rank >= 1 ? "bad " + std::to_string(rank) : ""); });
    EXPECT_EQ(msg, "koptim: rank 1: bad 1");
  }
  EXPECT_NO_THROW(comm->agree_on_error(""));
}

TEST(Communicator, SameOnAllRanks) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  EXPECT_TRUE(comm->same_on_all_ranks(""));
  EXPECT_TRUE(comm->same_on_all_ranks("shampoo: block_size=1024"));
  // One rank differs in one character (same length), or in length only.
  EXPECT_EQ(comm->same_on_all_ranks(rank == size - 1 ? "abcx" : "abcd"), size == 1);
  EXPECT_EQ(comm->same_on_all_ranks(rank == 0 ? std::string("abc\0", 4) : std::string("abc")), size == 1);
}

TEST(Communicator, Sha256KnownDigests) {
  auto hex = [](const std::array<std::uint8_t, 32>& d) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (auto b : d) s += digits[b >> 4], s += digits[b & 15];
    return s;
  };
  // FIPS 180-4 examples.
  EXPECT_EQ(hex(koptim::Impl::sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(koptim::Impl::sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(koptim::Impl::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Communicator, HostReductions) {
  auto comm            = Communicator::create(MPI_COMM_WORLD);
  const long long size = comm->size(), rank = comm->rank();
  const long long big = 1LL << 40;  // beyond int
  EXPECT_EQ(comm->max(big + rank), big + size - 1);
  EXPECT_EQ(comm->min(big + rank), big);
  EXPECT_EQ(comm->sum(big + rank), size * big + size * (size - 1) / 2);
}

TEST(Communicator, SplitGroups) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  for (int n = 1; n <= size; ++n) {
    if (size % n != 0) continue;
    auto groups = comm->split_groups(n);
    auto group = groups.first, across = groups.second;
    ASSERT_EQ(group->size(), n);
    ASSERT_EQ(across->size(), size / n);
    EXPECT_EQ(group->rank(), rank % n);
    EXPECT_EQ(across->rank(), rank / n);
    EXPECT_EQ(group->backend(), comm->backend());
    // Sums of world ranks tell who is in which communicator.
    Kokkos::View<double*, MemorySpace> d("d", 1);
    Kokkos::deep_copy(d, static_cast<double>(rank));
    group->all_reduce_sum(d);
    const int g0 = (rank / n) * n;  // first rank of my group
    EXPECT_EQ(to_vector(d)[0], static_cast<double>(n * g0 + n * (n - 1) / 2)) << "group_size " << n;
    Kokkos::deep_copy(d, static_cast<double>(rank));
    across->all_reduce_sum(d);
    const int m = size / n;  // ranks rank % n, rank % n + n, ...
    EXPECT_EQ(to_vector(d)[0], static_cast<double>(m * (rank % n) + n * m * (m - 1) / 2)) << "group_size " << n;
  }
}

TEST(Communicator, SplitGroupsAtFourRanks) {
  auto comm = Communicator::create(MPI_COMM_WORLD);
  if (comm->size() != 4) GTEST_SKIP() << "needs 4 ranks (runs in koptim_comm_np4)";
  const int rank = comm->rank();
  struct Case {
    int n, group_size, group_rank, across_size, across_rank;
  };
  for (const Case& c : {Case{1, 1, 0, 4, rank}, Case{2, 2, rank % 2, 2, rank / 2}, Case{4, 4, rank, 1, 0}}) {
    auto g = comm->split_groups(c.n);
    EXPECT_EQ(g.first->size(), c.group_size);
    EXPECT_EQ(g.first->rank(), c.group_rank);
    EXPECT_EQ(g.second->size(), c.across_size);
    EXPECT_EQ(g.second->rank(), c.across_rank);
  }
  const std::string msg = message_of<koptim::ConfigError>([&] { comm->split_groups(3); });
  EXPECT_EQ(msg,
            "koptim::comm::Communicator::split_groups: num_trainers_per_group = 3 is not allowed with 4 ranks; "
            "allowed: a divisor of the number of ranks (1 to 4)");
}

TEST(Communicator, SplitGroupsRejectsBadSizes) {
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size();
  for (int bad : {0, -2, size + 1}) {
    const std::string msg = message_of<koptim::ConfigError>([&] { comm->split_groups(bad); });
    EXPECT_NE(msg.find("num_trainers_per_group = " + std::to_string(bad) + " is not allowed"), std::string::npos)
        << msg;
  }
  if (size > 1) {
    const std::string msg = message_of<koptim::ConfigError>([&] { comm->split_groups(comm->rank() == 0 ? 1 : size); });
    EXPECT_NE(msg.find("the ranks pass different num_trainers_per_group"), std::string::npos) << msg;
  }
}

TEST(Communicator, NcclBackendNeedsNccl) {
#if KOPTIM_ENABLE_NCCL
  GTEST_SKIP() << "koptim was built with NCCL; the NCCL backend is tested in koptim_nccl";
#else
  const std::string msg =
      message_of<koptim::ConfigError>([] { Communicator::create(MPI_COMM_WORLD, koptim::comm::Backend::nccl); });
  EXPECT_NE(msg.find("backend = nccl is not available: koptim was built without NCCL"), std::string::npos) << msg;
#endif
  EXPECT_STREQ(koptim::comm::to_string(koptim::comm::Backend::nccl), "nccl");
  EXPECT_STREQ(koptim::comm::to_string(koptim::comm::Backend::mpi), "mpi");
}

// --- bf16 -----------------------------------------------------------------------------------

namespace {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Classified by bits: a floating-point comparison of a signalling NaN would trip the test
// main's FE_INVALID trap.
bool is_nan(float f) { return (float_to_bits(f) & 0x7fffffffu) > 0x7f800000u; }
bool is_finite(float f) { return (float_to_bits(f) & 0x7f800000u) != 0x7f800000u; }

// Brute force: of the two bf16 values around x (truncation and the next one up in magnitude),
// the nearer in double arithmetic; on a tie, the one with an even last bit.
std::uint16_t nearest_bf16(float x) {
  const std::uint16_t lo = static_cast<std::uint16_t>(float_to_bits(x) >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  const double dlo       = std::fabs(static_cast<double>(koptim::comm::from_bf16(lo)) - x);
  const double dhi       = std::fabs(static_cast<double>(koptim::comm::from_bf16(hi)) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

}  // namespace

TEST(BF16, RepresentableValuesRoundTripExactly) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b  = static_cast<std::uint16_t>(h);
    const float f = koptim::comm::from_bf16(b);
    EXPECT_EQ(float_to_bits(f), h << 16);
    if (is_nan(f)) {
      EXPECT_TRUE(is_nan(koptim::comm::from_bf16(koptim::comm::to_bf16(f)))) << h;
    } else {
      ASSERT_EQ(koptim::comm::to_bf16(f), b) << h;
    }
  }
}

TEST(BF16, RoundsToNearestEven) {
  using koptim::comm::to_bf16;
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.0 (0x3f80).
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above the first halfway point: up.
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(to_bf16(-1.0f - std::ldexp(1.0f, -8)), 0xbf80);
  // Carry into the exponent: the largest float below 2 rounds to 2.
  EXPECT_EQ(to_bf16(std::nextafter(2.0f, 0.0f)), 0x4000);
  // Beyond the largest bf16: inf. Infinities and zeros keep their sign.
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(to_bf16(-0.0f), 0x8000);
  // NaNs stay NaNs, even with the payload in the low bits only (truncation would give inf).
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    EXPECT_TRUE(is_nan(koptim::comm::from_bf16(to_bf16(bits_to_float(nan))))) << std::hex << nan;
    EXPECT_EQ(to_bf16(bits_to_float(nan)) & 0x8000, (nan >> 16) & 0x8000);
  }
  // Against the brute-force reference on many floats of all magnitudes (finite ones).
  std::uint64_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x                     = x * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint32_t u = static_cast<std::uint32_t>(x >> 32);
    const float f         = bits_to_float(u);
    if (!is_finite(f) || std::fabs(f) >= std::numeric_limits<float>::max() / 2) continue;
    ASSERT_EQ(to_bf16(f), nearest_bf16(f)) << std::hex << u;
    if (std::fabs(f) >= std::numeric_limits<float>::min()) {  // normal numbers
      const double rel = std::fabs((static_cast<double>(koptim::comm::from_bf16(to_bf16(f))) - f) / f);
      ASSERT_LE(rel, std::ldexp(1.0, -8)) << f;
    }
  }
}

// A double is rounded to bf16 once: against brute force in long double (the two bf16 values
// around d, from its float truncated toward zero; the nearer, ties to the even one), over doubles
// of all float magnitudes with random low bits, and the ties and near-ties that rounding through
// the nearest float gets wrong.
TEST(BF16, RoundsDoublesOnce) {
  using koptim::comm::to_bf16;
  auto nearest = [](double d) {
    float t = static_cast<float>(d);
    if (std::fabs(static_cast<double>(t)) > std::fabs(d)) t = std::nextafter(t, 0.0f);
    const std::uint16_t lo = static_cast<std::uint16_t>(float_to_bits(t) >> 16);
    const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
    const long double dlo  = std::fabs(static_cast<long double>(koptim::comm::from_bf16(lo)) - d);
    const long double dhi  = std::fabs(static_cast<long double>(koptim::comm::from_bf16(hi)) - d);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) == 0 ? lo : hi;
  };
  // 1 + 2^-8 + 2^-30: its nearest float is the tie 1 + 2^-8 (which rounds to 1), its nearest bf16
  // is 1 + 2^-7; just below the tie, 1; the tie itself, to even.
  EXPECT_EQ(to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);
  EXPECT_EQ(to_bf16(-1.0 - std::ldexp(1.0, -8) - std::ldexp(1.0, -30)), 0xbf81);
  EXPECT_EQ(to_bf16(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)), 0x3f80);
  EXPECT_EQ(to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(to_bf16(1.0 + 3 * std::ldexp(1.0, -8) - std::ldexp(1.0, -30)), 0x3f81);
  // Beyond every float, and the special values, as the float conversion gives them.
  EXPECT_EQ(to_bf16(1e300), 0x7f80);
  EXPECT_EQ(to_bf16(-1e300), 0xff80);
  EXPECT_EQ(to_bf16(static_cast<double>(std::numeric_limits<float>::max())), 0x7f80);
  EXPECT_EQ(to_bf16(std::numeric_limits<double>::infinity()), 0x7f80);
  EXPECT_EQ(to_bf16(-0.0), 0x8000);
  EXPECT_EQ(to_bf16(1e-300), 0x0000);
  EXPECT_EQ(to_bf16(-1e-300), 0x8000);
  EXPECT_TRUE(is_nan(koptim::comm::from_bf16(to_bf16(std::numeric_limits<double>::quiet_NaN()))));
  std::uint64_t x         = 54321;
  int wrong_through_float = 0;
  for (int i = 0; i < 400000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    // A float's bits (finite, below half the largest), then 29 random bits below them in the
    // double. Every eighth float is a midpoint between two bf16 values, and the bits below it less
    // than half a float unit: the nearest float is that midpoint, a tie, where d's nearest bf16
    // is the one of larger magnitude.
    std::uint32_t u = static_cast<std::uint32_t>(x >> 32);
    if (i % 8 == 0) u = (u & 0xffff0000u) | 0x8000u;
    const float f = bits_to_float(u);
    if (!is_finite(f) || std::fabs(f) >= std::numeric_limits<float>::max() / 2) continue;
    double d = static_cast<double>(f);
    std::uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    if (std::fabs(f) >= std::numeric_limits<float>::min()) {  // a normal float: 29 bits below it in d
      const std::uint64_t low = (x >> 3) & ((std::uint64_t(1) << (i % 8 == 0 ? 28 : 29)) - 1);
      bits |= i % 8 == 0 ? (low | 1) : low;
      std::memcpy(&d, &bits, sizeof d);
    }
    ASSERT_EQ(to_bf16(d), nearest(d)) << std::hexfloat << d;
    if (to_bf16(static_cast<float>(d)) != nearest(d)) ++wrong_through_float;
  }
  EXPECT_GT(wrong_through_float, 0);  // the cases this conversion exists for were among them
}

TEST(BF16, ViewKernelsMatchTheScalarConversion) {
  const std::size_t n = 10007;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::ldexp(static_cast<float>(i * 2654435761u % 100003) - 50000.0f, -9);
  auto in = make_view(v, "in");
  Kokkos::View<std::uint16_t*, MemorySpace> half("half", n);
  Kokkos::View<float*, MemorySpace> back("back", n);
  koptim::comm::to_bf16(in, half);
  koptim::comm::from_bf16(half, back);
  const auto h = to_vector(half);
  const auto b = to_vector(back);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], koptim::comm::to_bf16(v[i])) << i;
    ASSERT_EQ(b[i], koptim::comm::from_bf16(h[i])) << i;
  }
  Kokkos::View<std::uint16_t*, MemorySpace> wrong("wrong", n - 1);
  const std::string msg = message_of<koptim::ShapeError>([&] { koptim::comm::to_bf16(in, wrong); });
  EXPECT_EQ(msg, "koptim::comm::to_bf16: in has 10007 elements but out has 10006; they must have the same extent");
}

TEST(BF16, GatheredThroughTheCommunicator) {
  // The distributor's bf16 option: convert, gather the uint16 payloads, convert back.
  auto comm      = Communicator::create(MPI_COMM_WORLD);
  const int size = comm->size(), rank = comm->rank();
  const std::size_t n = 33;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.1f * static_cast<float>(i) + static_cast<float>(rank);
  auto in = make_view(v, "in");
  Kokkos::View<std::uint16_t*, MemorySpace> half("half", n), all("all", n * size);
  koptim::comm::to_bf16(in, half);
  comm->all_gather(half, all);
  const auto h = to_vector(all);
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(h[r * n + i], koptim::comm::to_bf16(0.1f * static_cast<float>(i) + static_cast<float>(r)));
}
