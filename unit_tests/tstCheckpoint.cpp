// Checkpoints: a round trip restores the state, the parameters and the metadata exactly; every
// refused file leaves the optimizer and the parameters exactly as they were; a failed save leaves
// the previous file intact; h5dump shows the documented layout. Runs at 1 and 2 ranks (a
// replicated optimizer saving over a communicator, and ranks that name different files).
#include "koptim_TestCheckpoint.hpp"
#include "koptim_TestErrors.hpp"
#include "koptim_TestMpi.hpp"

#include <koptim/io/koptim_Checkpoint.hpp>

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace {

using koptim_test::CheckpointModel;
using koptim_test::expect_error;
using koptim_test::world;

std::string file(const std::string& name) {
  return ::testing::TempDir() + "koptim_ckpt_" + name + "_np" + std::to_string(world()->size()) + ".h5";
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
// Written by rank 0 only; every rank waits for it.
void write_all(const std::string& path, const std::string& bytes) {
  if (world()->rank() == 0) std::ofstream(path, std::ios::binary) << bytes;
  MPI_Barrier(world()->mpi_comm());
}

// The files beside path whose names begin with path's and ".tmp" (a save's temporary files).
std::vector<std::string> temporary_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path().string());
  return found;
}

std::unique_ptr<koptim::Optimizer> make(CheckpointModel& m, const std::string& config, int steps) {
  auto opt = koptim::create(m.params, koptim_test::checkpoint_config(config), world());
  for (int s = 1; s <= steps; ++s) {
    m.gradients(s);
    opt->step();
  }
  return opt;
}

koptim::io::SaveOptions save_options() {
  koptim::io::SaveOptions o;
  o.comm = world();
  return o;
}
koptim::io::LoadOptions load_options() {
  koptim::io::LoadOptions o;
  o.comm = world();
  return o;
}

// A load that must be refused: the error names what is wrong and nothing changes.
template <class E = koptim::Error>
void expect_refused(const std::string& path, koptim::Optimizer& opt, const CheckpointModel& m,
                    const std::vector<std::string>& fragments) {
  const auto state  = opt.export_state();
  const auto values = m.bytes();
  expect_error<E>([&] { koptim::io::load_checkpoint(path, opt, load_options()); }, fragments);
  EXPECT_TRUE(state == opt.export_state()) << "the optimizer's state changed";
  EXPECT_TRUE(values == m.bytes()) << "the parameters changed";
}

TEST(Checkpoint, RoundTripRestoresStateParametersAndMetadata) {
  CheckpointModel a;
  auto opt                     = make(a, "AdamW", 5);
  koptim::io::SaveOptions o    = save_options();
  o.metadata.integers["epoch"] = 3;
  o.metadata.integers["seed"]  = 1234567890123456789LL;
  o.metadata.reals["loss"]     = 0.1234567890123456789;
  o.metadata.reals["tiny"]     = 5e-324;
  o.metadata.strings["note"]   = "resumed run: \"quotes\" and\nnew lines";
  o.metadata.strings["empty"]  = "";
  const std::string path       = file("roundtrip");
  koptim::io::save_checkpoint(path, *opt, o);

  CheckpointModel b;
  b.scramble();
  auto l = koptim_test::checkpoint_config("AdamW");
  l.set("lr", 0.02);  // does not change the state's structure: loads, and is reported
  auto other        = koptim::create(b.params, l, world());
  const auto report = koptim::io::load_checkpoint(path, *other, load_options());
  EXPECT_TRUE(report.metadata == o.metadata);
  EXPECT_TRUE(koptim::io::read_checkpoint_metadata(path) == o.metadata);
  EXPECT_TRUE(report.parameters_loaded);
  EXPECT_EQ(report.step, 5);
  EXPECT_EQ(report.written_on_ranks, world()->size());
  EXPECT_EQ(report.koptim_version, KOPTIM_VERSION_STRING);
  ASSERT_EQ(report.configuration_changes.size(), 1u);
  EXPECT_EQ(report.configuration_changes[0], "lr: 0.01 in the checkpoint, 0.02 now");
  EXPECT_TRUE(opt->export_state() == other->export_state());
  EXPECT_TRUE(a.bytes() == b.bytes());
  EXPECT_EQ(other->step_count(), 5);
}

// A parameter in another group, a group with another weight_decay of its own: reported like a key
// of the list; LoadOptions::allow_configuration_changes = false refuses any change, nothing
// changed, and loads an unchanged configuration.
TEST(Checkpoint, ReportsGroupChangesAndRefusesChangesWhenAsked) {
  CheckpointModel a;
  auto saved             = make(a, "AdamW", 3);
  const std::string path = file("groups");
  koptim::io::save_checkpoint(path, *saved, save_options());

  CheckpointModel b;
  koptim::ParameterSet ps;
  const int no_decay = ps.add_group("no_decay", {std::nullopt, 0.5});
  for (const auto& p : b.params.parameters()) ps.add_ref(p.name, p.param, p.grad, p.name == "scale" ? no_decay : 0);
  auto regrouped    = koptim::create(ps, koptim_test::checkpoint_config("AdamW"), world());
  const auto report = koptim::io::load_checkpoint(path, *regrouped, load_options());
  EXPECT_EQ(report.configuration_changes,
            (std::vector<std::string>{"group 'no_decay' weight_decay: 0 in the checkpoint, 0.5 now",
                                      "parameter 'b1': group 'no_decay' in the checkpoint, 'default' now"}));

  CheckpointModel c;
  auto l = koptim_test::checkpoint_config("AdamW");
  l.set("lr", 0.02);
  auto other                         = koptim::create(c.params, l, world());
  auto strict                        = load_options();
  strict.allow_configuration_changes = false;
  const auto state                   = other->export_state();
  const auto values                  = c.bytes();
  expect_error<koptim::ConfigError>([&] { koptim::io::load_checkpoint(path, *other, strict); },
                                    {"lr: 0.01 in the checkpoint, 0.02 now", "allow_configuration_changes is false"});
  EXPECT_TRUE(state == other->export_state());
  EXPECT_TRUE(values == c.bytes());
  CheckpointModel d;
  auto same = koptim::create(d.params, koptim_test::checkpoint_config("AdamW"), world());
  EXPECT_TRUE(koptim::io::load_checkpoint(path, *same, strict).configuration_changes.empty());
  EXPECT_TRUE(saved->export_state() == same->export_state());
  // Keys that only place the work on the ranks may differ: the run goes on (on other ranks).
  CheckpointModel e;
  auto sharded = koptim::create(e.params, koptim_test::checkpoint_config("AdamWSharded"), world());
  EXPECT_EQ(koptim::io::load_checkpoint(path, *sharded, strict).configuration_changes,
            std::vector<std::string>{"shard_state: false in the checkpoint, true now"});
  EXPECT_EQ(sharded->step_count(), 3);
  // An optimizer built from option structs has no parameter list: strict loading cannot compare
  // the keys, and refuses rather than pass them unchecked.
  if (world()->size() == 1) {
    CheckpointModel f;
    koptim::CommonOptions common;
    common.lr = 0.02;
    koptim::AdamW from_structs(f.params, common, koptim::AdamOptions{});
    const auto before = from_structs.export_state();
    expect_error<koptim::ConfigError>([&] { koptim::io::load_checkpoint(path, from_structs, strict); },
                                      {"allow_configuration_changes is false", "built from option structs"});
    EXPECT_TRUE(before == from_structs.export_state());
    EXPECT_NO_THROW(koptim::io::load_checkpoint(path, from_structs, load_options()));
  }
}

// A free function: CUDA refuses extended lambdas in a TEST body (a private member function).
void fill_large(const Kokkos::View<float**>& w, const Kokkos::View<float**>& g, const Kokkos::View<double*>& v,
                const Kokkos::View<double*>& gv) {
  Kokkos::parallel_for(
      "test::fill", 700, KOKKOS_LAMBDA(const int i) {
        for (int j = 0; j < 700; ++j) w(i, j) = 1e-3f * static_cast<float>((i * 7 + j * 13) % 101), g(i, j) = w(i, j);
      });
  Kokkos::parallel_for(
      "test::fill", 300000, KOKKOS_LAMBDA(const int i) { v(i) = 1e-4 * (i % 997), gv(i) = 1e-3 * (i % 89); });
  Kokkos::fence();
}

// Two tensors of several chunks each (a float matrix and a double vector) and an AdamW list.
struct LargeModel {
  Kokkos::View<float**> w{"w", 700, 700}, g{"g", 700, 700};
  Kokkos::View<double*> v{"v", 300000}, gv{"gv", 300000};
  koptim::ParameterSet ps;
  Teuchos::ParameterList l{"koptim"};
  LargeModel() {
    ps.add("w", w, g);
    ps.add("v", v, gv);
    fill_large(w, g, v, gv);
    l.set("optimizer", std::string("AdamW"));
    l.set("lr", 0.01);
  }
};

// Tensors of several chunks that one rank holds are scattered and written by every rank: the
// round trip must still be exact (at 2 ranks this takes the shared-writing path).
TEST(Checkpoint, LargeTensorsRoundTrip) {
  LargeModel m;
  auto opt = koptim::create(m.ps, m.l, world());
  opt->step();
  opt->step();
  const std::string path = file("large");
  koptim::io::save_checkpoint(path, *opt, save_options());
  auto fresh                 = koptim::create(m.ps, m.l, world());
  koptim::io::LoadOptions lo = load_options();
  lo.load_parameters         = false;
  koptim::io::load_checkpoint(path, *fresh, lo);
  EXPECT_TRUE(opt->export_state() == fresh->export_state());
}

// The chunk index of the HDF5 1.8 format has no checksum: a record whose position is damaged made
// HDF5 take its chunk for one never written and leave the reader's buffer as it was, a load that
// succeeded with garbage. The first record's position is moved onto the second's and beyond the
// dataset (HDF5 itself rounds a position within a chunk down to the chunk's), by editing the
// first key of the index node that points at the first chunk of w's exp_avg (a v1 B-tree "TREE"
// node of chunked raw data: size and filter mask, 4 bytes each, then one 8-byte offset per
// dimension plus one, then the address of the chunk).
TEST(Checkpoint, ADamagedChunkIndexIsRefused) {
#if !H5_VERSION_GE(1, 10, 5)
  GTEST_SKIP() << "HDF5 before 1.10.5 has no H5Dget_chunk_info: koptim cannot check chunk indexes there";
#else
  LargeModel m;
  auto saved = koptim::create(m.ps, m.l, world());
  saved->step();
  const std::string path = file("chunk_index");
  koptim::io::save_checkpoint(path, *saved, save_options());
  auto opt = koptim::create(m.ps, m.l, world());
  opt->step();
  opt->step();

  // The first two chunks of /parameters/w/state/exp_avg: their positions and the first one's address.
  hsize_t n = 0, at[2][2] = {};
  haddr_t first = 0;
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "/parameters/w/state/exp_avg", H5P_DEFAULT);
    const hid_t s = H5Dget_space(d);
    H5Dget_num_chunks(d, s, &n);
    for (hsize_t i = 0; i < 2 && i < n; ++i) {
      unsigned mask = 0;
      haddr_t addr  = 0;
      hsize_t size  = 0;
      H5Dget_chunk_info(d, s, i, at[i], &mask, &addr, &size);
      if (i == 0) first = addr;
    }
    H5Sclose(s);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_GE(n, 2u) << "the value should have several chunks";
  ASSERT_GT(at[1][0], 0u) << "the chunks should split the rows";
  const std::string bytes       = read_all(path);
  std::size_t key               = std::string::npos;
  constexpr std::size_t offsets = 8, pointer = 8 + 3 * 8;  // a 2-d dataset's key: 3 offsets
  for (std::size_t i = bytes.find("TREE"); i != std::string::npos && key == std::string::npos;
       i             = bytes.find("TREE", i + 4)) {
    if (i + 24 + pointer + 8 > bytes.size() || bytes[i + 4] != 1 || bytes[i + 5] != 0) continue;  // raw data, leaf
    std::uint64_t child = 0;
    std::memcpy(&child, bytes.data() + i + 24 + pointer, 8);
    if (child == first) key = i + 24;
  }
  ASSERT_NE(key, std::string::npos) << "no index node points at the first chunk";
  std::uint64_t recorded[2] = {};
  std::memcpy(recorded, bytes.data() + key + offsets, 16);
  ASSERT_EQ(recorded[0], at[0][0]);
  ASSERT_EQ(recorded[1], at[0][1]);

  const auto state = opt->export_state();
  const std::vector<std::pair<std::vector<std::uint64_t>, std::string>> damages{
      {{at[1][0], at[1][1]}, "another chunk holds"},
      {{(700 + at[1][0] - 1) / at[1][0] * at[1][0], at[0][1]}, "that is no chunk's"}};  // beyond the rows
  for (const auto& damage : damages) {
    SCOPED_TRACE("the first chunk recorded " + damage.second);
    std::string damaged = bytes;
    std::memcpy(&damaged[key + offsets], damage.first.data(), 16);
    const std::string broken = file("chunk_index_damaged");
    write_all(broken, damaged);
    koptim::io::LoadOptions lo = load_options();
    lo.load_parameters         = false;
    expect_error([&] { koptim::io::load_checkpoint(broken, *opt, lo); },
                 {"/parameters/w/state/exp_avg", damage.second, "the file is damaged"});
    EXPECT_TRUE(state == opt->export_state()) << "the optimizer's state changed";
  }
#endif
}

// An optimizer with a communicator of its own saves and loads over it: the options may name that
// communicator again (or a duplicate: the same ranks in the same order) or none; any other is
// refused on every rank before anything is written or changed (at 1 rank every one-rank
// communicator is a duplicate).
TEST(Checkpoint, TheOptionsNameTheOptimizersCommunicatorOrNone) {
  CheckpointModel a;
  auto opt               = make(a, "AdamWSharded", 3);
  const std::string path = file("options_comm");
  koptim::io::save_checkpoint(path, *opt, save_options());  // world(): a duplicate of the optimizer's
  koptim::io::save_checkpoint(path, *opt, koptim::io::SaveOptions{});
  koptim::io::load_checkpoint(path, *opt, load_options());
  koptim::io::load_checkpoint(path, *opt, koptim::io::LoadOptions{});
  const std::string saved = read_all(path);

  MPI_Comm reversed_comm;
  MPI_Comm_split(world()->mpi_comm(), 0, world()->size() - world()->rank(), &reversed_comm);
  auto reversed = koptim::comm::Communicator::create(reversed_comm);
  MPI_Comm_free(&reversed_comm);
  auto self = koptim::comm::Communicator::create(MPI_COMM_SELF);
  struct Other {
    std::shared_ptr<koptim::comm::Communicator> comm;
    std::vector<std::string> fragments;
  };
  std::vector<Other> others;
  if (world()->size() > 1) {
    const std::string n = std::to_string(world()->size());
    others.push_back({reversed,
                      {"a communicator of " + n + " ranks that is not the optimizer's own (" + n + " ranks)",
                       "the same ranks in another order"}});
    others.push_back({self, {"a communicator of 1 ranks that is not the optimizer's own (" + n + " ranks)"}});
  }
  for (const auto& other : others) {
    koptim::io::SaveOptions so;
    so.comm = other.comm;
    expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(path, *opt, so); },
                                      [&] {
                                        auto f = other.fragments;
                                        f.push_back("koptim::io::save_checkpoint");
                                        return f;
                                      }());
    EXPECT_EQ(read_all(path), saved) << "the file changed";
    MPI_Barrier(world()->mpi_comm());
    const auto state  = opt->export_state();
    const auto values = a.bytes();
    koptim::io::LoadOptions lo;
    lo.comm = other.comm;
    expect_error<koptim::ConfigError>([&] { koptim::io::load_checkpoint(path, *opt, lo); }, other.fragments);
    EXPECT_TRUE(state == opt->export_state()) << "the optimizer's state changed";
    EXPECT_TRUE(values == a.bytes()) << "the parameters changed";
  }
  MPI_Barrier(world()->mpi_comm());
  if (world()->rank() == 0) std::remove(path.c_str());
}

TEST(Checkpoint, OptimizerOnlyLeavesTheParameters) {
  CheckpointModel a;
  auto opt               = make(a, "Adam", 4);
  auto o                 = save_options();
  o.save_parameters      = false;
  const std::string path = file("optimizer_only");
  koptim::io::save_checkpoint(path, *opt, o);
  CheckpointModel b;
  b.scramble();
  const auto before = b.bytes();
  auto other        = koptim::create(b.params, koptim_test::checkpoint_config("Adam"), world());
  const auto fresh  = other->export_state();
  // The default asks for the parameters, which this file does not hold: refused, nothing changed.
  try {
    koptim::io::load_checkpoint(path, *other, load_options());
    ADD_FAILURE() << "a file without parameter values was loaded with load_parameters = true";
  } catch (const koptim::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no parameter values"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("load_parameters = false"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(before == b.bytes());
  EXPECT_TRUE(fresh == other->export_state());
  auto lo            = load_options();
  lo.load_parameters = false;
  const auto report  = koptim::io::load_checkpoint(path, *other, lo);
  EXPECT_FALSE(report.parameters_loaded);
  EXPECT_TRUE(before == b.bytes());
  EXPECT_TRUE(opt->export_state() == other->export_state());
  // And a file with values, loaded with load_parameters = false.
  koptim::io::save_checkpoint(path, *opt, save_options());
  EXPECT_FALSE(koptim::io::load_checkpoint(path, *other, lo).parameters_loaded);
  EXPECT_TRUE(before == b.bytes());
}

TEST(Checkpoint, RefusesBadFilesAndChangesNothing) {
  CheckpointModel a;
  auto saved             = make(a, "AdamW", 3);
  const std::string good = file("good");
  koptim::io::save_checkpoint(good, *saved, save_options());
  const std::string bytes = read_all(good);

  CheckpointModel m;
  auto opt = make(m, "AdamW", 2);  // a state that is not the file's

  expect_refused(file("missing"), *opt, m, {"missing", "cannot open the file"});
  expect_error([&] { koptim::io::read_checkpoint_metadata(file("missing")); }, {"cannot open the file"});

  const std::string text = file("text");
  write_all(text, "<ParameterList name=\"koptim\"/>\n");
  expect_refused(text, *opt, m, {"is not an HDF5 file"});

  const std::string truncated = file("truncated");
  write_all(truncated, bytes.substr(0, bytes.size() / 2));
  expect_refused(truncated, *opt, m, {truncated});

  // koptim writes the HDF5 1.8 format (superblock 2, checksummed metadata); a file of the
  // original format (superblock 0, metadata without checksums) is refused before HDF5 parses it.
  EXPECT_EQ(static_cast<unsigned char>(bytes.at(8)), 2u);
  const std::string old_format = file("old_format");
  if (world()->rank() == 0) {
    const hid_t f = H5Fcreate(old_format.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    H5Fclose(f);
  }
  MPI_Barrier(world()->mpi_comm());
  expect_refused(old_format, *opt, m, {"superblock is version 0", "no checksums"});

  // One flipped byte in the raw data of the parameter b1 (its values as float32 are in the file).
  const auto values = a.bytes();
  const std::string needle(reinterpret_cast<const char*>(values.data()) + 4 * 12 * 10, 4 * 10);  // b1
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  std::string flipped = bytes;
  flipped[at + 17] ^= 0x10;
  const std::string corrupted = file("corrupted");
  write_all(corrupted, flipped);
  expect_refused(corrupted, *opt, m, {"/parameters/b1/value", "Fletcher32"});
  // ... and in a state tensor's (b1's first moment, float32 as the optimizer holds it).
  const auto saved_state = saved->export_state();
  const auto& moment     = saved_state.tensors.at("b1/exp_avg").data;
  const std::string moment_bytes(reinterpret_cast<const char*>(moment.data()), moment.size());
  const auto moment_at = bytes.find(moment_bytes);
  ASSERT_NE(moment_at, std::string::npos);
  ASSERT_EQ(bytes.find(moment_bytes, moment_at + 1), std::string::npos);
  std::string flipped_state = bytes;
  flipped_state[moment_at + 9] ^= 0x01;
  const std::string corrupted_state = file("corrupted_state");
  write_all(corrupted_state, flipped_state);
  expect_refused(corrupted_state, *opt, m, {"/parameters/b1/state/exp_avg", "Fletcher32"});

  CheckpointModel s;
  auto sgd = make(s, "SGD", 2);
  expect_refused<koptim::StateError>(good, *sgd, s, {"optimizer 'AdamW', not 'SGD'"});

  // Parameters with another name, shape, scalar type.
  auto other_set = [&](const std::string& what) {
    auto set = std::make_shared<CheckpointModel>();
    koptim::ParameterSet ps;
    for (const auto& p : set->params.parameters()) {
      if (p.name == "b1" && what == "name") {
        ps.add("b1_renamed", set->b1, set->gb1);
      } else if (p.name == "w2" && what == "shape") {
        Kokkos::View<float***> w("w2", 7, 3, 5), g("g", 7, 3, 5);
        ps.add("w2", w, g);
      } else if (p.name == "scale" && what == "type") {
        Kokkos::View<float*> w("scale", 4), g("g", 4);
        ps.add("scale", w, g);
      } else if (p.name == "w2" && what == "layout") {
        Kokkos::View<float***, Kokkos::LayoutLeft> w("w2", 7, 5, 3), g("g", 7, 5, 3);
        ps.add("w2", w, g);
      } else {
        ps.add_ref(p.name, p.param, p.grad, 0);
      }
    }
    return std::make_pair(set, ps);
  };
  for (const auto& c : std::vector<std::pair<std::string, std::string>>{
           {"name", "parameter 'b1', which this optimizer's ParameterSet does not have"},
           {"shape", "parameter 'w2' is float32 (7, 5, 3) LayoutRight in the checkpoint, float32 (7, 3, 5)"},
           {"type", "parameter 'scale' is float64 (4,) LayoutRight in the checkpoint, float32 (4,)"},
           {"layout",
            "parameter 'w2' is float32 (7, 5, 3) LayoutRight in the checkpoint, float32 (7, 5, 3) LayoutLeft"}}) {
    auto set = other_set(c.first);
    auto o   = koptim::create(set.second, koptim_test::checkpoint_config("AdamW"), world());
    expect_refused<koptim::ShapeError>(good, *o, *set.first, {c.second});
  }

  // A newer format.
  const std::string newer = file("newer");
  write_all(newer, bytes);
  if (world()->rank() == 0) {
    const hid_t f        = H5Fopen(newer.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t a        = H5Aopen(f, "format_version", H5P_DEFAULT);
    const std::int64_t v = koptim::io::checkpoint_format_version + 1;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
  }
  MPI_Barrier(world()->mpi_comm());
  expect_refused(newer, *opt, m, {"format version 2", "written by a newer koptim"});

  // Edited outside koptim: a parameter's group copied under another name (two groups for one
  // parameter: not the later one's values), an unsigned 64-bit integer above 2^63 - 1 (HDF5 would
  // read it as 2^63 - 1) in the metadata and in the optimizer's state.
  auto edited = [&](const std::string& name, const std::function<void(hid_t)>& edit) -> std::string {
    const std::string path = file(name);
    write_all(path, bytes);
    if (world()->rank() == 0) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      EXPECT_GE(f, 0);
      edit(f);
      H5Fclose(f);
    }
    MPI_Barrier(world()->mpi_comm());
    return path;
  };
  const std::string copied = edited("copied_group", [](hid_t f) {
    EXPECT_GE(H5Ocopy(f, "parameters/b1", f, "parameters/b1_copy", H5P_DEFAULT, H5P_DEFAULT), 0);
  });
  expect_refused(copied, *opt, m, {"/parameters/b1", "holds parameter 'b1', as an earlier group does"});
  // A scalar attribute of the given HDF5 type, written from value (of mem_type).
  auto scalar_attribute = [](hid_t f, const char* object, const char* name, hid_t type, hid_t mem_type,
                             const void* value) {
    const hid_t o     = H5Oopen(f, object, H5P_DEFAULT);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a     = H5Acreate2(o, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0);
    EXPECT_GE(H5Awrite(a, mem_type, value), 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
  };
  auto unsigned_attribute = [&](hid_t f, const char* object, const char* name) {
    const std::uint64_t too_big = (std::uint64_t(1) << 63) + 12345;
    scalar_attribute(f, object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &too_big);
  };

  const std::string big_meta = edited("unsigned_metadata", [&](hid_t f) { unsigned_attribute(f, "metadata", "seed"); });
  expect_refused(big_meta, *opt, m, {"attribute 'seed' of /metadata = 9223372036854788153", "signed 64-bit"});
  expect_error([&] { koptim::io::read_checkpoint_metadata(big_meta); }, {"9223372036854788153"});
  const std::string two_values = edited("has_values_2", [](hid_t f) {
    const hid_t a        = H5Aopen(f, "has_parameter_values", H5P_DEFAULT);
    const std::int64_t v = 2;
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
  });
  expect_refused(two_values, *opt, m, {"has_parameter_values is 2, not 0 or 1"});
  for (const std::int64_t ranks : {std::int64_t(0), std::int64_t(1) << 31}) {
    const std::string bad_ranks = edited("num_ranks_" + std::to_string(ranks), [&](hid_t f) {
      const hid_t a = H5Aopen(f, "num_ranks", H5P_DEFAULT);
      EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &ranks), 0);
      H5Aclose(a);
    });
    expect_refused(bad_ranks, *opt, m, {"num_ranks is " + std::to_string(ranks) + ", not a number of ranks"});
  }
  const std::string big_step = edited("unsigned_step", [&](hid_t f) {
    const hid_t o = H5Oopen(f, "optimizer", H5P_DEFAULT);
    EXPECT_GE(H5Adelete(o, "step"), 0);
    H5Oclose(o);
    unsigned_attribute(f, "optimizer", "step");
  });
  expect_refused(big_step, *opt, m, {"attribute 'step' of /optimizer = 9223372036854788153", "signed 64-bit"});

  // A parameter of the optimizer's set that the file does not hold.
  const std::string no_b1 =
      edited("missing_parameter", [](hid_t f) { EXPECT_GE(H5Ldelete(f, "parameters/b1", H5P_DEFAULT), 0); });
  expect_refused<koptim::ShapeError>(no_b1, *opt, m, {"this optimizer's parameter 'b1' is not in the checkpoint"});
  // A scalar added to /optimizer: the state would hold an integer or a real AdamW does not read.
  const std::string extra_integer = edited("extra_integer", [&](hid_t f) {
    const std::int64_t v = 1;
    scalar_attribute(f, "optimizer", "warmup_done", H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
  });
  expect_refused<koptim::StateError>(extra_integer, *opt, m,
                                     {"the state has integer 'warmup_done', which this optimizer does not hold"});
  const std::string extra_real = edited("extra_real", [&](hid_t f) {
    const double v = 0.5;
    scalar_attribute(f, "optimizer", "momentum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
  });
  expect_refused<koptim::StateError>(extra_real, *opt, m,
                                     {"the state has real 'momentum', which this optimizer does not hold"});

  // Floating-point layouts koptim never writes, which HDF5 would convert, rounding: a long double
  // (16 bytes here) in the metadata and in the state, a parameter stored as 4-byte floats with
  // another exponent bias.
  auto long_double_attribute = [&](hid_t f, const char* object, const char* name) {
    const long double v = 1.0L + 1e-19L;  // not a double
    scalar_attribute(f, object, name, H5T_NATIVE_LDOUBLE, H5T_NATIVE_LDOUBLE, &v);
  };

  const std::string ld_meta =
      edited("long_double_metadata", [&](hid_t f) { long_double_attribute(f, "metadata", "x"); });
  expect_refused(ld_meta, *opt, m, {"attribute 'x' of /metadata is a", "other than IEEE binary32 or binary64"});
  expect_error([&] { koptim::io::read_checkpoint_metadata(ld_meta); }, {"attribute 'x' of /metadata", "IEEE"});
  const std::string biased = edited("biased_float_parameter", [&](hid_t f) {
    const hid_t d     = H5Dopen2(f, "parameters/b1/value", H5P_DEFAULT);
    const hid_t space = H5Dget_space(d);
    std::vector<float> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    EXPECT_GE(H5Ldelete(f, "parameters/b1/value", H5P_DEFAULT), 0);
    const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    EXPECT_GE(H5Tset_ebias(t, 100), 0);
    const hid_t nd = H5Dcreate2(f, "parameters/b1/value", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(nd, 0);
    EXPECT_GE(H5Dwrite(nd, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(nd);
    H5Tclose(t);
    H5Sclose(space);
  });
  expect_refused<koptim::ShapeError>(biased, *opt, m, {"/parameters/b1/value", "scalar type"});

  // Shapes koptim never writes, each read into a buffer sized from what koptim writes, which HDF5
  // would overrun: a 2-D attribute, an attribute without a value (a null dataspace, whose read
  // would leave the value as it was), a /parameter_list of many strings. Refused before a read.
  const std::string matrix_meta = edited("matrix_metadata", [](hid_t f) {
    const hid_t o         = H5Oopen(f, "metadata", H5P_DEFAULT);
    const hsize_t dims[2] = {64, 64};
    const hid_t space     = H5Screate_simple(2, dims, nullptr);
    std::vector<std::uint64_t> v(64 * 64, 7);
    const hid_t a = H5Acreate2(o, "grid", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_UINT64, v.data()), 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
  });
  expect_refused(matrix_meta, *opt, m, {"attribute 'grid' of /metadata has 2 dimensions", "scalars and 1-D arrays"});
  expect_error([&] { koptim::io::read_checkpoint_metadata(matrix_meta); }, {"attribute 'grid'", "2 dimensions"});
  const std::string null_meta = edited("null_metadata", [](hid_t f) {
    const hid_t o     = H5Oopen(f, "metadata", H5P_DEFAULT);
    const hid_t space = H5Screate(H5S_NULL);
    const hid_t a     = H5Acreate2(o, "epoch", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(a, 0);
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
  });
  expect_refused(null_meta, *opt, m, {"attribute 'epoch' of /metadata has an empty (null) dataspace"});
  const std::string many_lists = edited("many_parameter_lists", [](hid_t f) {
    EXPECT_GE(H5Ldelete(f, "parameter_list", H5P_DEFAULT), 0);
    const hsize_t n   = 4096;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t t     = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 16);
    const hid_t d = H5Dcreate2(f, "parameter_list", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(d, 0);
    std::vector<char> text(16 * n, 'x');
    EXPECT_GE(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()), 0);
    H5Dclose(d);
    H5Tclose(t);
    H5Sclose(space);
  });
  expect_refused(many_lists, *opt, m, {"/parameter_list is not one string"});

  // Ranks that name different files (on one rank: a missing file).
  expect_refused(world()->rank() == 0 && world()->size() > 1 ? good : file("elsewhere"), *opt, m,
                 {world()->size() > 1 ? "the ranks name different files" : "cannot open the file"});

  // Ranks that pass different options to a save: refused on every rank, nothing written.
  if (world()->size() > 1) {
    auto o                       = save_options();
    o.metadata.integers["epoch"] = world()->rank();
    const std::string other      = file("disagree");
    expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(other, *opt, o); },
                                      {"the ranks pass different options"});
    EXPECT_FALSE(std::ifstream(other).good());
  }

  // Loading the good file still works after all that.
  koptim::io::load_checkpoint(good, *opt, load_options());
  EXPECT_TRUE(saved->export_state() == opt->export_state());
  EXPECT_TRUE(a.bytes() == m.bytes());
}

// A configuration that changes the state's structure is refused naming the key and both values.
TEST(Checkpoint, RefusesAStructuralConfigurationChange) {
  for (const std::string key : {"max_preconditioner_dim", "use_merge_dims"}) {
    // Saved with blocks of at most 16 (w2 (7, 5, 3) merges into (7, 15)), loaded with 8 or unmerged.
    auto saved_list = koptim_test::checkpoint_config("Shampoo");
    saved_list.set("max_preconditioner_dim", 16);
    auto loaded_list = saved_list;
    if (key == "max_preconditioner_dim")
      loaded_list.set("max_preconditioner_dim", 8);
    else
      loaded_list.set("use_merge_dims", false);
    CheckpointModel a;
    auto saved = koptim::create(a.params, saved_list, world());
    a.gradients(1);
    saved->step();
    const std::string path = file("shampoo_" + key);
    koptim::io::save_checkpoint(path, *saved, save_options());
    CheckpointModel m;
    auto opt = koptim::create(m.params, loaded_list, world());
    m.gradients(1);
    opt->step();
    expect_refused<koptim::StateError>(
        path, *opt, m,
        {"does not fit this optimizer", key == "max_preconditioner_dim"
                                            ? "max_preconditioner_dim: 16 in the checkpoint, 8 now"
                                            : "use_merge_dims: true in the checkpoint, false now"});
  }
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousFile) {
  CheckpointModel a;
  auto opt               = make(a, "Shampoo", 3);
  const std::string path = file("atomic");
  if (world()->rank() == 0)  // an earlier run's, killed in a save
    for (const auto& t : temporary_files(path)) std::remove(t.c_str());
  koptim::io::save_checkpoint(path, *opt, save_options());
  const auto state  = opt->export_state();
  const auto values = a.bytes();
  for (int s = 4; s <= 6; ++s) {
    a.gradients(s);
    opt->step();
  }
  // On every rank, and then on one rank alone (the last): a failure that only one rank meets (its
  // memory, its copy from the device; or its collective write's error, a full disk on its node)
  // fails the save on every rank, which close the file together, instead of leaving the others
  // waiting in a collective call.
  // In a write: the first of a rank's several collective calls for its share of w2's values (a
  // share that does not start and end at a row), which the other ranks make too.
  for (const bool in_write : {false, true})
    for (const bool one_rank : {false, true}) {
      SCOPED_TRACE(std::string(one_rank ? "failure on the last rank only" : "failure on every rank") +
                   (in_write ? ", in a write" : ", before a write"));
      if (!one_rank || world()->rank() == world()->size() - 1) {
        if (in_write)
          koptim::io::Impl::inject_save_write_failure_after(3);  // /parameter_list, enc/w1, b1, w2
        else
          koptim::io::Impl::inject_save_failure_after(3);
      }
      // Named once, by the failing rank ("rank 1: ..."), not again by an outer agreement
      // ("rank 0: rank 1: ...").
      const std::string failing =
          world()->size() > 1 ? "rank " + std::to_string(one_rank ? world()->size() - 1 : 0) + ": " : "";
      try {
        koptim::io::save_checkpoint(path, *opt, save_options());
        ADD_FAILURE() << "no exception";
      } catch (const koptim::Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.rfind(failing + "koptim::io::save_checkpoint", 0), 0u) << m;
        EXPECT_NE(m.find("injected failure"), std::string::npos) << m;
      }
      MPI_Barrier(world()->mpi_comm());
      EXPECT_EQ(temporary_files(path), std::vector<std::string>{}) << "a temporary file was left behind";
      CheckpointModel b;
      auto fresh = koptim::create(b.params, koptim_test::checkpoint_config("Shampoo"), world());
      koptim::io::load_checkpoint(path, *fresh, load_options());
      EXPECT_TRUE(state == fresh->export_state());
      EXPECT_TRUE(values == b.bytes());
    }
}

// A rename that fails (here: the path is a directory that holds a file) fails the save on every
// rank with the reason, removes the temporary file and leaves what was at the path.
TEST(Checkpoint, AFailedRenameFailsTheSaveOnEveryRank) {
  CheckpointModel a;
  auto opt               = make(a, "AdamW", 1);
  const std::string path = file("rename_target_is_a_directory");
  const std::string kept = path + "/kept";
  if (world()->rank() == 0) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directory(path);
    std::ofstream(kept) << "an earlier file";
  }
  MPI_Barrier(world()->mpi_comm());
  const std::string failing = world()->size() > 1 ? "rank 0: " : "";
  expect_error([&] { koptim::io::save_checkpoint(path, *opt, save_options()); },
               {failing + "koptim::io::save_checkpoint", "cannot rename '" + path + ".tmp", "' to '" + path + "': "});
  MPI_Barrier(world()->mpi_comm());
  EXPECT_EQ(temporary_files(path), std::vector<std::string>{});
  EXPECT_EQ(read_all(kept), "an earlier file");
  MPI_Barrier(world()->mpi_comm());
  if (world()->rank() == 0) std::filesystem::remove_all(path);
}

// Processes that save the same path without a communicator between them (a replicated optimizer
// saved on every rank without SaveOptions::comm) each write a temporary file of their own and
// rename it: every save succeeds and the file is a whole one, not one process's truncation of
// another's file.
TEST(Checkpoint, IndependentSavesToOnePathDoNotCollide) {
  CheckpointModel a;
  auto opt = koptim::create(a.params, koptim_test::checkpoint_config("AdamW"));
  a.gradients(1);
  opt->step();
  const std::string path = file("independent");
  if (world()->rank() == 0)  // an earlier run's, killed in a save
    for (const auto& t : temporary_files(path)) std::remove(t.c_str());
  MPI_Barrier(world()->mpi_comm());
  for (int i = 0; i < 10; ++i) EXPECT_NO_THROW(koptim::io::save_checkpoint(path, *opt)) << "save " << i;
  MPI_Barrier(world()->mpi_comm());
  EXPECT_EQ(temporary_files(path), std::vector<std::string>{});
  CheckpointModel b;
  auto fresh = koptim::create(b.params, koptim_test::checkpoint_config("AdamW"));
  koptim::io::load_checkpoint(path, *fresh);
  EXPECT_TRUE(opt->export_state() == fresh->export_state());
  EXPECT_TRUE(a.bytes() == b.bytes());
}

// A checkpoint written while lr_schedule's total_steps and step_size were listed as 1 (now -1,
// unset) is not a changed configuration where the schedule's type does not read them; one where
// the type reads a changed value is.
TEST(Checkpoint, ScheduleKeysTheTypeDoesNotReadAreNotAConfigurationChange) {
  Teuchos::ParameterList constant("koptim");  // a constant lr: the schedule reads no length
  constant.set("optimizer", std::string("AdamW"));
  constant.set("lr", 0.01);
  CheckpointModel a;
  auto saved = koptim::create(a.params, constant, world());
  a.gradients(1);
  saved->step();
  const std::string path = file("old_schedule_defaults");
  koptim::io::save_checkpoint(path, *saved, save_options());
  auto rewrite = [&](const std::function<std::string(std::string)>& edit) {
    if (world()->rank() == 0) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      const hid_t d = H5Dopen2(f, "parameter_list", H5P_DEFAULT);
      const hid_t t = H5Dget_type(d);
      std::string xml(H5Tget_size(t), '\0');
      EXPECT_GE(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &xml[0]), 0);
      xml.erase(xml.find('\0') == std::string::npos ? xml.size() : xml.find('\0'));
      H5Tclose(t);
      H5Dclose(d);
      EXPECT_GE(H5Ldelete(f, "parameter_list", H5P_DEFAULT), 0);
      const std::string edited = edit(xml);
      ASSERT_NE(edited, xml);
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, edited.size());
      const hsize_t one = 1;
      const hid_t space = H5Screate_simple(1, &one, nullptr);
      const hid_t dcpl  = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(dcpl, 1, &one);
      H5Pset_fletcher32(dcpl);
      const hid_t nd = H5Dcreate2(f, "parameter_list", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      EXPECT_GE(H5Dwrite(nd, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, edited.data()), 0);
      H5Dclose(nd);
      H5Pclose(dcpl);
      H5Sclose(space);
      H5Tclose(type);
      H5Fclose(f);
    }
    MPI_Barrier(world()->mpi_comm());
  };
  auto replace = [](std::string xml, const std::string& key, const std::string& value) {
    const std::string from = "name=\"" + key + "\" type=\"int\" value=\"-1\"";
    const auto at          = xml.find(from);
    if (at != std::string::npos)
      xml.replace(at, from.size(), "name=\"" + key + "\" type=\"int\" value=\"" + value + "\"");
    return xml;
  };
  rewrite([&](std::string xml) { return replace(replace(xml, "total_steps", "1"), "step_size", "1"); });
  CheckpointModel m;
  auto opt                           = koptim::create(m.params, constant, world());
  auto strict                        = load_options();
  strict.allow_configuration_changes = false;
  const auto report                  = koptim::io::load_checkpoint(path, *opt, strict);
  EXPECT_TRUE(report.configuration_changes.empty());
  EXPECT_TRUE(saved->export_state() == opt->export_state());
  // A schedule type that reads its length: a changed length is a change.
  rewrite([&](std::string xml) {
    const std::string from = "name=\"type\" type=\"string\" value=\"constant\"";
    const auto at          = xml.find(from);
    if (at != std::string::npos) xml.replace(at, from.size(), "name=\"type\" type=\"string\" value=\"cosine\"");
    return replace(xml, "total_steps", "1");  // (already 1 from the first edit)
  });
  CheckpointModel n;
  auto other = koptim::create(n.params, constant, world());
  expect_error<koptim::ConfigError>([&] { koptim::io::load_checkpoint(path, *other, strict); },
                                    {"lr_schedule/type: cosine in the checkpoint, constant now",
                                     "lr_schedule/total_steps: 1 in the checkpoint, (absent) now"});
}

// Ranks that find different files behind one path (here: each rank in a directory of its own, as
// a node-local copy would be) are refused on every rank, nothing changed, instead of restoring a
// different state on each rank: files of different steps, and files that agree on the step and
// everything else but are two saves (two attempts of a run, saved at the same step), told apart
// by the save's identity.
TEST(Checkpoint, RanksThatReadDifferentFilesAreRefused) {
  if (world()->size() == 1) GTEST_SKIP() << "needs two ranks";
  namespace fs       = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("koptim_ckpt_own_dirs_np" + std::to_string(world()->size())) /
                       ("rank" + std::to_string(world()->rank()));
  fs::create_directories(dir);
  for (const bool same_step : {false, true}) {
    SCOPED_TRACE(same_step ? "two saves of the same step" : "saves of different steps");
    CheckpointModel a;
    auto saved = koptim::create(a.params, koptim_test::checkpoint_config("AdamW"));
    for (int s = 1; s <= 3 + (same_step ? 0 : world()->rank()); ++s) {
      a.gradients(s);
      saved->step();
    }
    koptim::io::save_checkpoint((dir / "same.h5").string(), *saved);  // each rank its own file
    CheckpointModel m;
    auto opt        = make(m, "AdamW", 2);
    const auto here = fs::current_path();
    fs::current_path(dir);
    expect_refused(std::string("same.h5"), *opt, m,
                   {"the ranks read different files at this path", "nothing was changed"});
    fs::current_path(here);
  }
}

// Replicas (optimizers without a communicator of their own) saved together over
// SaveOptions::comm must be the same optimizer: one whose parameters differ on one rank hung the
// save (groups only some ranks created), one whose configuration differs wrote one rank's.
TEST(Checkpoint, ReplicasThatDifferAreRefused) {
  if (world()->size() == 1) GTEST_SKIP() << "needs two ranks";
  const std::string path = file("replicas");
  const bool last        = world()->rank() == world()->size() - 1;
  // On the last rank: another lr; one more parameter; another name for a group (each rank would
  // write its own into the file: a hang where the names' lengths differ); a group that sets the
  // list's lr itself (the lr in effect is the same, but that rank alone would write it).
  for (const std::string differs : {"lr", "parameter", "group name", "group's own lr"}) {
    SCOPED_TRACE(differs + " differs on the last rank");
    CheckpointModel m;
    auto list = koptim_test::checkpoint_config("AdamW");
    if (differs == "lr" && last) list.set("lr", 0.02);
    koptim::GroupOptions own{std::nullopt, 0.0};
    if (differs == "group's own lr" && last) own.lr = list.get<double>("lr");
    koptim::ParameterSet params;
    const int no_decay = params.add_group(differs == "group name" && last ? "no_decay_" : "no_decay", own);
    for (const auto& p : m.params.parameters()) params.add_ref(p.name, p.param, p.grad, p.group == 0 ? 0 : no_decay);
    Kokkos::View<float*> x("x", 3), gx("gx", 3);
    if (differs == "parameter" && last) params.add("extra", x, gx);
    auto opt = koptim::create(params, list);
    m.gradients(1);
    opt->step();
    if (world()->rank() == 0) {  // and an earlier run's temporary files, killed in a save
      std::remove(path.c_str());
      for (const auto& t : temporary_files(path)) std::remove(t.c_str());
    }
    MPI_Barrier(world()->mpi_comm());
    expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(path, *opt, save_options()); },
                                      {"the ranks save different optimizers"});
    MPI_Barrier(world()->mpi_comm());
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_EQ(temporary_files(path), std::vector<std::string>{});
  }
}

// A parameter without elements is in no rank's slice of sharded state, so a sharded save writes
// no state for it: the file loads with and without sharding (at 2 ranks both ways; at 1 rank
// nothing is sharded), and the run goes on as the saved one does, bit for bit.
TEST(Checkpoint, AParameterWithoutElementsLoadsWithAndWithoutSharding) {
  struct Model {
    Kokkos::View<float**, Kokkos::LayoutRight> w{"w", 6, 4}, gw{"gw", 6, 4}, e{"e", 0, 4}, ge{"ge", 0, 4};
    koptim::ParameterSet params;
    Model() {
      auto h = Kokkos::create_mirror_view(w);
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 4; ++j) h(i, j) = 0.25f * static_cast<float>(i - j);
      Kokkos::deep_copy(w, h);
      params.add("w", w, gw);
      params.add("empty", e, ge);
    }
    void gradients(int s) {
      auto h = Kokkos::create_mirror_view(gw);
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 4; ++j) h(i, j) = 0.1f * static_cast<float>((i + 2 * j + s) % 5) - 0.2f;
      Kokkos::deep_copy(gw, h);
    }
    std::vector<float> values() const {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
      return std::vector<float>(h.data(), h.data() + h.size());
    }
  };
  auto adamw = [](bool shard) {
    Teuchos::ParameterList l("koptim");
    l.set("optimizer", std::string("AdamW"));
    l.set("lr", 0.01);
    l.set("shard_state", shard);
    return l;
  };
  for (const auto& c : std::vector<std::pair<bool, bool>>{{true, false}, {false, true}, {true, true}}) {
    SCOPED_TRACE(std::string("saved ") + (c.first ? "sharded" : "unsharded") + ", loaded " +
                 (c.second ? "sharded" : "unsharded"));
    Model a;
    auto saved = koptim::create(a.params, adamw(c.first), world());
    for (int s = 1; s <= 3; ++s) {
      a.gradients(s);
      saved->step();
    }
    const std::string path = file("empty_parameter");
    koptim::io::save_checkpoint(path, *saved, save_options());
    Model b;
    auto loaded = koptim::create(b.params, adamw(c.second), world());
    ASSERT_NO_THROW(koptim::io::load_checkpoint(path, *loaded, load_options()));
    EXPECT_EQ(loaded->step_count(), 3);
    EXPECT_EQ(a.values(), b.values());
    for (int s = 4; s <= 5; ++s) {
      a.gradients(s);
      b.gradients(s);
      saved->step();
      loaded->step();
    }
    EXPECT_EQ(a.values(), b.values());
  }
}

TEST(Checkpoint, RejectsBadMetadataBeforeWriting) {
  CheckpointModel a;
  auto opt                   = make(a, "SGD", 1);
  auto o                     = save_options();
  o.metadata.integers["a/b"] = 1;
  const std::string path     = file("bad_metadata");
  expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(path, *opt, o); }, {"metadata name 'a/b'"});
  EXPECT_FALSE(std::ifstream(path).good());
  o                        = save_options();
  o.metadata.integers["x"] = 1;
  o.metadata.reals["x"]    = 1;
  expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(path, *opt, o); }, {"'x' is used for two"});
  // HDF5 refused a name of 65535 bytes or more with its own message (the whole name in it).
  o                                            = save_options();
  o.metadata.integers[std::string(70000, 'n')] = 1;
  expect_error<koptim::ConfigError>([&] { koptim::io::save_checkpoint(path, *opt, o); },
                                    {"(70000 bytes) is not allowed", "at most 65000 bytes"});
  EXPECT_FALSE(std::ifstream(path).good());
}

// h5dump (from Debian's hdf5-tools), when present, reads the documented layout.
TEST(Checkpoint, H5dumpShowsTheLayout) {
  const std::string h5dump = KOPTIM_H5DUMP;
  if (h5dump.empty()) GTEST_SKIP() << "h5dump not found at configure time";
  // A program carried to another machine (the GPU run kit) may find no h5dump there.
  if (access(h5dump.c_str(), X_OK) != 0) GTEST_SKIP() << h5dump << " is not on this machine";
  CheckpointModel a;
  auto opt               = make(a, "Gefen", 2);
  const std::string path = file("layout");
  koptim::io::save_checkpoint(path, *opt, save_options());
  if (world()->rank() != 0) return;
  std::string out;
  {
    FILE* p = popen((h5dump + " -H -p " + path).c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
  }
  for (const char* s :
       {"ATTRIBUTE \"format\"", "ATTRIBUTE \"format_version\"", "ATTRIBUTE \"koptim_version\"",
        "ATTRIBUTE \"optimizer\"", "DATASET \"parameter_list\"", "GROUP \"metadata\"", "GROUP \"optimizer\"",
        "DATASET \"codebook\"", "ATTRIBUTE \"step\"", "GROUP \"parameters\"", "GROUP \"enc%2Fw1\"",
        "ATTRIBUTE \"layout\"", "DATASET \"value\"", "GROUP \"state\"", "DATASET \"indices\"", "H5T_STD_U8LE",
        "ATTRIBUTE \"partition\"", "CHECKSUM FLETCHER32", "DATASPACE  SIMPLE { ( 7, 5, 3 ) / ( 7, 5, 3 ) }"}) {
    EXPECT_NE(out.find(s), std::string::npos) << "h5dump -H -p lacks " << s << ":\n" << out;
  }
}

}  // namespace
