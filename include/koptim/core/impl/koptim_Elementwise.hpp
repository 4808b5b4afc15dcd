// Element-wise kernels that vectorize on CPU backends. A kernel body reads its scalars and the
// Views' pointers from its closure; when a backend runs the loop on a closure it reaches through
// a pointer (Kokkos 4's OpenMP backend does), every store to a float array may, as far as the
// compiler knows, change those float scalars, so it reloads them each element and does not
// vectorize (measured: AdamW 3.5x slower than a plain loop on Kokkos 4.6 OpenMP). for_each_element
// runs the body over chunks of host_chunk elements, each on a local copy of the closure whose
// members the compiler keeps in registers; on GPU backends a chunk is one element, as a plain
// parallel_for.
#ifndef KOPTIM_CORE_IMPL_ELEMENTWISE_HPP
#define KOPTIM_CORE_IMPL_ELEMENTWISE_HPP

#include <koptim/core/koptim_Kokkos.hpp>
#include <koptim/core/impl/koptim_Instance.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace koptim {
namespace Impl {

constexpr std::int64_t host_chunk = std::is_same<ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value ? 8192 : 1;

template <class F>
struct ChunkedBody {
  F body;
  std::int64_t n;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t chunk) const {
    const F local            = body;
    const std::int64_t begin = chunk * host_chunk;
    const std::int64_t end   = begin + host_chunk < n ? begin + host_chunk : n;
    for (std::int64_t i = begin; i < end; ++i) local(i);
  }
};

// body(i) for every i in [0, n), one kernel on exec.
template <class F>
void for_each_element(const ExecutionSpace& exec, const char* label, std::int64_t n, const F& body) {
  Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecutionSpace>(exec, 0, (n + host_chunk - 1) / host_chunk),
                       ChunkedBody<F>{body, n});
}

// Tables of chunks: one entry per array (a parameter's piece, a Shampoo block), its elements cut
// into chunks, first_chunk counting the chunks of the entries before it. One kernel then covers
// every entry of a table: a chunk per CPU iteration, or per GPU team.

// The entry in [first, last) of table t whose chunks hold chunk c: the last one whose first_chunk
// is <= c (entries without chunks are never chosen).
template <class Table>
KOKKOS_INLINE_FUNCTION const typename Table::value_type& chunk_entry(const Table& t, std::int64_t first,
                                                                     std::int64_t last, std::int64_t c) {
  std::int64_t lo = first, hi = last - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (t(mid).first_chunk <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return t(lo);
}

// A piece of one parameter for the diagonal optimizers' kernels: its elements of W and G and of
// up to three state buffers (null where the optimizer keeps fewer).
template <class T>
struct PieceArrays {
  T* w              = nullptr;
  const T* g        = nullptr;
  T* s[3]           = {nullptr, nullptr, nullptr};
  std::int64_t size = 0, first_chunk = 0;
};

template <class T>
using PieceTable = Kokkos::View<PieceArrays<T>*, MemorySpace>;

// Elements per chunk of a piece table.
constexpr std::int64_t piece_chunk = host_chunk > 1 ? host_chunk : 2048;

// One kernel on exec over chunks [chunk_begin, chunk_end) of the entries [first, last) of a chunk table
// (`chunk` elements per chunk; an entry has first_chunk and size). CPUs: an iteration per chunk,
// body.run(entry, begin, end) on local copies of the entry and the body (their members stay in
// registers, as in ChunkedBody: the loop vectorizes); GPUs: a team per chunk,
// body.team(team, entry, begin, end), consecutive threads on consecutive elements.
template <class Table, class Body>
struct TableChunks {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Table table;
  Body body;
  std::int64_t first, last, chunk_begin, chunk;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const typename Table::value_type e = chunk_entry(table, first, last, c);
    const Body local                   = body;
    const std::int64_t begin           = (c - e.first_chunk) * chunk;
    local.run(e, begin, begin + chunk < e.size ? begin + chunk : e.size);
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t c                = chunk_begin + team.league_rank();
    const typename Table::value_type& e = chunk_entry(table, first, last, c);
    const std::int64_t begin            = (c - e.first_chunk) * chunk;
    body.team(team, e, begin, begin + chunk < e.size ? begin + chunk : e.size);
  }
};

template <class Table, class Body>
void for_each_table_chunk(const ExecutionSpace& exec, const char* label, const Table& table, std::int64_t first,
                          std::int64_t last, std::int64_t chunk_begin, std::int64_t chunk_end, std::int64_t chunk,
                          const Body& body) {
  if (chunk_end <= chunk_begin) return;
  const TableChunks<Table, Body> f{table, body, first, last, chunk_begin, chunk};
  if (host_chunk > 1)
    Kokkos::parallel_for(label, Kokkos::RangePolicy<ExecutionSpace>(exec, chunk_begin, chunk_end), f);
  else
    Kokkos::parallel_for(
        label, Kokkos::TeamPolicy<ExecutionSpace>(exec, static_cast<int>(chunk_end - chunk_begin), Kokkos::AUTO), f);
}

// A body(entry, i) per element as a TableChunks body.
template <class F>
struct ElementBody {
  F f;
  template <class E>
  KOKKOS_INLINE_FUNCTION void run(const E& e, std::int64_t begin, std::int64_t end) const {
    for (std::int64_t i = begin; i < end; ++i) f(e, i);
  }
  template <class Member, class E>
  KOKKOS_INLINE_FUNCTION void team(const Member& team, const E& e, std::int64_t begin, std::int64_t end) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end), [&](const std::int64_t i) { f(e, i); });
  }
};

// A piece table of the given entries (their first_chunk set here) and its number of chunks.
template <class T>
std::pair<PieceTable<T>, std::int64_t> make_piece_table(const std::string& label, std::vector<PieceArrays<T>> entries) {
  std::int64_t chunks = 0;
  for (auto& e : entries) {
    e.first_chunk = chunks;
    chunks += (e.size + piece_chunk - 1) / piece_chunk;
  }
  return {device_table(label, entries), chunks};
}

// body(p, i) for every element i of every piece p of the table (chunks of piece_chunk elements
// in all), as one kernel on exec: the diagonal optimizers' multi-tensor update.
template <class T, class F>
void for_each_piece_element(const ExecutionSpace& exec, const char* label, const PieceTable<T>& table,
                            std::int64_t chunks, const F& body) {
  for_each_table_chunk(exec, label, table, 0, static_cast<std::int64_t>(table.extent(0)), 0, chunks, piece_chunk,
                       ElementBody<F>{body});
}

}  // namespace Impl
}  // namespace koptim

#endif
