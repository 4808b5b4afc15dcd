// No optimizer allocates memory in its steady-state steps: every buffer a step needs (state,
// workspace, the all-gather's send and receive buffers, the bf16 staging of Shampoo's update
// exchange, the amortized computation's workspace) is allocated once, when the optimizer is built
// or at its first steps. Counted through the Kokkos Tools memory events, at every rank count the
// test runs with (1 and 2 ranks), sharded or distributed where the optimizer can be. And no step
// waits on the device once per parameter or block: the number of fences in steady-state steps is
// the same for a model three times as wide (Kokkos Tools fence events, which Kokkos reports
// from 3.5 on; with an older Kokkos that test is skipped, saying so).
#include "koptim_TestData.hpp"
#include "koptim_TestMpi.hpp"
#include "koptim_TestTensor.hpp"

#include <koptim/koptim.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <type_traits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

using koptim_test::TestTensor;
using koptim_test::world;

struct Allocation {
  std::string label;
  std::uint64_t bytes;
};

std::vector<Allocation>& allocations() {
  static std::vector<Allocation> a;
  return a;
}

void on_allocate(Kokkos::Tools::SpaceHandle, const char* label, const void*, std::uint64_t bytes) {
  allocations().push_back({label, bytes});
}

// Counts the Kokkos allocations made while it lives.
class AllocationCounter {
 public:
  AllocationCounter() {
    allocations().clear();
    Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  }
  ~AllocationCounter() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
  AllocationCounter(const AllocationCounter&)            = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;

  static std::string report() {
    std::string s;
    for (const auto& a : allocations()) s += "  '" + a.label + "' (" + std::to_string(a.bytes) + " bytes)\n";
    return s;
  }
};

// Parameters of both scalar types: a float32 matrix larger than one Shampoo block, a 3-d
// float32 tensor, a float64 vector and an empty tensor; the same on every rank.
struct Model {
  TestTensor<float> a{{150, 70}, "a"}, c{{6, 5, 4}, "c"}, z{{0}, "z"};
  TestTensor<double> b{{333}, "b"};
  koptim::ParameterSet params;
  Model() {
    const int g = params.add_group("other", {0.003, 0.01});
    a.add_to(params, "a");
    b.add_to(params, "b", g);
    c.add_to(params, "c");
    z.add_to(params, "z");
    a.set(false, [](std::int64_t i) { return koptim_test::value(41, 0, 0, i); });
    b.set(false, [](std::int64_t i) { return koptim_test::value(41, 1, 0, i); });
    c.set(false, [](std::int64_t i) { return koptim_test::value(41, 2, 0, i); });
  }
  void gradients(int s) {
    a.set(true, [&](std::int64_t i) { return koptim_test::value(41, 0, s, i); });
    b.set(true, [&](std::int64_t i) { return koptim_test::value(41, 1, s, i); });
    c.set(true, [&](std::int64_t i) { return koptim_test::value(41, 2, s, i); });
  }
};

// Fences, counted while a FenceCounter lives; not those of the host BLAS path, which fences
// around each BLAS call on host memory (linalg::host_blas_fence) and has no device to wait on.
std::int64_t& fences() {
  static std::int64_t n = 0;
  return n;
}
// Their names, in order.
std::vector<std::string>& fence_names() {
  static std::vector<std::string> names;
  return names;
}
void on_fence(const char* name, std::uint32_t, std::uint64_t*) {
  if (std::string(name).rfind("koptim::linalg::host BLAS", 0) == 0) return;
  ++fences();
  fence_names().push_back(name);
}

class FenceCounter {
 public:
  FenceCounter() {
    fences() = 0;
    fence_names().clear();
    Kokkos::Tools::Experimental::set_begin_fence_callback(on_fence);
  }
  ~FenceCounter() { Kokkos::Tools::Experimental::set_begin_fence_callback(nullptr); }
  FenceCounter(const FenceCounter&)            = delete;
  FenceCounter& operator=(const FenceCounter&) = delete;
};

// Whether this Kokkos reports fences to Kokkos Tools (3.4 does not).
bool kokkos_reports_fences() {
  FenceCounter count;
  Kokkos::fence();
  return fences() > 0;
}

// The tensors of Model, `copies` times over.
struct WideModel {
  std::vector<std::unique_ptr<TestTensor<float>>> f;
  std::vector<std::unique_ptr<TestTensor<double>>> d;
  koptim::ParameterSet params;
  explicit WideModel(int copies) {
    const int g = params.add_group("other", {0.003, 0.01});
    for (int k = 0; k < copies; ++k) {
      const std::string s = std::to_string(k);
      f.push_back(std::make_unique<TestTensor<float>>(std::vector<std::int64_t>{150, 70}, "a"));
      f.back()->add_to(params, "a" + s);
      d.push_back(std::make_unique<TestTensor<double>>(std::vector<std::int64_t>{333}, "b"));
      d.back()->add_to(params, "b" + s, g);
      f.push_back(std::make_unique<TestTensor<float>>(std::vector<std::int64_t>{6, 5, 4}, "c"));
      f.back()->add_to(params, "c" + s);
      f.push_back(std::make_unique<TestTensor<float>>(std::vector<std::int64_t>{0}, "z"));
      f.back()->add_to(params, "z" + s);
    }
    gradients(0, false);
  }
  void gradients(int s, bool grad = true) {
    for (std::size_t k = 0; k < f.size(); ++k)
      f[k]->set(grad, [&](std::int64_t i) { return koptim_test::value(43, k, s, i); });
    for (std::size_t k = 0; k < d.size(); ++k)
      d[k]->set(grad, [&](std::int64_t i) { return koptim_test::value(44, k, s, i); });
  }
};

struct Case {
  std::string label;
  Teuchos::ParameterList list;
  bool distributed;  // built with the world communicator
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto base = [](const std::string& name) {
    Teuchos::ParameterList l;
    l.set("optimizer", name);
    l.set("lr", 0.01);
    return l;
  };
  for (const std::string name : {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Gefen"}) {
    for (const bool shard : {false, true}) {
      auto l = base(name);
      if (name == "SGD") l.set("momentum", 0.9);
      if (name == "RMSProp") l.set("centered", true);
      if (name == "Adam" || name == "AdamW") l.set("amsgrad", true);
      l.set("shard_state", shard);
      out.push_back({name + (shard ? " sharded" : ""), l, shard});
    }
  }
  // Gefen's other two kinds of block: p = 1 with a factored second moment (the tensor of 150 x 70),
  // and with one per element.
  for (const std::string moment : {"factored", "full"}) {
    auto l = base("Gefen");
    l.set("force_p1", true);
    l.set("p1_second_moment", moment);
    out.push_back({"Gefen, p = 1, " + moment, l, false});
  }
  for (const std::string dtype : {"float32", "bfloat16"}) {
    for (const bool corrected : {false, true}) {
      auto l = base("Shampoo");
      l.set("max_preconditioner_dim", 64);
      l.set("precondition_frequency", 3);
      l.set("start_preconditioning_step", 3);
      l.set("momentum", 0.5);
      l.set("communication_dtype", dtype);
      l.set("eigenvalue_corrected", corrected);
      out.push_back({"Shampoo, " + dtype + (corrected ? ", eigenvalue-corrected" : ""), l, true});
      // The other root computations: the batched Jacobi solver, the coupled Newton iteration;
      // and Adam grafting with a nonzero weight decay.
      l.set("eigensolver", std::string("jacobi"));
      out.push_back({"Shampoo, " + dtype + (corrected ? ", eigenvalue-corrected" : "") + ", Jacobi", l, true});
      if (corrected) {
        // SOAP's QR refresh, a QR step at every refresh after the first.
        l.set("eigensolver", std::string("automatic"));
        l.set("eigenbasis", std::string("qr"));
        l.set("qr_tolerance", 0.0);
        out.push_back({"Shampoo, " + dtype + ", eigenvalue-corrected, QR refresh", l, true});
        l.set("eigensolver", std::string("jacobi"));  // the Kokkos refresh (one team per matrix)
        out.push_back({"Shampoo, " + dtype + ", eigenvalue-corrected, QR refresh, Jacobi", l, true});
        continue;
      }
      l.set("eigensolver", std::string("automatic"));
      l.set("root_method", std::string("coupled_newton"));
      l.set("grafting", std::string("Adam"));
      l.set("weight_decay", 0.01);
      out.push_back({"Shampoo, " + dtype + ", coupled Newton, Adam grafting", l, true});
    }
  }
  return out;
}

// The form of Shampoo's step a case runs: the host batch (the default with host memory), the
// device path (Shampoo::batch_blocks_on_host(false): each element-wise phase a kernel over every
// block, the products in stages of host BLAS calls), or the device path with its products as
// batched GEMMs through koptim's portable kernel (Shampoo::portable_products(true)), which is
// what a GPU without cuBLAS runs (with cuBLAS: one cuBLAS call where the kernel is one launch).
enum class Path { host_batch, device, device_portable };

void set_path(koptim::Optimizer& opt, Path path) {
  if (path == Path::host_batch) return;
  auto& shampoo = dynamic_cast<koptim::Shampoo&>(opt);
  shampoo.batch_blocks_on_host(false);
  shampoo.portable_products(path == Path::device_portable);
}

// f(case, path, label) for every case, and Shampoo's cases also through its device path, with
// host BLAS and (unless portable is false) with the portable batched products (Path), each
// traced with its label.
template <class F>
void for_each_case_and_path(const F& f, bool portable = true) {
  for (auto& c : cases()) {
    for (const Path path : {Path::host_batch, Path::device, Path::device_portable}) {
      if (path != Path::host_batch && c.label.rfind("Shampoo", 0) != 0) continue;
      if (path == Path::device_portable && !portable) continue;
      const std::string label = c.label + (path == Path::device            ? ", device path"
                                           : path == Path::device_portable ? ", device path, portable products"
                                                                           : "");
      SCOPED_TRACE(label + " on " + std::to_string(world()->size()) + " ranks");
      f(c, path, label);
    }
  }
}

// The optimizer of case c on a WideModel of `copies` copies per rank (in the given form of
// Shampoo's step): four steps, then six steady-state steps (5-10: two amortized computations), each taken
// by count_step(opt, s), which returns what it counted; returns the sum. Two copies per rank at
// least, so that every size of Shampoo's factor banks holds several matrices on every rank (a
// batch of one skips the batch's parallel dispatch: one fence less, which is not growth).
template <class CountStep>
std::int64_t steady_steps(const Case& c, int copies, Path path, const CountStep& count_step) {
  WideModel m(copies * world()->size());
  auto opt = c.distributed ? koptim::create(m.params, c.list, world()) : koptim::create(m.params, c.list);
  set_path(*opt, path);
  int s = 1;
  for (; s <= 4; ++s) {
    m.gradients(s);
    opt->step();
  }
  // The gradients are filled outside count_step: only the steps are counted.
  std::int64_t n = 0;
  for (; s <= 10; ++s) {
    m.gradients(s);
    n += count_step(*opt, s);
  }
  return n;
}

TEST(SteadyState, NoStepAllocates) {
  for_each_case_and_path([&](const Case& c, Path path, const std::string&) {
    Model m;
    auto opt = c.distributed ? koptim::create(m.params, c.list, world()) : koptim::create(m.params, c.list);
    set_path(*opt, path);
    // Warm-up: the first step (Gefen's codebook), the start of preconditioning and one amortized
    // computation of Shampoo.
    int s = 1;
    for (; s <= 4; ++s) {
      m.gradients(s);
      opt->step();
    }
    const auto* shampoo             = dynamic_cast<const koptim::Shampoo*>(opt.get());
    const std::int64_t roots_before = shampoo ? shampoo->phase_times().amortized_computations : 0;
    // Two periods of the amortized computation (steps 5-10; roots at 6 and 9, first at 3). Only
    // the steps are counted: the test's own gradients go through host mirrors, which on a device
    // are allocations of the test, not of the step.
    std::vector<Allocation> seen;
    for (; s <= 10; ++s) {
      m.gradients(s);
      AllocationCounter count;
      opt->step();
      seen.insert(seen.end(), allocations().begin(), allocations().end());
    }
    allocations() = seen;
    if (shampoo) EXPECT_EQ(shampoo->phase_times().amortized_computations - roots_before, 2);
    EXPECT_TRUE(allocations().empty()) << allocations().size() << " allocations in 6 steady-state steps:\n"
                                       << AllocationCounter::report();
  });
}

// Fences per steady-state step do not grow with the number of parameters and blocks: every
// per-parameter or per-block result stays on the device (or, for Shampoo's checks of |G|^2, comes
// back in one copy for all blocks). The coupled Newton iteration waits once per iteration of its
// batch, as many as its slowest factor needs, which depends on the factors' values: it is held
// to within 10% (a wait per factor would triple the count).
TEST(SteadyState, FencesDoNotGrowWithTheModel) {
  if (!kokkos_reports_fences())
    GTEST_SKIP() << "Kokkos " << KOKKOS_VERSION << " reports no fences to Kokkos Tools (3.5 and later do)";
  for_each_case_and_path([&](const Case& c, Path path, const std::string& label) {
    std::int64_t counted[2] = {0, 0};
    for (int w = 0; w < 2; ++w)
      counted[w] = steady_steps(c, w == 0 ? 2 : 6, path, [](koptim::Optimizer& opt, int) {
        FenceCounter count;
        opt.step();
        return fences();
      });
    if (world()->rank() == 0)
      std::printf("[ fences ] %-55s %5.1f per step (2 copies), %5.1f (6 copies)\n", label.c_str(), counted[0] / 6.0,
                  counted[1] / 6.0);
    if (c.label.find("coupled Newton") != std::string::npos)
      EXPECT_LE(counted[1], counted[0] + counted[0] / 10);
    else
      EXPECT_EQ(counted[1], counted[0]);
  });
}

// Under nonfinite_gradient: unchecked, a steady-state step waits on nothing in one process: no
// fence at all, in any optimizer, and in Shampoo, in every form of its step (the device path as
// on a GPU), in every step without an amortized computation (whose outcome per matrix comes to
// the host); |G|^2 and the factors' traces stay on the device. Not counted, as above: the fences
// of the host batch's host threads and around host BLAS calls. (The checked steps wait for the
// check's count; a communicator of several ranks waits for MPI.)
TEST(SteadyState, UncheckedStepsWaitOnNothing) {
  if (!kokkos_reports_fences())
    GTEST_SKIP() << "Kokkos " << KOKKOS_VERSION << " reports no fences to Kokkos Tools (3.5 and later do)";
  int checked = 0;
  for_each_case_and_path([&](const Case& c, Path path, const std::string&) {
    if (c.distributed && world()->size() > 1) return;
    Case u = c;
    u.list.set("nonfinite_gradient", std::string("unchecked"));
    steady_steps(u, 2, path, [&](koptim::Optimizer& opt, int s) {
      const auto* sh           = dynamic_cast<const koptim::Shampoo*>(&opt);
      const std::int64_t roots = sh ? sh->phase_times().amortized_computations : 0;
      FenceCounter count;
      opt.step();
      if (!sh || sh->phase_times().amortized_computations == roots) {
        std::string names;
        for (const auto& n : fence_names()) names += "  '" + n + "'\n";
        EXPECT_EQ(fences(), 0) << "step " << s << " waited:\n" << names;
        ++checked;
      }
      return std::int64_t(0);
    });
  });
  EXPECT_GT(checked, 0);
}

// Kernel launches (parallel_for, parallel_reduce, parallel_scan), counted while a LaunchCounter
// lives, by label.
std::vector<std::string>& launches() {
  static std::vector<std::string> n;
  return n;
}
void on_launch(const char* name, std::uint32_t, std::uint64_t*) { launches().push_back(name); }

// f for the start of every parallel_for, parallel_reduce and parallel_scan (null: none).
void set_kernel_callbacks(Kokkos_Profiling_beginFunction f) {
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(f);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(f);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(f);
}

class LaunchCounter {
 public:
  LaunchCounter() {
    launches().clear();
    set_kernel_callbacks(on_launch);
  }
  ~LaunchCounter() { set_kernel_callbacks(nullptr); }
  LaunchCounter(const LaunchCounter&)            = delete;
  LaunchCounter& operator=(const LaunchCounter&) = delete;

  // Launches per label, the labels in the order first seen.
  static std::string report() {
    std::vector<std::pair<std::string, int>> by;
    for (const auto& l : launches()) {
      auto it = std::find_if(by.begin(), by.end(), [&](const auto& p) { return p.first == l; });
      if (it == by.end())
        by.push_back({l, 1});
      else
        ++it->second;
    }
    std::string s;
    for (const auto& p : by) s += "  " + std::to_string(p.second) + " x '" + p.first + "'\n";
    return s;
  }
};

// A steady-state step launches the same number of kernels for a model with three times as many
// parameters and blocks of each shape. The diagonal optimizers: one kernel per scalar type and
// parameter group for all their parameters (multi-tensor), plus the gradient check's one.
// Shampoo: each element-wise phase (gather, gradient norms, traces, grafting, filtering, eigenvalue
// correction, rescaling, update, write-back) is one kernel over every block (the gather and the
// update one per parameter group), in every form of the step (Path), and so are the products:
// a stage of host BLAS calls, or a batched GEMM per shape (the portable kernel, as on a GPU),
// for the factor updates, the preconditioning, the roots' reconstruction and the coupled Newton
// iteration's products (a step of products per iteration). Every launch counts. Gefen: per scalar
// type and parameter group, three kernels for the factors of its factored tensors and one over
// every block of every kind; on host backends the factored tensors go in waves of about 256 KiB of
// gradient per thread (cache reuse), four kernels a wave, so a wider model adds exactly 4 launches
// per added wave; on a GPU a group is one wave. The coupled Newton root iteration: a few kernels per iteration over all
// the factors of its batch, as many iterations as its slowest factor needs, which depends on the
// factors' values: held to within 10% (a kernel per factor would triple the count).
TEST(SteadyState, LaunchesDoNotGrowWithTheBlocks) {
  for_each_case_and_path([&](const Case& c, Path path, const std::string& label) {
    std::int64_t counted[2] = {0, 0};
    std::string reports[2];
    for (int w = 0; w < 2; ++w)
      counted[w] = steady_steps(c, w == 0 ? 2 : 6, path, [&](koptim::Optimizer& opt, int s) {
        LaunchCounter count;
        opt.step();
        if (s == 10) reports[w] = LaunchCounter::report();
        return static_cast<std::int64_t>(launches().size());
      });
    if (world()->rank() == 0)
      std::printf("[ launches ] %-55s %6.1f per step (2 copies), %6.1f (6 copies)\n", label.c_str(), counted[0] / 6.0,
                  counted[1] / 6.0);
    // Gefen's factored tensors (the 150 x 70 floats of each copy) go in waves of
    // gefen::host_wave_bytes per host thread on host backends: 4 launches (3 for the factors,
    // 1 for the update) per wave after the first, over 6 steps.
    std::int64_t extra = 0;
    if (c.label == "Gefen, p = 1, factored" &&
        std::is_same<koptim::ExecutionSpace, Kokkos::DefaultHostExecutionSpace>::value) {
      const std::int64_t bytes = 150 * 70 * sizeof(float);
      const std::int64_t per_wave =
          std::max<std::int64_t>(1, koptim::gefen::host_wave_bytes * koptim::ExecutionSpace().concurrency() / bytes);
      const auto waves = [&](std::int64_t copies) { return (copies * world()->size() + per_wave - 1) / per_wave; };
      extra            = 6 * 4 * (waves(6) - waves(2));
    }
    if (c.label.find("coupled Newton") != std::string::npos)
      EXPECT_LE(counted[1], counted[0] + counted[0] / 10);
    else
      EXPECT_EQ(counted[1], counted[0] + extra) << "the last step, 2 copies:\n"
                                                << reports[0] << "6 copies:\n"
                                                << reports[1];
  });
}

// Kernels and fences of a step, with the Kokkos Tools device id of the instance each was on.
struct InstanceEvent {
  std::string what, name;
  std::uint32_t device;
};
std::vector<InstanceEvent>& instance_events() {
  static std::vector<InstanceEvent> e;
  return e;
}
void on_instance_kernel(const char* name, std::uint32_t device, std::uint64_t*) {
  instance_events().push_back({"kernel", name, device});
}
// Not the global fences Kokkos 4 itself makes before calling a kernel callback when a tool asks
// for them (tools do by default: "Kokkos::Tools::invoke_kokkosp_callback: Kokkos Profile Tool
// Fence"): the recorder's own kernel callbacks cause those.
void on_instance_fence(const char* name, std::uint32_t device, std::uint64_t*) {
  if (std::string(name).rfind("Kokkos::Tools::invoke_kokkosp_callback", 0) == 0) return;
  instance_events().push_back({"fence", name, device});
}

class InstanceRecorder {
 public:
  InstanceRecorder() {
    instance_events().clear();
    set_kernel_callbacks(on_instance_kernel);
    Kokkos::Tools::Experimental::set_begin_fence_callback(on_instance_fence);
  }
  ~InstanceRecorder() {
    set_kernel_callbacks(nullptr);
    Kokkos::Tools::Experimental::set_begin_fence_callback(nullptr);
  }
  InstanceRecorder(const InstanceRecorder&)            = delete;
  InstanceRecorder& operator=(const InstanceRecorder&) = delete;
};

// An instance of the default execution space other than the default one where Kokkos makes one
// (Kokkos 4's partition_space: a stream of its own on a GPU, a thread pool of its own with
// OpenMP); with Kokkos 3.4 (Serial), the default instance.
koptim::ExecutionSpace new_instance() {
#if KOKKOS_VERSION >= 40000
  return Kokkos::Experimental::partition_space(koptim::ExecutionSpace(), 1)[0];
#else
  return koptim::ExecutionSpace();
#endif
}

// Optimizer::step(exec) runs every kernel and fence of a steady-state step on exec: each one's
// Kokkos Tools device id is exec's (a global fence, Kokkos::fence(), has an id of its own; so has
// another instance on a GPU, where each instance is a stream; Kokkos 4.6 gives every OpenMP or
// Serial instance the same id, so on a CPU what this catches is a global fence or a kernel on
// another device). And the step on exec gives the parameters the step on the default instance
// gives, to the bit, for every optimizer and both forms of Shampoo's step (on a GPU the device
// path's products are the batched GEMMs; on a CPU their portable form would add nothing here but
// time: every instance has the one id, and the launch, fence and allocation tests run it).
// The bitwise comparison is made by a third optimizer stepped on exec with no recorder: with a
// kernel callback set, Kokkos 4 fences the whole device before every kernel, which on a GPU would
// hide a producer on another stream (a library call on the default stream) from the recorded run.
TEST(SteadyState, StepRunsOnTheCallersInstance) {
  const koptim::ExecutionSpace exec = new_instance();
  const std::uint32_t id            = Kokkos::Tools::Experimental::device_id(exec);
  for_each_case_and_path(
      [&](const Case& c, Path path, const std::string&) {
        WideModel on_exec(2 * world()->size()), on_default(2 * world()->size()), unrecorded(2 * world()->size());
        auto make = [&](WideModel& m) {
          auto opt = c.distributed ? koptim::create(m.params, c.list, world()) : koptim::create(m.params, c.list);
          set_path(*opt, path);
          return opt;
        };
        auto a = make(on_exec), b = make(on_default), q = make(unrecorded);
        std::vector<InstanceEvent> events;
        for (int s = 1; s <= 10; ++s) {
          on_exec.gradients(s);
          on_default.gradients(s);
          unrecorded.gradients(s);
          if (s <= 4) {
            a->step(exec);  // the first steps build state (Gefen's codebook, the first roots)
          } else {
            InstanceRecorder record;
            a->step(exec);
            events.insert(events.end(), instance_events().begin(), instance_events().end());
          }
          b->step();
          q->step(exec);
        }
        exec.fence();
        ASSERT_FALSE(events.empty());
        std::string wrong;
        for (const auto& e : events)
          if (e.device != id)
            wrong += "  " + e.what + " '" + e.name + "' on device id " + std::to_string(e.device) + "\n";
        EXPECT_TRUE(wrong.empty()) << "exec has device id " << id << "; off it in steady-state steps:\n" << wrong;
        for (std::size_t k = 0; k < on_exec.f.size(); ++k) {
          EXPECT_EQ(unrecorded.f[k]->get(), on_default.f[k]->get()) << k;
          EXPECT_EQ(on_exec.f[k]->get(), on_default.f[k]->get()) << k;
        }
        for (std::size_t k = 0; k < on_exec.d.size(); ++k) {
          EXPECT_EQ(unrecorded.d[k]->get(), on_default.d[k]->get()) << k;
          EXPECT_EQ(on_exec.d[k]->get(), on_default.d[k]->get()) << k;
        }
      },
      /*portable=*/false);
}

// The recorder sees a global fence under an id that is not an instance's, and a kernel on exec
// under exec's id: the test above cannot pass by not listening.
void launch_on(const koptim::ExecutionSpace& exec) {
  Kokkos::parallel_for("koptim_test::probe", Kokkos::RangePolicy<koptim::ExecutionSpace>(exec, 0, 1),
                       KOKKOS_LAMBDA(int){});
}

TEST(SteadyState, InstanceRecorderSeesDevicesAndGlobalFences) {
  const bool fences_reported        = kokkos_reports_fences();
  const koptim::ExecutionSpace exec = new_instance();
  InstanceRecorder record;
  launch_on(exec);
  ASSERT_EQ(instance_events().size(), 1u);
  EXPECT_EQ(instance_events()[0].device, Kokkos::Tools::Experimental::device_id(exec));
  if (!fences_reported) return;  // Kokkos 3.4
  instance_events().clear();
  Kokkos::fence();  // global (one event per backend that Kokkos fences)
  ASSERT_GE(instance_events().size(), 1u);
  for (const auto& e : instance_events()) EXPECT_NE(e.device, Kokkos::Tools::Experimental::device_id(exec)) << e.name;
}

// The counter itself sees an allocation: the test above cannot pass by not listening.
TEST(SteadyState, CounterSeesAllocations) {
  AllocationCounter count;
  Kokkos::View<float*> v("koptim_test::probe", 10);
  ASSERT_EQ(allocations().size(), 1u);
  EXPECT_EQ(allocations()[0].label, "koptim_test::probe");
  EXPECT_EQ(allocations()[0].bytes, 40u);
}

// And the launch counter a kernel (launched from a free function: CUDA allows no device lambda
// in a test body, a private member function).
void launch_probe() {
  Kokkos::parallel_for("koptim_test::probe", Kokkos::RangePolicy<koptim::ExecutionSpace>(0, 1), KOKKOS_LAMBDA(int){});
}

TEST(SteadyState, CounterSeesLaunches) {
  LaunchCounter count;
  launch_probe();
  ASSERT_EQ(launches().size(), 1u);
  EXPECT_EQ(launches()[0], "koptim_test::probe");
}

}  // namespace
