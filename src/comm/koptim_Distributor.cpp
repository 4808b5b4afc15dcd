#include "koptim_Distributor.hpp"

#include <koptim/comm/koptim_BF16.hpp>
#include <koptim/core/koptim_Error.hpp>

#include <algorithm>
#include <tuple>
#include <numeric>

namespace koptim {
namespace Impl {

std::vector<int> assign_blocks(const std::vector<double>& costs, int num_ranks) {
  if (num_ranks < 1)
    throw ConfigError("koptim::Impl::assign_blocks: num_ranks = " + std::to_string(num_ranks) + " < 1");
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(num_ranks, 0.0);
  std::vector<int> owner(costs.size(), 0);
  for (std::size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());  // first minimum
    owner[i]    = r;
    load[r] += costs[i];
  }
  return owner;
}

Refusal agree_on_refusal(const comm::Communicator& comm, const Refusal& mine) {
  // "<kind><parameter>\0<message>", or "" for none.
  const auto first = comm.first_error(
      mine.kind == 0 ? std::string() : std::string(1, mine.kind) + mine.parameter + '\0' + mine.message);
  Refusal r;
  if (first.first < 0) return r;
  const std::size_t cut = first.second.find('\0');
  r.kind                = first.second[0];
  r.parameter           = first.second.substr(1, cut - 1);
  r.message             = first.second.substr(cut + 1);
  r.rank                = first.first;
  return r;
}

template <class T>
Distributor<T>::Distributor(const std::string& label, const std::vector<std::int64_t>& sizes,
                            const std::vector<int>& owners, int rank, int num_ranks, Wire wire)
    : sizes_(sizes), positions_(sizes.size(), 0), owners_(owners), rank_(rank), num_ranks_(num_ranks), wire_(wire) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks || owners.size() != sizes.size()) {
    throw Error("koptim::Impl::Distributor '" + label + "': rank " + std::to_string(rank) + " of " +
                std::to_string(num_ranks) + ", " + std::to_string(sizes.size()) + " sizes and " +
                std::to_string(owners.size()) + " owners (internal error)");
  }
  counts_.assign(static_cast<std::size_t>(num_ranks), 0);
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    if (owners[p] < 0 || owners[p] >= num_ranks || sizes[p] < 0)
      throw Error("koptim::Impl::Distributor '" + label + "': piece " + std::to_string(p) + " (internal error)");
    positions_[p] = static_cast<std::int64_t>(counts_[static_cast<std::size_t>(owners[p])]);
    counts_[static_cast<std::size_t>(owners[p])] += static_cast<std::size_t>(sizes[p]);
  }
  // Rank r's block follows those of ranks 0 .. r-1, with no padding.
  starts_.assign(static_cast<std::size_t>(num_ranks), 0);
  for (std::size_t r = 1; r < starts_.size(); ++r) starts_[r] = starts_[r - 1] + counts_[r - 1];
  for (std::size_t p = 0; p < sizes.size(); ++p)
    positions_[p] += static_cast<std::int64_t>(starts_[static_cast<std::size_t>(owners[p])]);
  const std::size_t total = starts_.back() + counts_.back();
  gathered_               = Buffer(label + " (gathered)", total);
  if (wire == Wire::bfloat16) {
    wire_buffer_ = Kokkos::View<std::uint16_t*, MemorySpace>(label + " (gathered, bfloat16)", total);
  }
}

template <class T>
void Distributor<T>::exchange(const ExecutionSpace& exec, const comm::Communicator* comm) const {
  if (gathered_.extent(0) == 0) return;
  const bool many      = comm != nullptr && num_ranks_ > 1;
  const std::size_t me = static_cast<std::size_t>(rank_);
  const auto mine      = std::make_pair(starts_[me], starts_[me] + counts_[me]);
  if (wire_ == Wire::native) {
    if (many)
      comm->all_gather(exec, Kokkos::View<const T*, MemorySpace>(Kokkos::subview(gathered_, mine)), gathered_, counts_);
    return;
  }
  const auto values        = gathered_;
  const auto half          = wire_buffer_;
  const std::int64_t first = static_cast<std::int64_t>(mine.first);
  Kokkos::parallel_for(
      "koptim::Distributor::to_bf16",
      Kokkos::RangePolicy<ExecutionSpace>(exec, 0, static_cast<std::int64_t>(counts_[me])),
      KOKKOS_LAMBDA(const std::int64_t i) { half(first + i) = comm::to_bf16(values(first + i)); });
  if (many)
    comm->all_gather(exec, Kokkos::View<const std::uint16_t*, MemorySpace>(Kokkos::subview(half, mine)), half, counts_);
  Kokkos::parallel_for(
      "koptim::Distributor::from_bf16", Kokkos::RangePolicy<ExecutionSpace>(exec, 0, half.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { values(i) = static_cast<T>(comm::from_bf16(half(i))); });
}

namespace {
std::vector<std::int64_t> sizes_of(const std::vector<ParameterPart>& parts) {
  std::vector<std::int64_t> out;
  for (const auto& p : parts) out.push_back(p.size);
  return out;
}
std::vector<int> owners_of(const std::vector<ParameterPart>& parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.push_back(p.owner);
  return out;
}
}  // namespace

template <class T>
ParameterSharing<T>::ParameterSharing(const std::string& label, std::vector<Part> parts, int rank, int num_ranks)
    : parts_(std::move(parts)), plan_(label, sizes_of(parts_), owners_of(parts_), rank, num_ranks) {}

namespace {
template <class T>
struct CopyPiece {
  KOKKOS_INLINE_FUNCTION void operator()(const PieceArrays<T>& p, std::int64_t i) const { p.w[i] = p.g[i]; }
};
}  // namespace

template <class T>
void ParameterSharing<T>::prepare(const ParameterSet& ps) const {
  if (copies_) return;
  std::vector<PieceArrays<T>> pack, unpack;
  for (std::size_t k = 0; k < parts_.size(); ++k) {
    const auto& p = parts_[k];
    if (p.size == 0) continue;
    T* const part = static_cast<T*>(ps[p.param].param.data) + p.offset;
    T* const slot = plan_.piece(k).data();
    PieceArrays<T> e;
    e.size = p.size;
    if (plan_.mine(k)) {
      e.w = slot, e.g = part;
      pack.push_back(e);
    } else {
      e.w = part, e.g = slot;
      unpack.push_back(e);
    }
  }
  auto c                                = std::make_shared<Copies>();
  std::tie(c->pack, c->pack_chunks)     = make_piece_table("koptim::ParameterSharing::pack", std::move(pack));
  std::tie(c->unpack, c->unpack_chunks) = make_piece_table("koptim::ParameterSharing::unpack", std::move(unpack));
  copies_                               = c;
}

template <class T>
void ParameterSharing<T>::share(const ExecutionSpace& exec, const ParameterSet& ps,
                                const comm::Communicator* comm) const {
  if (comm == nullptr) return;
  prepare(ps);
  for_each_piece_element(exec, "koptim::Distributor::pack", copies_->pack, copies_->pack_chunks, CopyPiece<T>{});
  plan_.exchange(exec, comm);
  for_each_piece_element(exec, "koptim::Distributor::unpack", copies_->unpack, copies_->unpack_chunks, CopyPiece<T>{});
}

template class Distributor<float>;
template class Distributor<double>;
template class ParameterSharing<float>;
template class ParameterSharing<double>;

}  // namespace Impl
}  // namespace koptim
