// The execution-space instance a step runs on. Optimizer::step(exec) passes its instance to every
// kernel, copy and fence of the step (the kokkos-kernels idiom: an instance argument whose
// default is the default instance), so that a caller can run the step on a stream of its own and
// nothing in the step waits on work the caller queued elsewhere, or makes that work wait.
#ifndef KOPTIM_CORE_IMPL_INSTANCE_HPP
#define KOPTIM_CORE_IMPL_INSTANCE_HPP

#include <koptim/core/koptim_Tensor.hpp>

#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace koptim {
namespace Impl {

// The instance for a step's host loops (the host-memory paths: host BLAS, LAPACK, Shampoo's host
// batch): exec itself when it is an instance of the host execution space; otherwise the default
// host instance (a GPU build runs its steps on device memory and never takes those paths).
template <class ExecSpace>
Kokkos::DefaultHostExecutionSpace host_instance([[maybe_unused]] const ExecSpace& exec) {
  if constexpr (std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value)
    return exec;
  else
    return Kokkos::DefaultHostExecutionSpace();
}

// exec.fence(), named where Kokkos takes a name (3.5 and later), so that Kokkos Tools (and the
// steady-state test's count) can tell which wait it is.
template <class Space>
void fence(const Space& exec, const std::string& name) {
#if KOKKOS_VERSION >= 30500
  exec.fence(name);
#else
  (void)name;
  exec.fence();
#endif
}

// Kokkos::fence() (every instance), named where Kokkos takes a name.
inline void fence_all(const std::string& name) {
#if KOKKOS_VERSION >= 30500
  Kokkos::fence(name);
#else
  (void)name;
  Kokkos::fence();
#endif
}

// f(i) for every i in [0, m) of a batch of host work (host BLAS or LAPACK calls of unequal cost,
// each item with its own workspace): concurrently on the threads of the host instance `host`,
// dynamic schedule, then a fence of it before anything reads the results (named
// "koptim::linalg::host BLAS: after <label>", as the host path's other waits, which device
// memory does not need); a single item runs on the calling thread, left to a threaded BLAS, and
// needs no fence. An exception cannot leave a threaded backend's parallel region (OpenMP would
// terminate the process): the first one an item throws (a failed workspace allocation) is kept,
// the items not yet started are skipped, and it is rethrown here after the fence.
template <class Index, class F>
void host_batch(const Kokkos::DefaultHostExecutionSpace& host, const char* label, Index m, const F& f) {
  if (m > 1) {
    std::exception_ptr first;
    std::atomic<bool> failed{false};
    std::mutex lock;
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>(host, 0, m),
        [&](const Index i) {
          if (failed.load(std::memory_order_relaxed)) return;
          try {
            f(i);
          } catch (...) {
            const std::lock_guard<std::mutex> hold(lock);
            if (!first) first = std::current_exception();
            failed.store(true, std::memory_order_relaxed);
          }
        });
    fence(host, std::string("koptim::linalg::host BLAS: after ") + label);
    if (first) std::rethrow_exception(first);
  } else if (m == 1) {
    f(Index(0));
  }
}

// A new View in MemorySpace holding a host vector's elements: the tables that kernels read, built
// at set-up (an allocation and a copy that fences, as Kokkos's deep_copy without an instance does).
template <class E>
Kokkos::View<E*, MemorySpace> device_table(const std::string& label, const std::vector<E>& h) {
  Kokkos::View<E*, MemorySpace> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), h.size());
  Kokkos::deep_copy(
      d, Kokkos::View<const E*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(h.data(), h.size()));
  return d;
}

}  // namespace Impl
}  // namespace koptim

#endif
