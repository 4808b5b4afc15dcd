#include <koptim/comm/koptim_GradientAllReduce.hpp>
#include <koptim/core/impl/koptim_Profiling.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace koptim {
namespace comm {

GradientAllReducer::GradientAllReducer(std::shared_ptr<Communicator> comm, const ParameterSet& params,
                                       std::size_t bucket_bytes)
    : comm_(std::move(comm)) {
  Impl::ScopedRegion region("koptim::comm::GradientAllReducer::GradientAllReducer");
  if (!comm_) throw ConfigError("koptim::comm::GradientAllReducer: the communicator is null");
  // Gradients may share memory (a ParameterSet allows it: it only reads them), but the mean is
  // taken in place: a gradient that is another's whole View is reduced once, with it (reduced
  // again, it was averaged twice, and in one bucket two teams stored to the same addresses); one
  // that overlaps another only in part cannot be either, and is refused.
  const auto& ps = params.parameters();
  std::vector<long> same_as(ps.size(), -1);
  long partial[2] = {-1, -1};
  for (std::size_t i = 0; i < ps.size() && partial[0] < 0; ++i) {
    const TensorRef& g = ps[i].grad;
    if (g.size == 0) continue;
    const auto lo = reinterpret_cast<std::uintptr_t>(g.data), hi = lo + g.bytes();
    for (std::size_t j = 0; j < i; ++j) {
      const TensorRef& h = ps[j].grad;
      if (h.size == 0 || same_as[j] >= 0) continue;
      const auto hlo = reinterpret_cast<std::uintptr_t>(h.data), hhi = hlo + h.bytes();
      if (hi <= hlo || hhi <= lo) continue;
      if (lo == hlo && hi == hhi && g.dtype == h.dtype) {
        same_as[i] = static_cast<long>(j);
      } else {
        partial[0] = static_cast<long>(j), partial[1] = static_cast<long>(i);
      }
      break;
    }
  }
  // Ranks that planned different buckets would pair messages of different lengths: compare the
  // whole plan's inputs once, here, instead of on every step (which gradients share memory too).
  std::vector<std::string> lines{"bucket_bytes " + std::to_string(bucket_bytes)};
  for (std::size_t i = 0; i < ps.size(); ++i)
    lines.push_back("parameter '" + ps[i].name + "' " + to_string(ps[i].grad.dtype) + " " +
                    std::to_string(ps[i].grad.size) +
                    (same_as[i] >= 0 ? " (the gradient of '" + ps[static_cast<std::size_t>(same_as[i])].name + "')"
                                     : std::string()));
  if (partial[0] >= 0)
    lines.push_back("gradients of '" + ps[static_cast<std::size_t>(partial[0])].name + "' and '" +
                    ps[static_cast<std::size_t>(partial[1])].name + "' overlap in part");
  std::string signature;  // length-prefixed, so that no name can run into the next
  for (const auto& l : lines) signature += std::to_string(l.size()) + ':' + l;
  if (!comm_->same_on_all_ranks(signature)) {
    // Only on this failure path: where this rank's entries differ from rank 0's.
    const auto first = Impl::first_difference_from_rank0(
        *comm_, lines, [](std::size_t k, const std::string* mine, const std::string* zero, std::size_t, std::size_t) {
          // lines[0] is bucket_bytes; lines[k] for k >= 1 the parameter registered k-th (counted from 0: k - 1).
          auto is_parameter = [](const std::string* l) { return l && l->rfind("parameter '", 0) == 0; };
          const std::string at =
              is_parameter(mine) || is_parameter(zero) ? "at position " + std::to_string(k - 1) + " (from 0): " : "";
          return at + (mine ? *mine : "nothing") + " where rank 0 has " + (zero ? *zero : "nothing");
        });
    throw ShapeError(
        "koptim::comm::GradientAllReducer: the ranks registered different parameters (names, scalar types, sizes or "
        "order) or passed different bucket_bytes (rank " +
        std::to_string(first.first) + ": " + first.second +
        "); every rank must register the same parameters in the same order");
  }
  if (bucket_bytes == 0) {
    throw ConfigError("koptim::comm::GradientAllReducer: bucket_bytes = 0 is not allowed; allowed: at least 1");
  }
  if (partial[0] >= 0) {
    throw ShapeError("koptim::comm::GradientAllReducer: the gradients of parameters '" +
                     ps[static_cast<std::size_t>(partial[0])].name + "' and '" +
                     ps[static_cast<std::size_t>(partial[1])].name +
                     "' overlap in part; the mean is taken in place, once per gradient: give each parameter its own "
                     "gradient memory, or the same whole View");
  }

  for (const auto& p : ps) grads_.push_back(p.grad);
  // One open bucket per scalar type; a gradient that does not fit closes it and opens the next.
  long open[2]              = {-1, -1};
  std::size_t open_bytes[2] = {0, 0};
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    const TensorRef& g = grads_[i];
    if (g.size == 0 || same_as[i] >= 0) continue;  // reduced with the gradient it shares
    const int t = g.dtype == ScalarType::float32 ? 0 : 1;
    if (open[t] < 0 || open_bytes[t] + g.bytes() > bucket_bytes) {
      open[t]       = static_cast<long>(buckets_.size());
      open_bytes[t] = 0;
      buckets_.emplace_back();
      buckets_.back().dtype = g.dtype;
    }
    Bucket& b = buckets_[static_cast<std::size_t>(open[t])];
    b.members.push_back(i);
    b.elements += g.size;
    open_bytes[t] += g.bytes();
  }

  for (auto& b : buckets_) {
    if (b.members.size() < 2) continue;  // reduced in place, no buffer
    const std::size_t m = b.members.size();
    b.pointers          = Kokkos::View<std::uintptr_t*, MemorySpace>("koptim::GradientAllReducer::pointers", m);
    b.offsets           = Kokkos::View<std::int64_t*, MemorySpace>("koptim::GradientAllReducer::offsets", m + 1);
    auto hp             = Kokkos::create_mirror_view(b.pointers);
    auto ho             = Kokkos::create_mirror_view(b.offsets);
    ho(0)               = 0;
    for (std::size_t j = 0; j < m; ++j) {
      hp(j)     = reinterpret_cast<std::uintptr_t>(grads_[b.members[j]].data);
      ho(j + 1) = ho(j) + grads_[b.members[j]].size;
    }
    Kokkos::deep_copy(b.pointers, hp);
    Kokkos::deep_copy(b.offsets, ho);
    if (b.dtype == ScalarType::float32) {
      b.buffer32 = Kokkos::View<float*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::GradientAllReducer::bucket"), b.elements);
    } else {
      b.buffer64 = Kokkos::View<double*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "koptim::GradientAllReducer::bucket"), b.elements);
    }
  }
}

std::size_t GradientAllReducer::bucket_bytes(std::size_t b) const {
  const Bucket& bucket = buckets_.at(b);
  return static_cast<std::size_t>(bucket.elements) * size_of(bucket.dtype);
}

void GradientAllReducer::all_reduce_mean(const ExecutionSpace& exec) {
  Impl::ScopedRegion region("koptim::comm::GradientAllReducer::all_reduce_mean");
  // The mean over one rank is the gradient itself.
  if (comm_->size() == 1) return;
  for (const auto& b : buckets_) {
    if (b.dtype == ScalarType::float32)
      reduce_bucket<float>(exec, b);
    else
      reduce_bucket<double>(exec, b);
  }
}

namespace {
template <class T>
Kokkos::View<T*, MemorySpace> buffer_of(const Kokkos::View<float*, MemorySpace>& b32,
                                        const Kokkos::View<double*, MemorySpace>& b64);
template <>
Kokkos::View<float*, MemorySpace> buffer_of<float>(const Kokkos::View<float*, MemorySpace>& b32,
                                                   const Kokkos::View<double*, MemorySpace>&) {
  return b32;
}
template <>
Kokkos::View<double*, MemorySpace> buffer_of<double>(const Kokkos::View<float*, MemorySpace>&,
                                                     const Kokkos::View<double*, MemorySpace>& b64) {
  return b64;
}
}  // namespace

template <class T>
void GradientAllReducer::reduce_bucket(const ExecutionSpace& exec, const Bucket& b) {
  using team_policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using member_type = team_policy::member_type;
  // Division, not multiplication by 1/size: the mean is then the correctly rounded sum / size.
  const T n = static_cast<T>(comm_->size());
  if (b.members.size() == 1) {
    const Kokkos::View<T*, MemorySpace> g = grads_[b.members[0]].flat<T>();
    comm_->all_reduce_sum(exec, g);
    Kokkos::parallel_for(
        "koptim::GradientAllReducer::scale", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, g.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) { g(i) /= n; });
    return;
  }
  // One team per gradient: the copies stay contiguous, and one launch packs the whole bucket.
  const auto buffer  = buffer_of<T>(b.buffer32, b.buffer64);
  const auto ptrs    = b.pointers;
  const auto offsets = b.offsets;
  const int m        = static_cast<int>(b.members.size());
  Kokkos::parallel_for(
      "koptim::GradientAllReducer::pack", team_policy(exec, m, Kokkos::AUTO), KOKKOS_LAMBDA(const member_type& team) {
        const int j       = team.league_rank();
        const T* src      = reinterpret_cast<const T*>(ptrs(j));
        const auto off    = offsets(j);
        const auto length = offsets(j + 1) - off;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, length),
                             [&](const std::int64_t i) { buffer(off + i) = src[i]; });
      });
  comm_->all_reduce_sum(exec, buffer);
  Kokkos::parallel_for(
      "koptim::GradientAllReducer::unpack", team_policy(exec, m, Kokkos::AUTO), KOKKOS_LAMBDA(const member_type& team) {
        const int j       = team.league_rank();
        T* dst            = reinterpret_cast<T*>(ptrs(j));
        const auto off    = offsets(j);
        const auto length = offsets(j + 1) - off;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, length),
                             [&](const std::int64_t i) { dst[i] = buffer(off + i) / n; });
      });
}

}  // namespace comm
}  // namespace koptim
