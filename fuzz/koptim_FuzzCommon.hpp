// Shared by the libFuzzer targets: Kokkos started once per process, a small fixed set of
// parameters, one optimizer per kind, the byte encoding of an OptimizerState used by the
// import_state target and its seed writer, and the rule every target checks: bad input ends in
// a koptim::Error, anything else escaping is a finding.
#ifndef KOPTIM_FUZZ_COMMON_HPP
#define KOPTIM_FUZZ_COMMON_HPP

#include <koptim/koptim.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace koptim_fuzz {

// Kokkos once per process. No MPI: nothing the targets call needs it (a checkpoint without a
// communicator is read by one process), and MPI_Init's own allocations would show as leaks.
inline void start() {
  static bool started = false;
  if (started) return;
  started             = true;
  int argc            = 1;
  static char name[]  = "koptim_fuzz";
  static char* args[] = {name, nullptr};
  char** argv         = args;
  Kokkos::initialize(argc, argv);
  std::atexit([] { Kokkos::finalize(); });
}

// Two parameters of both scalar types and ranks 2 and 1 (a p > 1 Gefen block, a Shampoo matrix).
struct Params {
  Kokkos::View<float**, Kokkos::LayoutRight> w{"w", 6, 4}, dw{"dw", 6, 4};
  Kokkos::View<double*, Kokkos::LayoutRight> b{"b", 5}, db{"db", 5};
  koptim::ParameterSet set;
  Params() {
    set.add("w", w, dw);
    set.add("b", b, db);
    fill(0);
  }
  // The parameters' values as bytes (a refused load must leave them as they were).
  std::vector<unsigned char> bytes() const {
    auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
    auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
    std::vector<unsigned char> out(hw.span() * sizeof(float) + hb.span() * sizeof(double));
    std::memcpy(out.data(), hw.data(), hw.span() * sizeof(float));
    std::memcpy(out.data() + hw.span() * sizeof(float), hb.data(), hb.span() * sizeof(double));
    return out;
  }
  // Deterministic finite values (a step must be possible with them).
  void fill(int k) {
    auto hw = Kokkos::create_mirror_view(w), hdw = Kokkos::create_mirror_view(dw);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 4; ++j) {
        hw(i, j)  = 0.1f * static_cast<float>(i - j);
        hdw(i, j) = 0.01f * static_cast<float>((i * 7 + j * 3 + k) % 11 - 5);
      }
    auto hb = Kokkos::create_mirror_view(b), hdb = Kokkos::create_mirror_view(db);
    for (int i = 0; i < 5; ++i) {
      hb(i)  = 0.2 * i;
      hdb(i) = 0.03 * ((i * 5 + k) % 7 - 3);
    }
    Kokkos::deep_copy(w, hw);
    Kokkos::deep_copy(dw, hdw);
    Kokkos::deep_copy(b, hb);
    Kokkos::deep_copy(db, hdb);
  }
};

inline const std::vector<std::string>& kinds() {
  static const std::vector<std::string> k = {"SGD", "AdaGrad", "RMSProp", "Adam", "AdamW", "Shampoo", "Gefen"};
  return k;
}

inline std::unique_ptr<koptim::Optimizer> make(const std::string& kind, const koptim::ParameterSet& set) {
  Teuchos::ParameterList l("koptim");
  l.set("optimizer", kind);
  l.set("lr", 0.01);
  if (kind == "SGD") l.set("momentum", 0.9);
  return koptim::create(set, l);
}

// Runs f; a koptim::Error is the expected refusal of bad input; any other exception is a finding.
template <class F>
void expect_koptim_errors_only(const char* target, F&& f) {
  try {
    f();
  } catch (const koptim::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: foreign exception (not a koptim::Error): %s\n", target, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: foreign exception of unknown type\n", target);
    std::abort();
  }
}

// ---- the byte encoding of an OptimizerState (little-endian, as the host) ----------------------
// u8 kind; string optimizer; u16 count then (string key, i64) integers; u16 count then (string key,
// f64) reals; u16 count then tensors: string key, u8 dtype, u8 rank, i64 shape[rank], u32 bytes,
// data, u8 whole rank, i64 whole[], i64 offset. string: u16 length then bytes. Reading past the
// end yields zeros, so every input decodes.
class Reader {
 public:
  Reader(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  template <class T>
  T get() {
    T v{};
    const std::size_t k = std::min(sizeof(T), n_ - i_);
    std::memcpy(&v, d_ + i_, k);
    i_ += k;
    return v;
  }
  std::string str() {
    const std::size_t len = std::min<std::size_t>(get<std::uint16_t>(), n_ - i_);
    std::string s(reinterpret_cast<const char*>(d_ + i_), len);
    i_ += len;
    return s;
  }
  std::vector<unsigned char> bytes(std::size_t len) {
    len = std::min(len, n_ - i_);
    std::vector<unsigned char> v(d_ + i_, d_ + i_ + len);
    i_ += len;
    return v;
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_, i_ = 0;
};

inline koptim::OptimizerState decode(const std::uint8_t* data, std::size_t size, std::uint8_t& kind) {
  Reader r(data, size);
  kind = r.get<std::uint8_t>();
  koptim::OptimizerState s;
  s.optimizer = r.str();
  for (int n = r.get<std::uint16_t>() % 64; n > 0; --n) {
    auto k        = r.str();
    s.integers[k] = r.get<std::int64_t>();
  }
  for (int n = r.get<std::uint16_t>() % 64; n > 0; --n) {
    auto k     = r.str();
    s.reals[k] = r.get<double>();
  }
  for (int n = r.get<std::uint16_t>() % 64; n > 0; --n) {
    auto k = r.str();
    koptim::StateTensor t;
    t.dtype = static_cast<koptim::ScalarType>(r.get<std::uint8_t>() % 3);
    for (int d = r.get<std::uint8_t>() % 9; d > 0; --d) t.shape.push_back(r.get<std::int64_t>());
    t.data = r.bytes(r.get<std::uint32_t>());
    for (int d = r.get<std::uint8_t>() % 9; d > 0; --d) t.whole.push_back(r.get<std::int64_t>());
    t.offset     = r.get<std::int64_t>();
    s.tensors[k] = std::move(t);
  }
  return s;
}

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<std::uint16_t>(static_cast<std::uint16_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<std::uint8_t> out;
};

inline std::vector<std::uint8_t> encode(std::uint8_t kind, const koptim::OptimizerState& s) {
  Writer w;
  w.put(kind);
  w.str(s.optimizer);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(s.integers.size()));
  for (const auto& kv : s.integers) w.str(kv.first), w.put<std::int64_t>(kv.second);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(s.reals.size()));
  for (const auto& kv : s.reals) w.str(kv.first), w.put<double>(kv.second);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(s.tensors.size()));
  for (const auto& kv : s.tensors) {
    const auto& t = kv.second;
    w.str(kv.first);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(t.dtype));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(t.shape.size()));
    for (auto d : t.shape) w.put<std::int64_t>(d);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t.data.size()));
    w.out.insert(w.out.end(), t.data.begin(), t.data.end());
    w.put<std::uint8_t>(static_cast<std::uint8_t>(t.whole.size()));
    for (auto d : t.whole) w.put<std::int64_t>(d);
    w.put<std::int64_t>(t.offset);
  }
  return w.out;
}

}  // namespace koptim_fuzz

#endif
