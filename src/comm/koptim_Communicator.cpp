// The Communicator base (ownership of the duplicated MPI communicator, the host control plane)
// and the MPI backend of the data plane.
#include "koptim_Distributor.hpp"
#include "koptim_TypedCommunicator.hpp"
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <koptim_config.hpp>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

namespace koptim {
namespace Impl {
namespace {
std::size_t count_limit = INT_MAX;
}  // namespace
std::size_t mpi_count_limit() { return count_limit; }
void set_mpi_count_limit(std::size_t limit) {
  count_limit = limit == 0 ? INT_MAX : std::min<std::size_t>(limit, INT_MAX);
}
}  // namespace Impl

namespace comm {

const char* to_string(Backend b) { return b == Backend::nccl ? "nccl" : "mpi"; }

namespace {

// MPI errors are fatal by default (MPI_ERRORS_ARE_FATAL on the duplicate too), so a failing
// call aborts the job with MPI's own message; the checks here catch what MPI would not say well.
void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("koptim: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<std::uint16_t>() {
  return MPI_UINT16_T;
}

constexpr bool host_accessible = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

// The MPI data plane. Host memory (and device memory under CUDA-aware MPI) goes to MPI as it is;
// otherwise it is staged through host copies, because a non-CUDA-aware MPI would read a device
// pointer as a host address.
class MpiCommunicator final : public koptim::Impl::TypedCommunicator<MpiCommunicator> {
  friend class koptim::Impl::TypedCommunicator<MpiCommunicator>;

 public:
  explicit MpiCommunicator(MPI_Comm dup) : TypedCommunicator(dup, Backend::mpi) {}

 private:
  bool direct() const { return host_accessible || mpi_is_cuda_aware(); }

  // The host buffer that device data goes through when MPI cannot read device memory: kept and
  // grown to the largest message, so that a step's collectives allocate nothing.
  template <class T>
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> staging(std::size_t n) const {
    if (staging_.extent(0) < n * sizeof(T)) {
      staging_ = Kokkos::View<unsigned char*, Kokkos::HostSpace>();
      staging_ = Kokkos::View<unsigned char*, Kokkos::HostSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::comm::staging"), n * sizeof(T));
    }
    return Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
        reinterpret_cast<T*>(staging_.data()), n);
  }
  mutable Kokkos::View<unsigned char*, Kokkos::HostSpace> staging_;

  // Arguments checked and agreed (TypedCommunicator::checked_reduce). MPI reads the data from
  // the host thread: first the kernels on exec that produce it must finish.
  template <class T>
  void reduce(const ExecutionSpace& exec, const Kokkos::View<T*, MemorySpace>& data) const {
    const std::size_t n = data.extent(0);
    if (direct()) {
      Impl::fence(exec, "koptim::comm::Communicator::all_reduce_sum: data ready for MPI");
      reduce_raw(data.data(), n);
    } else {
      const auto host = staging<T>(n);
      Kokkos::deep_copy(exec, host, data);
      Impl::fence(exec, "koptim::comm::Communicator::all_reduce_sum: data staged for MPI");
      reduce_raw(host.data(), n);
      Kokkos::deep_copy(exec, data, host);
      // The staging buffer is the next collective's: the copy out of it must be done.
      Impl::fence(exec, "koptim::comm::Communicator::all_reduce_sum: result copied back");
    }
  }

  // MPI counts are int: longer buffers go in pieces of 2^30 elements.
  template <class T>
  void reduce_raw(T* p, std::size_t n) const {
    const std::size_t piece = std::min<std::size_t>(std::size_t(1) << 30, Impl::mpi_count_limit());
    for (std::size_t off = 0; off < n; off += piece) {
      const int c = static_cast<int>(std::min(piece, n - off));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, p + off, c, mpi_type<T>(), MPI_SUM, mpi_comm()), "MPI_Allreduce");
    }
  }

  // Arguments checked and agreed, count > 0 (TypedCommunicator::checked_gather): blocks of equal
  // counts, the same path as unequal ones.
  template <class T>
  void gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
              const Kokkos::View<T*, MemorySpace>& recv) const {
    gather(exec, send, recv, std::vector<std::size_t>(static_cast<std::size_t>(size()), send.extent(0)));
  }

  // The in-place all-gather of blocks of counts[r] elements, rank r's at first[r], on
  // host-readable or CUDA-aware memory: equal counts by MPI_Allgather, others by MPI_Allgatherv.
  // MPI counts (and Allgatherv's displacements) are int: beyond them, each rank's broadcast of its
  // own block in pieces (of 2^30 elements), in rank order.
  template <class T>
  void gather_in_place(T* recv, const std::vector<std::size_t>& counts, const std::vector<std::size_t>& first) const {
    const std::size_t total = first.back() + counts.back();
    const bool equal        = std::equal(counts.begin() + 1, counts.end(), counts.begin());
    if (equal && counts[0] <= Impl::mpi_count_limit()) {
      const int c = static_cast<int>(counts[0]);
      check_mpi(MPI_Allgather(MPI_IN_PLACE, c, mpi_type<T>(), recv, c, mpi_type<T>(), mpi_comm()), "MPI_Allgather");
      return;
    }
    if (total <= Impl::mpi_count_limit()) {
      std::vector<int> c(counts.begin(), counts.end()), d(first.begin(), first.end());
      // With MPI_IN_PLACE the send count and type are ignored; given as they are all the same
      // (some MPIs and profilers have read them anyway).
      check_mpi(MPI_Allgatherv(MPI_IN_PLACE, c[static_cast<std::size_t>(rank())], mpi_type<T>(), recv, c.data(),
                               d.data(), mpi_type<T>(), mpi_comm()),
                "MPI_Allgatherv");
      return;
    }
    const std::size_t piece = std::min<std::size_t>(std::size_t(1) << 30, Impl::mpi_count_limit());
    for (int r = 0; r < size(); ++r)
      for (std::size_t off = 0; off < counts[r]; off += piece) {
        const int c = static_cast<int>(std::min(piece, counts[r] - off));
        check_mpi(MPI_Bcast(recv + first[r] + off, c, mpi_type<T>(), r, mpi_comm()), "MPI_Bcast");
      }
  }

  // Arguments checked and agreed, a positive sum of counts (TypedCommunicator::checked_gather).
  template <class T>
  void gather(const ExecutionSpace& exec, const Kokkos::View<const T*, MemorySpace>& send,
              const Kokkos::View<T*, MemorySpace>& recv, const std::vector<std::size_t>& counts) const {
    std::vector<std::size_t> first(counts.size(), 0);
    for (std::size_t r = 1; r < counts.size(); ++r) first[r] = first[r - 1] + counts[r - 1];
    const std::size_t me = static_cast<std::size_t>(rank()), total = first.back() + counts.back();
    const auto mine     = std::make_pair(first[me], first[me] + counts[me]);
    const bool in_place = send.data() == recv.data() + first[me];
    if (direct()) {
      if (!in_place) Kokkos::deep_copy(exec, Kokkos::subview(recv, mine), send);
      Impl::fence(exec, "koptim::comm::Communicator::all_gather: send ready for MPI");
      gather_in_place(recv.data(), counts, first);
    } else {
      const auto host_recv = staging<T>(total);
      Kokkos::deep_copy(exec, Kokkos::subview(host_recv, mine), send);
      Impl::fence(exec, "koptim::comm::Communicator::all_gather: send staged for MPI");
      gather_in_place(host_recv.data(), counts, first);
      Kokkos::deep_copy(exec, recv, host_recv);
      Impl::fence(exec, "koptim::comm::Communicator::all_gather: result copied back");
    }
  }
};

}  // namespace

// --- ownership ------------------------------------------------------------------------------

Communicator::CommHandle::~CommHandle() {
  if (comm_ == MPI_COMM_NULL) return;
  // A communicator that outlives MPI_Finalize (a static, a leaked shared_ptr) cannot be freed.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

Communicator::Communicator(MPI_Comm dup, Backend backend) : comm_(dup), backend_(backend) {
  MPI_Comm_rank(dup, &rank_);
  MPI_Comm_size(dup, &size_);
  // Ranks of one job run the same MPI library, so the library's answer is the same on every rank;
  // the override KOPTIM_MPI_CUDA_AWARE is each rank's environment: checked on every backend (a
  // value that is neither 0 nor 1 is refused, also where it is not used) and the check agreed on,
  // so that a rank with a bad value fails every rank's create, not only its own.
  Impl::run_together(this, [&] {
    const bool cuda_aware = Impl::mpi_reports_cuda_support();
    cuda_aware_           = !host_accessible && cuda_aware;
  });
}

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::create(MPI_Comm comm, Backend backend) {
  Impl::ScopedRegion region("koptim::comm::Communicator::create");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw ConfigError("koptim::comm::Communicator::create: MPI is not initialized; call MPI_Init first");
  if (comm == MPI_COMM_NULL) throw ConfigError("koptim::comm::Communicator::create: the communicator is MPI_COMM_NULL");
  if (backend == Backend::nccl && !KOPTIM_ENABLE_NCCL) {
    throw ConfigError(
        "koptim::comm::Communicator::create: backend = nccl is not available: koptim was built without NCCL "
        "(configure with -Dkoptim_ENABLE_NCCL=ON, a CUDA Kokkos and NCCL_ROOT); allowed here: mpi");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
#if KOPTIM_ENABLE_NCCL
  if (backend == Backend::nccl) return Impl::make_nccl_communicator(dup);
#endif
  return std::make_shared<MpiCommunicator>(dup);
}

// --- host control plane ---------------------------------------------------------------------

namespace {
long long all_reduce_ll(MPI_Comm comm, long long v, MPI_Op op) {
  long long r = 0;
  check_mpi(MPI_Allreduce(&v, &r, 1, MPI_LONG_LONG, op, comm), "MPI_Allreduce");
  return r;
}
}  // namespace

long long Communicator::max(long long v) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::max");
  return all_reduce_ll(mpi_comm(), v, MPI_MAX);
}

long long Communicator::min(long long v) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::min");
  return all_reduce_ll(mpi_comm(), v, MPI_MIN);
}

long long Communicator::sum(long long v) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::sum");
  return all_reduce_ll(mpi_comm(), v, MPI_SUM);
}

bool Communicator::same_on_all_ranks(const std::string& s) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::same_on_all_ranks");
  // Words w and ~w under one bitwise AND: every rank has the same w exactly when
  // AND(w) == ~AND(~w) (= OR(w)), so one collective compares digest and length.
  const auto digest = Impl::sha256(s);
  std::uint64_t words[5];
  std::memcpy(words, digest.data(), 32);
  words[4] = static_cast<std::uint64_t>(s.size());
  std::uint64_t both[10], reduced[10];
  for (int i = 0; i < 5; ++i) both[i] = words[i], both[5 + i] = ~words[i];
  check_mpi(MPI_Allreduce(both, reduced, 10, MPI_UINT64_T, MPI_BAND, mpi_comm()), "MPI_Allreduce");
  for (int i = 0; i < 5; ++i)
    if (reduced[i] != ~reduced[5 + i]) return false;
  return true;
}

namespace {

// The lowest rank with a non-empty local message, or -1; and that rank's message, on every rank.
std::pair<int, std::string> lowest_failing(MPI_Comm comm, int rank, int size, const std::string& local) {
  int mine = local.empty() ? size : rank, lowest = size;
  check_mpi(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (lowest == size) return {-1, {}};
  long long len = static_cast<long long>(local.size());
  check_mpi(MPI_Bcast(&len, 1, MPI_LONG_LONG, lowest, comm), "MPI_Bcast");
  std::string message = rank == lowest ? local : std::string(static_cast<std::size_t>(len), '\0');
  if (len > 0) check_mpi(MPI_Bcast(&message[0], static_cast<int>(len), MPI_CHAR, lowest, comm), "MPI_Bcast");
  return {lowest, message};
}

}  // namespace

void Communicator::agree_on_error(const std::string& local_error) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::agree_on_error");
  const auto failed = lowest_failing(mpi_comm(), rank(), size(), local_error);
  if (failed.first >= 0) throw Error("koptim: rank " + std::to_string(failed.first) + ": " + failed.second);
}

std::pair<int, std::string> Communicator::first_error(const std::string& local_error) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::first_error");
  return lowest_failing(mpi_comm(), rank(), size(), local_error);
}

namespace {
// An exception that agree_on_exception threw on every rank of a communicator: its message names
// the failing rank already. Agreed on again over the same communicator (run_together inside
// run_together), where every rank now holds it, it keeps its message instead of gaining a second
// "rank R: " that names rank 0.
struct AgreedMark {
  const Communicator* by;
};
template <class E>
struct AgreedError : E, AgreedMark {
  AgreedError(const std::string& message, const Communicator* c) : E(message), AgreedMark{c} {}
};
[[noreturn]] void throw_agreed(char kind, const std::string& message, const Communicator* by) {
  switch (kind) {
    case 'C':
      throw AgreedError<ConfigError>(message, by);
    case 'S':
      throw AgreedError<ShapeError>(message, by);
    case 'N':
      throw AgreedError<NonFiniteError>(message, by);
    case 'T':
      throw AgreedError<StateError>(message, by);
    default:
      throw AgreedError<Error>(message, by);
  }
}
}  // namespace

void Communicator::agree_on_exception(std::exception_ptr local) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::agree_on_exception");
  // The message travels with one leading character naming its koptim type (lower case: agreed on
  // before, its message names its rank).
  std::string local_error;
  if (local) {
    try {
      std::rethrow_exception(local);
    } catch (const std::exception& e) {
      char kind = 'E';
      if (dynamic_cast<const ConfigError*>(&e))
        kind = 'C';
      else if (dynamic_cast<const ShapeError*>(&e))
        kind = 'S';
      else if (dynamic_cast<const NonFiniteError*>(&e))
        kind = 'N';
      else if (dynamic_cast<const StateError*>(&e))
        kind = 'T';
      const auto* a = dynamic_cast<const AgreedMark*>(&e);
      if (a && a->by == this) kind = static_cast<char>(kind - 'A' + 'a');
      local_error = std::string(1, kind) + e.what();
    } catch (...) {
      local_error = "Eunknown exception";
    }
  }
  const auto failed = lowest_failing(mpi_comm(), rank(), size(), local_error);
  if (failed.first < 0) return;
  const char kind   = failed.second[0];
  const bool agreed = kind >= 'a' && kind <= 'z';
  const std::string message =
      (size() > 1 && !agreed ? "rank " + std::to_string(failed.first) + ": " : std::string()) + failed.second.substr(1);
  throw_agreed(agreed ? static_cast<char>(kind - 'a' + 'A') : kind, message, this);
}

namespace {

// One collective on the good path: the maximum of (a failure flag, value, -value), giving the
// smallest and the largest value over the ranks and whether any rank failed.
struct Agreed {
  long long lo, hi;
  bool failed;
};
Agreed agree_on_value(MPI_Comm comm, long long value, const std::string& local_error) {
  long long v[3] = {local_error.empty() ? 0 : 1, value, -value}, r[3] = {0, 0, 0};
  check_mpi(MPI_Allreduce(v, r, 3, MPI_LONG_LONG, MPI_MAX, comm), "MPI_Allreduce");
  return {-r[2], r[1], r[0] != 0};
}

}  // namespace

void Communicator::agree_on_arguments(const char* what, long long count, const std::string& local_error) const {
  const Agreed a = agree_on_value(mpi_comm(), count, local_error);
  if (a.lo != a.hi) {
    std::ostringstream s;
    s << "koptim::comm::Communicator::" << what << ": the ranks pass different element counts (from " << a.lo << " to "
      << a.hi << "); every rank must pass the same count";
    throw ShapeError(s.str());
  }
  if (a.failed) {
    const auto first = lowest_failing(mpi_comm(), rank(), size(), local_error);
    throw ShapeError("koptim: rank " + std::to_string(first.first) + ": " + first.second);
  }
}

void Communicator::agree_on_arguments(const char* what, const std::vector<std::size_t>& counts,
                                      const std::string& local_error) const {
  // FNV-1a over the number of counts and each count, kept to 62 bits so that its negation fits.
  std::uint64_t h = 14695981039346656037ull;
  auto mix        = [&h](std::uint64_t x) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((x >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  mix(counts.size());
  for (std::size_t c : counts) mix(c);
  const Agreed a = agree_on_value(mpi_comm(), static_cast<long long>(h >> 2), local_error);
  if (a.lo != a.hi) {
    // Only on this failure path: where the counts differ from rank 0's.
    std::vector<std::string> mine;
    for (const std::size_t c : counts) mine.push_back(std::to_string(c));
    const auto first = Impl::first_difference_from_rank0(
        *this, mine, [](std::size_t k, const std::string* m, const std::string* zero, std::size_t n, std::size_t n0) {
          if (n != n0) return std::to_string(n) + " counts where rank 0 passes " + std::to_string(n0);
          return "counts[" + std::to_string(k) + "] = " + *m + " where rank 0 passes " + *zero;
        });
    throw ShapeError(std::string("koptim::comm::Communicator::") + what + ": the ranks pass different counts (rank " +
                     std::to_string(first.first) + ": " + first.second +
                     "); every rank must pass the same counts, one per rank (rank r's block size)");
  }
  if (a.failed) {
    const auto first = lowest_failing(mpi_comm(), rank(), size(), local_error);
    throw ShapeError("koptim: rank " + std::to_string(first.first) + ": " + first.second);
  }
}

std::pair<std::shared_ptr<Communicator>, std::shared_ptr<Communicator>> Communicator::split_groups(
    int group_size) const {
  Impl::ScopedRegion region("koptim::comm::Communicator::split_groups");
  const long long lo = min(group_size), hi = max(group_size);
  if (lo != hi) {
    std::ostringstream s;
    s << "koptim::comm::Communicator::split_groups: the ranks pass different num_trainers_per_group (from " << lo
      << " to " << hi << "); every rank must pass the same value";
    throw ConfigError(s.str());
  }
  if (group_size < 1 || size() % group_size != 0) {
    std::ostringstream s;
    s << "koptim::comm::Communicator::split_groups: num_trainers_per_group = " << group_size << " is not allowed with "
      << size() << " ranks; allowed: a divisor of the number of ranks (1 to " << size() << ")";
    throw ConfigError(s.str());
  }
  auto split = [&](int color) {
    MPI_Comm c = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(mpi_comm(), color, rank(), &c), "MPI_Comm_split");
    CommHandle owned(c);  // create() duplicates it; this one is freed here
    return create(c, backend());
  };
  auto group  = split(rank() / group_size);
  auto across = split(rank() % group_size);
  return {group, across};
}

}  // namespace comm

namespace Impl {

std::pair<int, std::string> first_difference_from_rank0(
    const comm::Communicator& comm, const std::vector<std::string>& entries,
    const std::function<std::string(std::size_t, const std::string*, const std::string*, std::size_t, std::size_t)>&
        describe) {
  // Rank 0's entries as one buffer: their number and lengths (64-bit words), then their bytes.
  std::vector<std::uint64_t> head{entries.size()};
  std::string bytes;
  for (const auto& e : entries) head.push_back(e.size()), bytes += e;
  std::uint64_t sizes[2] = {head.size(), bytes.size()};
  comm::check_mpi(MPI_Bcast(sizes, 2, MPI_UINT64_T, 0, comm.mpi_comm()), "MPI_Bcast");
  head.resize(sizes[0]);
  bytes.resize(sizes[1]);
  // In pieces: MPI's counts are int.
  auto broadcast = [&](void* data, std::size_t n, MPI_Datatype type, std::size_t unit) {
    const std::size_t piece = std::min<std::size_t>(std::size_t(1) << 30, Impl::mpi_count_limit());
    for (std::size_t off = 0; off < n; off += piece)
      comm::check_mpi(MPI_Bcast(static_cast<char*>(data) + off * unit, static_cast<int>(std::min(piece, n - off)), type,
                                0, comm.mpi_comm()),
                      "MPI_Bcast");
  };
  broadcast(head.data(), head.size(), MPI_UINT64_T, sizeof(std::uint64_t));
  broadcast(&bytes[0], bytes.size(), MPI_CHAR, 1);
  std::vector<std::string> zero;
  for (std::size_t k = 0, at = 0; k < head[0]; at += head[k + 1], ++k) zero.push_back(bytes.substr(at, head[k + 1]));
  std::string local;
  for (std::size_t k = 0; k < std::max(entries.size(), zero.size()) && local.empty(); ++k) {
    const std::string* m  = k < entries.size() ? &entries[k] : nullptr;
    const std::string* z0 = k < zero.size() ? &zero[k] : nullptr;
    if (!m || !z0 || *m != *z0) local = describe(k, m, z0, entries.size(), zero.size());
  }
  return comm.first_error(local);
}

bool mpi_reports_cuda_support() {
  // An override for MPIs without a query (Cray MPICH, MVAPICH2): KOPTIM_MPI_CUDA_AWARE=0/1.
  // Exactly 0 or 1: any other value is refused rather than guessed (a "yes" read from "false"
  // would hand device pointers to an MPI that cannot read them).
  if (const char* e = std::getenv("KOPTIM_MPI_CUDA_AWARE")) {
    if (std::strcmp(e, "0") == 0) return false;
    if (std::strcmp(e, "1") == 0) return true;
    throw ConfigError(std::string("koptim: the environment variable KOPTIM_MPI_CUDA_AWARE = '") + e +
                      "' is not allowed; allowed: 0 (the MPI cannot read device memory) or 1 (it can)");
  }
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// FIPS 180-4 SHA-256, written out here to keep koptim free of a crypto dependency.
std::array<std::uint8_t, 32> sha256(const std::string& bytes) {
  static const std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr          = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  // The message, a 1 bit, zeros, and the bit length (big endian) fill whole 64-byte blocks.
  std::vector<std::uint8_t> m(bytes.begin(), bytes.end());
  const std::uint64_t bits = static_cast<std::uint64_t>(bytes.size()) * 8;
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
  for (std::size_t block = 0; block < m.size(); block += 64) {
    std::uint32_t w[64];
    for (int t = 0; t < 16; ++t) {
      const std::uint8_t* b = &m[block + 4 * t];
      w[t] = (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) | (std::uint32_t(b[2]) << 8) | b[3];
    }
    for (int t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t]                   = w[t - 16] + s0 + w[t - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; ++t) {
      const std::uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[t] + w[t];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  std::array<std::uint8_t, 32> out{};
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(h[i] >> (24 - 8 * j));
  return out;
}

std::string encode_items(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += std::to_string(item.size()) + ':' + item;
  return s;
}

std::string join_items(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : "; ") + item;
  return s;
}

void check_same_on_all_ranks(const comm::Communicator& comm, const std::string& optimizer,
                             const std::vector<std::string>& items, const std::string& shown) {
  // The items with their lengths: a name may hold "; ".
  if (!comm.same_on_all_ranks(encode_items(items))) {
    // Only on this failure path: the lowest rank that differs from rank 0, and its first item that
    // does, the same on every rank.
    const auto first = first_difference_from_rank0(
        comm, items, [](std::size_t, const std::string* mine, const std::string* zero, std::size_t, std::size_t) {
          return "'" + (mine ? *mine : std::string()) + "' where rank 0 has '" + (zero ? *zero : std::string()) + "'";
        });
    throw ConfigError("koptim::" + optimizer +
                      ": the ranks of the communicator disagree on the parameters (names, shapes, scalar types, "
                      "layouts, groups) or on the configuration; every rank must build the same optimizer. Rank " +
                      std::to_string(first.first) + " has " + first.second + ". Rank " + std::to_string(comm.rank()) +
                      " (this one) has: " + (shown.empty() ? join_items(items) : shown));
  }
}

}  // namespace Impl
}  // namespace koptim
