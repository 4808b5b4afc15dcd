// Data-parallel gradient averaging: after every rank has computed its gradients,
// all_reduce_mean() replaces each gradient with its mean over the ranks.
//
// Models have hundreds of small tensors (biases, norms) whose separate all-reduces would each
// pay the network's latency, so the gradients are packed, in registration order and per scalar
// type, into buckets of at most bucket_bytes, with one all_reduce_sum per bucket. A bucket that
// would hold a single gradient (a gradient of bucket_bytes or more always does) is reduced in
// place in the user's View: no copy, and a large parameter is one message of its own, never split.
//
//   koptim::comm::GradientAllReducer reducer(comm, params);   // once, collective
//   ... backward pass fills the gradient Views ...
//   reducer.all_reduce_mean();                                  // every step, collective
//   opt.step();
#ifndef KOPTIM_COMM_GRADIENTALLREDUCE_HPP
#define KOPTIM_COMM_GRADIENTALLREDUCE_HPP

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/core/koptim_ParameterSet.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace koptim {
namespace comm {

class GradientAllReducer {
 public:
  // Plans the buckets. Collective: every rank must register the same parameters (names, scalar
  // types, sizes, order) and pass the same bucket_bytes, or every rank throws ShapeError
  // (ConfigError for bucket_bytes = 0). Parameters that share one gradient View have it reduced
  // once; gradients that overlap in part throw ShapeError on every rank (the mean is taken in
  // place). The reducer keeps the gradients' allocations alive, as the ParameterSet does;
  // registering more parameters later needs a new reducer.
  GradientAllReducer(std::shared_ptr<Communicator> comm, const ParameterSet& params,
                     std::size_t bucket_bytes = 25 << 20);

  // Sums every gradient over the ranks and divides it by size(), in the users' gradient Views,
  // on the instance exec: after the work queued on exec (the backward pass), before the work queued
  // on it next (opt.step(exec)); fence exec before reading the gradients on the host.
  void all_reduce_mean(const ExecutionSpace& exec = ExecutionSpace());

  // Buckets, counting a gradient reduced alone in place as a bucket of its own.
  std::size_t num_buckets() const { return buckets_.size(); }
  // all_reduce_sum calls per all_reduce_mean (one per bucket: large gradients are not split).
  std::size_t num_messages_per_call() const { return buckets_.size(); }
  // Number of gradients in bucket b, in registration order, and the bucket's bytes.
  std::size_t bucket_size(std::size_t b) const { return buckets_.at(b).members.size(); }
  std::size_t bucket_bytes(std::size_t b) const;

  struct Bucket {
    ScalarType dtype = ScalarType::float32;
    std::vector<std::size_t> members;  // parameter indices
    std::int64_t elements = 0;
    // For packed buckets (more than one member): the gradients' addresses and their offsets in
    // the buffer (members + 1 entries), on the device, and the buffer.
    Kokkos::View<std::uintptr_t*, MemorySpace> pointers;
    Kokkos::View<std::int64_t*, MemorySpace> offsets;
    Kokkos::View<float*, MemorySpace> buffer32;
    Kokkos::View<double*, MemorySpace> buffer64;
  };
  // Public only because CUDA does not allow device lambdas in private member functions.
  template <class T>
  void reduce_bucket(const ExecutionSpace& exec, const Bucket& b);

 private:
  std::shared_ptr<Communicator> comm_;
  std::vector<TensorRef> grads_;
  std::vector<Bucket> buckets_;
};

}  // namespace comm
}  // namespace koptim

#endif
