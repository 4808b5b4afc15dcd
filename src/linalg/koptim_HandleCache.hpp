// A CUDA library's handles, one per stream (koptim_CudaLibraries.cpp keeps one for cuBLAS and one
// for cuSOLVER). cuBLAS picks its internal workspace by handle: streams that shared a handle and
// ran at once would share that workspace, and their results could depend on how they interleave
// (cuBLAS's notes on reproducibility ask for a handle or a workspace per stream), where a step on
// an instance of its own must give, bitwise, what it gives on the default instance. The
// max_handles streams used last keep theirs; a further stream's handle takes the place of the one
// used least recently, which is destroyed after `quiesce` (a device synchronization: work of its
// stream may still run), so a program that steps on more streams than that pays a
// synchronization per change (of the current device: a process whose streams are on several
// devices is not covered). All are destroyed at Kokkos::finalize. A template over the stream and
// handle types so that the unit tests check it without CUDA.
#ifndef KOPTIM_LINALG_HANDLECACHE_HPP
#define KOPTIM_LINALG_HANDLECACHE_HPP

#include <koptim/core/koptim_Error.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace koptim {
namespace linalg {
namespace Impl {

template <class Stream, class Handle, class Status>
class HandleCache {
 public:
  static constexpr std::size_t max_handles = 8;

  // create(&h) makes a handle and returns ok on success; destroy(h) ends one; quiesce() waits
  // until every stream's work is done.
  HandleCache(Status (*create)(Handle*), Status (*destroy)(Handle), Status ok, const char* what, void (*quiesce)())
      : create_(create), destroy_(destroy), ok_(ok), what_(what), quiesce_(quiesce) {}
  HandleCache(const HandleCache&)            = delete;
  HandleCache& operator=(const HandleCache&) = delete;

  // Held by the caller around get() and every use of the handle it returns.
  std::mutex mutex;

  // Under mutex: the stream's handle, created at the stream's first call. Throws koptim::Error
  // (nothing kept changes) when the library cannot make one.
  Handle get(Stream stream) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->first == stream) {
        const auto used = *it;
        kept_.erase(it);
        kept_.push_back(used);
        return used.second;
      }
    }
    Handle h            = Handle();
    const Status status = create_(&h);
    if (status != ok_)
      throw Error(std::string("koptim::linalg: ") + what_ + " failed (status " +
                  std::to_string(static_cast<long long>(status)) + ")");
    if (kept_.size() == max_handles) {
      quiesce_();
      destroy_(kept_.front().second);
      kept_.erase(kept_.begin());
    }
    kept_.emplace_back(stream, h);
    if (!finalize_hook_) {
      finalize_hook_ = true;
      Kokkos::push_finalize_hook([this] {
        std::lock_guard<std::mutex> lock(mutex);
        for (const auto& k : kept_) destroy_(k.second);
        kept_.clear();
        finalize_hook_ = false;  // a Kokkos initialized again (3.x allows it) pushes it again
      });
    }
    return h;
  }

  // Under mutex: how many handles are kept.
  std::size_t size() const { return kept_.size(); }

 private:
  Status (*create_)(Handle*);
  Status (*destroy_)(Handle);
  Status ok_;
  const char* what_;
  void (*quiesce_)();
  std::vector<std::pair<Stream, Handle>> kept_;  // the one used last at the back
  bool finalize_hook_ = false;
};

}  // namespace Impl
}  // namespace linalg
}  // namespace koptim

#endif
