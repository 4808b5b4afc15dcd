// Checkpoints in HDF5 (layout: docs/checkpoint.md).
//
// Save: every rank exports its state; a manifest of every rank's entries (keys, shapes, slices,
// scalar values) is all-gathered, so that every rank builds the same plan of groups, datasets
// and attributes (HDF5 creates them collectively); each dataset is then written collectively,
// each rank selecting the part it writes (its slice, or the whole entry on the lowest rank that
// holds it; parameter values in equal shares), after the ranks agree on the local work it needs.
// The file is "<path>.tmp-<tag>" until every rank has flushed and closed it; rank 0 then syncs it
// to disk and renames it.
//
// Load: every rank opens the file read-only, checks it, and reads what Optimizer::state_part()
// says it keeps; the state is checked on every rank and the errors agreed on before anything
// changes.
#include <koptim/io/koptim_Checkpoint.hpp>

#include "../comm/koptim_Distributor.hpp"
#include "../config/koptim_ScheduleKeys.hpp"

#include <koptim/comm/koptim_Communicator.hpp>
#include <koptim/config/koptim_Factory.hpp>
#include "../core/koptim_Check.hpp"
#include <koptim/core/impl/koptim_Profiling.hpp>
#include <koptim/koptim_Version.hpp>

#include <koptim_config.hpp>

#if KOPTIM_ENABLE_HDF5
#include <Teuchos_XMLParameterListCoreHelpers.hpp>
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#endif

namespace koptim {
namespace io {

namespace {
int injected_failure       = -1;
int injected_write_failure = -1;
}  // namespace

void Impl::inject_save_failure_after(int datasets) { injected_failure = datasets; }
void Impl::inject_save_write_failure_after(int datasets) { injected_write_failure = datasets; }

#if !KOPTIM_ENABLE_HDF5

void save_checkpoint(const std::string&, const Optimizer&, const SaveOptions&) {
  throw ConfigError("koptim::io::save_checkpoint: koptim was built without HDF5 (koptim_ENABLE_HDF5)");
}
LoadReport load_checkpoint(const std::string&, Optimizer&, const LoadOptions&) {
  throw ConfigError("koptim::io::load_checkpoint: koptim was built without HDF5 (koptim_ENABLE_HDF5)");
}
Metadata read_checkpoint_metadata(const std::string&) {
  throw ConfigError("koptim::io::read_checkpoint_metadata: koptim was built without HDF5 (koptim_ENABLE_HDF5)");
}

#else

namespace {

const char* const format_name = "koptim checkpoint";

// ---------------------------------------------------------------------------------------------
// HDF5 handles and errors

// HDF5's own message for the error just raised (innermost last), or "".
std::string hdf5_message() {
  std::vector<std::string> lines;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e->desc && *e->desc) static_cast<std::vector<std::string>*>(data)->push_back(e->desc);
        return 0;
      },
      &lines);
  std::string s;
  const std::size_t from = lines.size() > 3 ? lines.size() - 3 : 0;
  for (std::size_t i = from; i < lines.size(); ++i) s += (s.empty() ? "" : "; ") + lines[i];
  return s;
}

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    reset();
    id_    = o.id_;
    close_ = o.close_;
    o.id_  = -1;
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Closes now, reporting failure (H5Fclose flushes the file).
  herr_t close() {
    herr_t r = 0;
    if (id_ >= 0 && close_) r = close_(id_);
    id_ = -1;
    return r;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_               = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// Throws koptim::Error naming what failed, with HDF5's reason, when id < 0.
hid_t ok(hid_t id, const std::string& what) {
  if (id < 0) {
    const std::string m = hdf5_message();
    throw Error(what + (m.empty() ? "" : " (HDF5: " + m + ")"));
  }
  return id;
}

// Silences HDF5's printing of its error stacks while koptim handles the errors itself.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_       = nullptr;
};

Handle group_create(hid_t loc, const std::string& name, const std::string& where) {
  return {ok(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "cannot create group " + where),
          H5Gclose};
}

hid_t memory_type(ScalarType t) {
  switch (t) {
    case ScalarType::float32:
      return H5T_NATIVE_FLOAT;
    case ScalarType::float64:
      return H5T_NATIVE_DOUBLE;
    case ScalarType::uint8:
      return H5T_NATIVE_UINT8;
  }
  return -1;
}
hid_t file_type(ScalarType t) {
  switch (t) {
    case ScalarType::float32:
      return H5T_IEEE_F32LE;
    case ScalarType::float64:
      return H5T_IEEE_F64LE;
    case ScalarType::uint8:
      return H5T_STD_U8LE;
  }
  return -1;
}
// True when type is one of the given HDF5 types (the same layout: size, order, precision,
// fields, bias), in either byte order.
bool same_type_as(hid_t type, hid_t little, hid_t big) { return H5Tequal(type, little) > 0 || H5Tequal(type, big) > 0; }
// 4 or 8 for IEEE binary32 or binary64, 0 for any other floating-point layout (a long double, a
// 4-byte float with another exponent bias), which HDF5 would convert, rounding, without a word.
std::size_t ieee_float_bytes(hid_t type) {
  if (same_type_as(type, H5T_IEEE_F32LE, H5T_IEEE_F32BE)) return 4;
  if (same_type_as(type, H5T_IEEE_F64LE, H5T_IEEE_F64BE)) return 8;
  return 0;
}
// The scalar type of a dataset's type: exactly a type koptim writes (IEEE binary32, binary64, an
// unsigned 8-bit integer; either byte order); false for any other type.
bool scalar_type_of_h5(hid_t type, ScalarType& out) {
  const std::size_t ieee = ieee_float_bytes(type);
  if (ieee == 4)
    out = ScalarType::float32;
  else if (ieee == 8)
    out = ScalarType::float64;
  else if (same_type_as(type, H5T_STD_U8LE, H5T_STD_U8BE))
    out = ScalarType::uint8;
  else
    return false;
  return true;
}

// --- attributes ---

void write_attribute(hid_t loc, const std::string& name, hid_t file_t, hid_t mem_t, const void* value,
                     const std::vector<hsize_t>& dims, const std::string& where) {
  Handle space(
      ok(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
         "cannot create a dataspace"),
      H5Sclose);
  Handle a(ok(H5Acreate2(loc, name.c_str(), file_t, space, H5P_DEFAULT, H5P_DEFAULT),
              "cannot create attribute '" + name + "' of " + where),
           H5Aclose);
  ok(H5Awrite(a, mem_t, value), "cannot write attribute '" + name + "' of " + where);
}
void write_int(hid_t loc, const std::string& name, std::int64_t v, const std::string& where) {
  write_attribute(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, {}, where);
}
void write_real(hid_t loc, const std::string& name, double v, const std::string& where) {
  write_attribute(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, {}, where);
}
void write_ints(hid_t loc, const std::string& name, const std::vector<std::int64_t>& v, const std::string& where) {
  const std::int64_t none = 0;
  write_attribute(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v.empty() ? &none : v.data(), {v.empty() ? 0 : v.size()},
                  where);
}
Handle string_type(std::size_t n) {
  Handle t(ok(H5Tcopy(H5T_C_S1), "cannot create a string type"), H5Tclose);
  ok(H5Tset_size(t, std::max<std::size_t>(n, 1)), "cannot size a string type");
  ok(H5Tset_strpad(t, H5T_STR_NULLPAD), "cannot set a string type's padding");
  return t;
}
void write_string(hid_t loc, const std::string& name, const std::string& v, const std::string& where) {
  Handle t                 = string_type(v.size());
  const std::string padded = v.empty() ? std::string(1, '\0') : v;
  write_attribute(loc, name, t, t, padded.data(), {}, where);
}

struct Attribute {
  enum Kind { integer, real, string, integers, other } kind = other;
  std::int64_t i                                            = 0;
  double r                                                  = 0;
  std::string s;
  std::vector<std::int64_t> v;
};

std::vector<std::string> attribute_names(hid_t obj, const std::string& where) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  ok(H5Aiterate2(
         obj, H5_INDEX_NAME, H5_ITER_INC, &idx,
         [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
           static_cast<std::vector<std::string>*>(data)->push_back(name);
           return 0;
         },
         &names),
     "cannot list the attributes of " + where);
  return names;
}

Attribute read_attribute(hid_t obj, const std::string& name, const std::string& where) {
  const std::string what = "attribute '" + name + "' of " + where;
  Handle a(ok(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "cannot open " + what), H5Aclose);
  Handle type(ok(H5Aget_type(a), "cannot read the type of " + what), H5Tclose);
  Handle space(ok(H5Aget_space(a), "cannot read the shape of " + what), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  ok(rank, "cannot read the shape of " + what);
  // koptim writes scalars and 1-D arrays; any other shape is refused before a read, whose buffer
  // is sized from the shape (a 2-D attribute read into a 1-D buffer would overflow it).
  if (rank > 1)
    throw Error(what + " has " + std::to_string(rank) + " dimensions; koptim writes scalars and 1-D arrays");
  if (H5Sget_simple_extent_type(space) != (rank == 0 ? H5S_SCALAR : H5S_SIMPLE))
    throw Error(what + " has an empty (null) dataspace; koptim writes scalars and 1-D arrays");
  hsize_t n = 1;
  if (rank == 1) ok(H5Sget_simple_extent_dims(space, &n, nullptr), "cannot read the shape of " + what);
  Attribute out;
  const H5T_class_t c = H5Tget_class(type);
  if (c == H5T_INTEGER) {
    // Read as int64, which HDF5 would saturate: an unsigned 64-bit value above 2^63 - 1 (or a
    // wider integer) is refused, not read as another number.
    const H5T_sign_t sign  = H5Tget_sign(type);
    const std::size_t size = H5Tget_size(type);
    if (size > 8) throw Error(what + " is a " + std::to_string(8 * size) + "-bit integer; koptim reads up to 64 bits");
    if (sign == H5T_SGN_NONE && size == 8) {
      std::vector<std::uint64_t> u(rank == 1 ? n : 1);
      if (!u.empty()) ok(H5Aread(a, H5T_NATIVE_UINT64, u.data()), "cannot read " + what);
      for (const auto x : u)
        if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          throw Error(what + " = " + std::to_string(x) + " does not fit a signed 64-bit integer");
    }
  }
  if (c == H5T_INTEGER && rank == 0) {
    out.kind = Attribute::integer;
    ok(H5Aread(a, H5T_NATIVE_INT64, &out.i), "cannot read " + what);
  } else if (c == H5T_INTEGER && rank == 1) {
    out.kind = Attribute::integers;
    out.v.resize(n);
    if (n > 0) ok(H5Aread(a, H5T_NATIVE_INT64, out.v.data()), "cannot read " + what);
  } else if (c == H5T_FLOAT && rank == 0) {
    if (ieee_float_bytes(type) == 0)
      throw Error(what + " is a " + std::to_string(8 * H5Tget_size(type)) +
                  "-bit floating-point value in a layout other than IEEE binary32 or binary64; koptim reads those "
                  "only (any other would be rounded)");
    out.kind = Attribute::real;
    ok(H5Aread(a, H5T_NATIVE_DOUBLE, &out.r), "cannot read " + what);
  } else if (c == H5T_STRING && rank == 0 && H5Tis_variable_str(type) == 0) {
    out.kind               = Attribute::string;
    const std::size_t size = H5Tget_size(type);
    std::string buf(size, '\0');
    ok(H5Aread(a, type, &buf[0]), "cannot read " + what);
    buf.erase(std::find(buf.begin(), buf.end(), '\0'), buf.end());
    out.s = buf;
  }
  return out;
}

// --- links ---

// The members of a group: (name, is a group).
std::vector<std::pair<std::string, bool> > members(hid_t group, const std::string& where) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  ok(H5Literate(
         group, H5_INDEX_NAME, H5_ITER_INC, &idx,
         [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
           static_cast<std::vector<std::string>*>(data)->push_back(name);
           return 0;
         },
         &names),
     "cannot list the members of " + where);
  std::vector<std::pair<std::string, bool> > out;
  for (const auto& n : names) {
    Handle o(ok(H5Oopen(group, n.c_str(), H5P_DEFAULT), "cannot open " + where + "/" + n), H5Oclose);
    const H5I_type_t t = H5Iget_type(o);
    if (t != H5I_GROUP && t != H5I_DATASET) throw Error(where + "/" + n + " is neither a group nor a dataset");
    out.emplace_back(n, t == H5I_GROUP);
  }
  return out;
}

// Names in the file: '%', '/' and a lone "." are escaped (%25, %2F, %2E), so any parameter name
// is one group name.
std::string escape(const std::string& name) {
  if (name == ".") return "%2E";
  std::string s;
  for (char c : name) {
    if (c == '%')
      s += "%25";
    else if (c == '/')
      s += "%2F";
    else
      s += c;
  }
  return s;
}
std::string unescape(const std::string& name) {
  std::string s;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 3, "%25") == 0)
      s += '%', i += 2;
    else if (name.compare(i, 3, "%2F") == 0)
      s += '/', i += 2;
    else if (name.compare(i, 3, "%2E") == 0)
      s += '.', i += 2;
    else
      s += name[i];
  }
  return s;
}

std::vector<std::string> split(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t a = 0;
  while (true) {
    const auto b = key.find('/', a);
    parts.push_back(key.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return parts;
}

// --- selections ---

// A flat range [a, b) of a row-major array as at most 2 rank - 1 hyperslabs, in element order.
// Each is transferred with a memory space of its own shape: HDF5 maps equal shapes chunk by chunk,
// but walks a flat memory space against an n-D selection element by element.
struct Slab {
  std::vector<hsize_t> start, count;
  hsize_t elements = 0;
};

void slabs_of(const std::vector<hsize_t>& dims, std::vector<hsize_t>& prefix, std::size_t level, hsize_t a, hsize_t b,
              std::vector<Slab>& out) {
  if (a >= b) return;
  const std::size_t k = dims.size();
  auto slab           = [&](hsize_t first, hsize_t rows) {
    Slab sl;
    sl.start.assign(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(level));
    sl.count.assign(level, 1);
    sl.start.push_back(first);
    sl.count.push_back(rows);
    for (std::size_t j = level + 1; j < k; ++j) sl.start.push_back(0), sl.count.push_back(dims[j]);
    sl.elements = 1;
    for (auto c : sl.count) sl.elements *= c;
    out.push_back(std::move(sl));
  };
  if (level + 1 == k) return slab(a, b - a);
  hsize_t inner = 1;
  for (std::size_t j = level + 1; j < k; ++j) inner *= dims[j];
  hsize_t r0 = a / inner;
  if (r0 == (b - 1) / inner) {
    prefix[level] = r0;
    return slabs_of(dims, prefix, level + 1, a - r0 * inner, b - r0 * inner, out);
  }
  if (a % inner != 0) {
    prefix[level] = r0;
    slabs_of(dims, prefix, level + 1, a % inner, inner, out);
    ++r0;
  }
  if (b / inner > r0) slab(r0, b / inner - r0);
  if (b % inner != 0) {
    prefix[level] = b / inner;
    slabs_of(dims, prefix, level + 1, 0, b % inner, out);
  }
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

// The transfers of the elements [offset, offset + count) of a dataset of this shape: empty for
// none, one (start empty) for the whole dataset, else its slabs.
std::vector<Slab> transfers_of(const std::vector<std::int64_t>& shape, std::int64_t offset, std::int64_t count) {
  if (count <= 0) return {};
  if (shape.empty() || (offset == 0 && count == product(shape))) return {Slab{}};
  std::vector<hsize_t> dims(shape.begin(), shape.end()), prefix(shape.size(), 0);
  std::vector<Slab> out;
  slabs_of(dims, prefix, 0, static_cast<hsize_t>(offset), static_cast<hsize_t>(offset + count), out);
  return out;
}

// A damaged chunk index (the 1.8 format's chunk B-tree carries no checksum) can make HDF5
// allocate whatever a chunk record claims (the checkpoint fuzzer: 4 GB) before it reads the chunk.
// Checked from the index alone before a dataset is read: koptim's chunks hold at most 1 MiB and
// each stores its elements plus the 4 bytes of Fletcher32, with the filter applied.
void check_chunks(hid_t d, const std::string& what) {
  const std::string damaged = " (the file is damaged)";
  Handle dcpl(ok(H5Dget_create_plist(d), "cannot read the properties of " + what), H5Pclose);
  if (H5Pget_layout(dcpl) != H5D_CHUNKED) return;
  Handle space(ok(H5Dget_space(d), "cannot read the shape of " + what), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 1 || rank > 32)
    throw Error("cannot read " + what + ": it has " + std::to_string(rank) + " dimensions" + damaged);
  std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
  if (H5Pget_chunk(dcpl, rank, chunk.data()) != rank) throw Error("cannot read the chunks of " + what + damaged);
  Handle type(ok(H5Dget_type(d), "cannot read the type of " + what), H5Tclose);
  hsize_t bytes = H5Tget_size(type);
  for (const hsize_t c : chunk) {
    if (c == 0 || bytes > (hsize_t{64} << 20) / c)
      throw Error("cannot read " + what + ": its chunks would exceed 64 MiB" + damaged);
    bytes *= c;
  }
#if H5_VERSION_GE(1, 10, 5)
  // koptim writes every element, so every chunk is in the index, once, at its place: a record
  // whose position is damaged would leave its chunk unread (HDF5 takes it for one never written
  // and, as koptim's datasets have no fill value, leaves the reader's buffer as it was: a load
  // that succeeds with garbage), so the records must be exactly the dataset's chunks.
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  hsize_t expected = 1;
  std::vector<hsize_t> per_dim(static_cast<std::size_t>(rank));
  for (int r = 0; r < rank; ++r) {
    per_dim[r] = (dims[r] + chunk[r] - 1) / chunk[r];
    expected *= per_dim[r];  // at most the element count: no overflow
  }
  hsize_t n = 0;
  ok(H5Dget_num_chunks(d, space, &n), "cannot read the chunk index of " + what);
  if (n != expected)
    throw Error("cannot read " + what + ": its chunk index lists " + std::to_string(n) + " chunks of the " +
                std::to_string(expected) + " its shape has" + damaged);
  std::vector<bool> seen(static_cast<std::size_t>(expected), false);
  std::vector<hsize_t> at(static_cast<std::size_t>(rank));
  for (hsize_t i = 0; i < n; ++i) {
    unsigned mask = 0;
    haddr_t addr  = 0;
    hsize_t size  = 0;
    ok(H5Dget_chunk_info(d, space, i, at.data(), &mask, &addr, &size), "cannot read the chunk index of " + what);
    if (size > bytes + 4 || mask != 0)
      throw Error("cannot read " + what + ": chunk " + std::to_string(i) + " records " + std::to_string(size) +
                  " stored bytes" + (mask != 0 ? " with its filters skipped" : "") + "; koptim writes at most " +
                  std::to_string(bytes + 4) + damaged);
    hsize_t linear = 0;
    bool placed    = true;
    for (int r = 0; r < rank; ++r) {
      placed = placed && at[r] % chunk[r] == 0 && at[r] < dims[r];
      linear = linear * per_dim[r] + (placed ? at[r] / chunk[r] : 0);
    }
    if (!placed || seen[linear])
      throw Error("cannot read " + what + ": chunk " + std::to_string(i) + " of its index is recorded at a position " +
                  (placed ? "another chunk holds" : "that is no chunk's") + damaged);
    seen[linear] = true;
  }
#endif
}

// Reads or writes the elements [offset, offset + count) of a dataset in `calls` transfers
// (collective writes need the same number on every rank; the extra ones select nothing). A write
// that fails on this rank (a full disk on its node) does not end the loop: the other ranks are in
// the next collective call, so this rank makes its calls too and throws after the last.
// fail_first (a test hook) takes the first write for a failed one, after it is made.
void transfer(bool write, hid_t d, ScalarType dtype, const std::vector<std::int64_t>& shape, unsigned char* data,
              std::int64_t offset, std::int64_t count, std::size_t calls, hid_t xfer, const std::string& what,
              bool fail_first = false) {
  if (!write) check_chunks(d, what);
  const auto slabs       = transfers_of(shape, offset, count);
  const std::size_t size = size_of(dtype);
  unsigned char dummy    = 0;
  hsize_t done           = 0;
  std::string failed;  // a write's error, thrown after the last call
  calls = std::max(calls, slabs.size());
  for (std::size_t i = 0; i < calls; ++i) {
    herr_t r;
    if (i < slabs.size() && slabs[i].start.empty()) {
      r = write ? H5Dwrite(d, memory_type(dtype), H5S_ALL, H5S_ALL, xfer, data)
                : H5Dread(d, memory_type(dtype), H5S_ALL, H5S_ALL, xfer, data);
    } else {
      Handle fs(ok(H5Dget_space(d), "cannot read the shape of " + what), H5Sclose);
      Handle ms;
      unsigned char* at = &dummy;
      if (i < slabs.size()) {
        const Slab& sl = slabs[i];
        ok(H5Sselect_hyperslab(fs, H5S_SELECT_SET, sl.start.data(), nullptr, sl.count.data(), nullptr),
           "cannot select in " + what);
        ms = Handle(ok(H5Screate_simple(static_cast<int>(sl.count.size()), sl.count.data(), nullptr),
                       "cannot create a dataspace"),
                    H5Sclose);
        at = data + done * size;
        done += sl.elements;
      } else {
        ok(H5Sselect_none(fs), "cannot select");
        const hsize_t one = 1;
        ms                = Handle(ok(H5Screate_simple(1, &one, nullptr), "cannot create a dataspace"), H5Sclose);
        ok(H5Sselect_none(ms), "cannot select");
      }
      r = write ? H5Dwrite(d, memory_type(dtype), ms, fs, xfer, at) : H5Dread(d, memory_type(dtype), ms, fs, xfer, at);
    }
    if (write && i == 0 && fail_first) {
      failed = what + ": injected failure in its first write (test hook)";
      continue;
    }
    if (write && r < 0) {
      if (failed.empty()) {
        const std::string m = hdf5_message();
        failed              = what + ": cannot write it" + (m.empty() ? "" : " (HDF5: " + m + ")");
      }
      continue;
    }
    ok(r, "cannot read " + what + " (a failed Fletcher32 checksum means the file is corrupted)");
  }
  if (!failed.empty()) throw Error(failed);
}

// ---------------------------------------------------------------------------------------------
// The ranks taking part, and agreement on errors

struct Ranks {
  std::shared_ptr<comm::Communicator> comm;  // null or size 1: one process
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  bool parallel() const { return size() > 1; }
  // Runs f; every rank then throws the lowest failing rank's error (or none does).
  template <class F>
  void together(F&& f) const {
    koptim::Impl::run_together(comm.get(), std::forward<F>(f));
  }
};

Ranks ranks_of(const Optimizer& opt, const std::shared_ptr<comm::Communicator>& given, const char* where) {
  Ranks r;
  r.comm = opt.communicator();
  if (r.comm) {
    // The optimizer's communicator is used; the options may name it again (or a duplicate of it:
    // the same ranks in the same order) or none, nothing else. Decided together on every rank,
    // also on those that name none (a rank that went on alone would wait in the save's
    // collectives, or pair its collectives with another rank's check).
    r.together([&] {
      if (!given) return;
      int relation = MPI_UNEQUAL;
      MPI_Comm_compare(given->mpi_comm(), r.comm->mpi_comm(), &relation);
      if (relation == MPI_IDENT || relation == MPI_CONGRUENT) return;
      throw ConfigError(std::string("koptim::io::") + where + ": the options name a communicator of " +
                        std::to_string(given->size()) + " ranks that is not the optimizer's own (" +
                        std::to_string(r.comm->size()) + " ranks) nor a duplicate of it" +
                        (relation == MPI_SIMILAR ? " (it holds the same ranks in another order)" : "") +
                        "; the optimizer saves and loads over its own communicator: name that one, or none");
    });
  }
  if (!r.comm) r.comm = given;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Bytes for the manifest exchange

class Out {
 public:
  void u64(std::uint64_t v) { bytes(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void bytes(const void* p, std::size_t n) { b_.append(static_cast<const char*>(p), n); }
  const std::string& data() const { return b_; }

 private:
  std::string b_;
};
class In {
 public:
  In(const char* p, std::size_t n) : p_(p), end_(p + n) {}
  std::uint64_t u64() {
    std::uint64_t v;
    bytes(&v, 8);
    return v;
  }
  std::string str() {
    const std::size_t n = u64();
    if (n > static_cast<std::size_t>(end_ - p_)) throw Error("koptim::io: corrupted manifest");
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  void bytes(void* out, std::size_t n) {
    if (n > static_cast<std::size_t>(end_ - p_)) throw Error("koptim::io: corrupted manifest");
    std::memcpy(out, p_, n);
    p_ += n;
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

// Every rank's bytes, on every rank.
std::vector<std::string> all_gather_bytes(const Ranks& r, const std::string& mine) {
  if (!r.parallel()) return {mine};
  const MPI_Comm c = r.comm->mpi_comm();
  long long n      = static_cast<long long>(mine.size());
  std::vector<long long> sizes(static_cast<std::size_t>(r.size()));
  MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, c);
  std::vector<int> counts(sizes.size()), displs(sizes.size());
  long long total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (total + sizes[i] > INT32_MAX) throw Error("koptim::io::save_checkpoint: the state's manifest exceeds 2 GiB");
    counts[i] = static_cast<int>(sizes[i]);
    displs[i] = static_cast<int>(total);
    total += sizes[i];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), counts[static_cast<std::size_t>(r.rank())], MPI_CHAR, &all[0], counts.data(),
                 displs.data(), MPI_CHAR, c);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < sizes.size(); ++i) out.push_back(all.substr(displs[i], counts[i]));
  return out;
}

// ---------------------------------------------------------------------------------------------
// The plan of a save: every entry of the complete state

struct Part {
  int rank;
  std::int64_t offset, count;
};
struct Entry {
  enum Kind { integer, real, tensor } kind = integer;
  std::int64_t i                           = 0;
  double r                                 = 0;
  ScalarType dtype                         = ScalarType::float32;
  std::vector<std::int64_t> shape;  // the whole tensor's
  std::vector<Part> parts;          // who writes which elements
  int first_rank = 0;
};

std::string manifest_of(const OptimizerState& s) {
  Out o;
  o.u64(s.integers.size());
  for (const auto& kv : s.integers) {
    o.str(kv.first);
    o.u64(static_cast<std::uint64_t>(kv.second));
  }
  o.u64(s.reals.size());
  for (const auto& kv : s.reals) {
    o.str(kv.first);
    o.bytes(&kv.second, 8);
  }
  o.u64(s.tensors.size());
  for (const auto& kv : s.tensors) {
    const auto& t = kv.second;
    o.str(kv.first);
    o.u64(static_cast<std::uint64_t>(t.dtype));
    const auto& whole = t.whole.empty() ? t.shape : t.whole;
    o.u64(whole.size());
    for (auto e : whole) o.u64(static_cast<std::uint64_t>(e));
    o.u64(static_cast<std::uint64_t>(t.whole.empty() ? 0 : t.offset));
    o.u64(static_cast<std::uint64_t>(t.size()));
  }
  return o.data();
}

std::map<std::string, Entry> plan_of(const std::vector<std::string>& manifests) {
  std::map<std::string, Entry> plan;
  const std::string where = "koptim::io::save_checkpoint: ";
  for (std::size_t rank = 0; rank < manifests.size(); ++rank) {
    In in(manifests[rank].data(), manifests[rank].size());
    const int r = static_cast<int>(rank);
    auto scalar = [&](const std::string& key, Entry::Kind kind, std::int64_t i, double x) {
      auto it = plan.find(key);
      if (it == plan.end()) {
        Entry e;
        e.kind       = kind;
        e.i          = i;
        e.r          = x;
        e.first_rank = r;
        plan[key]    = e;
        return;
      }
      const Entry& e = it->second;
      if (e.kind != kind || (kind == Entry::integer ? e.i != i : std::memcmp(&e.r, &x, 8) != 0)) {
        std::ostringstream m;
        m.precision(17);
        m << where << "the ranks disagree on the state's entry '" << key << "' (rank " << e.first_rank << ": ";
        if (e.kind == Entry::integer)
          m << e.i;
        else if (e.kind == Entry::real)
          m << e.r;
        else
          m << "a tensor";
        m << ", rank " << r << ": ";
        if (kind == Entry::integer)
          m << i;
        else
          m << x;  // at the stream's 17 digits, as the first rank's: two values that differ print apart
        m << ")";
        throw StateError(m.str());
      }
    };
    for (std::uint64_t n = in.u64(); n > 0; --n) {
      const std::string k = in.str();
      scalar(k, Entry::integer, static_cast<std::int64_t>(in.u64()), 0);
    }
    for (std::uint64_t n = in.u64(); n > 0; --n) {
      const std::string k = in.str();
      double x;
      in.bytes(&x, 8);
      scalar(k, Entry::real, 0, x);
    }
    for (std::uint64_t n = in.u64(); n > 0; --n) {
      const std::string k = in.str();
      const auto dtype    = static_cast<ScalarType>(in.u64());
      std::vector<std::int64_t> shape(in.u64());
      for (auto& e : shape) e = static_cast<std::int64_t>(in.u64());
      const auto offset = static_cast<std::int64_t>(in.u64());
      const auto count  = static_cast<std::int64_t>(in.u64());
      auto it           = plan.find(k);
      if (it == plan.end()) {
        Entry e;
        e.kind       = Entry::tensor;
        e.dtype      = dtype;
        e.shape      = shape;
        e.first_rank = r;
        it           = plan.emplace(k, e).first;
      }
      Entry& e = it->second;
      if (e.kind != Entry::tensor || e.dtype != dtype || e.shape != shape) {
        throw StateError(where + "the ranks disagree on the state's tensor '" + k + "' (rank " +
                         std::to_string(e.first_rank) + ": " + to_string(e.dtype) + " " + shape_string(e.shape) +
                         ", rank " + std::to_string(r) + ": " + to_string(dtype) + " " + shape_string(shape) + ")");
      }
      bool held = false;
      for (const auto& p : e.parts) held = held || (p.offset == offset && p.count == count);
      if (!held) e.parts.push_back({r, offset, count});
    }
    if (!in.done()) throw Error(where + "corrupted manifest");
  }
  // The parts of every tensor must tile it exactly.
  for (auto& kv : plan) {
    Entry& e = kv.second;
    if (e.kind != Entry::tensor) continue;
    std::sort(e.parts.begin(), e.parts.end(), [](const Part& a, const Part& b) { return a.offset < b.offset; });
    std::int64_t next = 0;
    for (const auto& p : e.parts) {
      if (p.offset != next) break;
      next += p.count;
    }
    if (next != product(e.shape)) {
      throw StateError(where + "the ranks' slices of the state's tensor '" + kv.first + "' do not cover its " +
                       std::to_string(product(e.shape)) + " elements exactly once");
    }
  }
  return plan;
}

// The parameter a state key belongs to ("<name>/..."; the longest name that fits), or -1.
int owner_of(const ParameterSet& ps, const std::string& key) {
  int best = -1;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const std::string& n = ps[i].name;
    if (key.size() > n.size() + 1 && key.compare(0, n.size(), n) == 0 && key[n.size()] == '/' &&
        (best < 0 || n.size() > ps[static_cast<std::size_t>(best)].name.size()))
      best = static_cast<int>(i);
  }
  return best;
}

// The HDF5 group and name of a state entry: (group path segments below the root, name).
std::pair<std::vector<std::string>, std::string> location_of(const ParameterSet& ps, const std::string& key) {
  std::vector<std::string> path;
  std::string rest = key;
  const int p      = owner_of(ps, key);
  if (p >= 0) {
    path = {"parameters", escape(ps[static_cast<std::size_t>(p)].name), "state"};
    rest = key.substr(ps[static_cast<std::size_t>(p)].name.size() + 1);
  } else {
    path = {"optimizer"};
  }
  auto parts = split(rest);
  for (std::size_t j = 0; j + 1 < parts.size(); ++j) path.push_back(escape(parts[j]));
  return {path, escape(parts.back())};
}

std::vector<hsize_t> chunk_of(const std::vector<std::int64_t>& shape, std::size_t element_bytes) {
  // Chunks of at most ~1 MiB that span the innermost dimensions first (small enough that a
  // tensor's chunks are shared among the ranks that write it).
  std::int64_t budget = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / static_cast<std::int64_t>(element_bytes));
  std::vector<hsize_t> c(shape.size());
  for (std::size_t j = shape.size(); j-- > 0;) {
    const std::int64_t e = std::min<std::int64_t>(shape[j], std::max<std::int64_t>(1, budget));
    c[j]                 = static_cast<hsize_t>(e);
    budget /= std::max<std::int64_t>(1, e);
  }
  return c;
}

// Creates a dataset of the given shape, chunked and Fletcher32-checksummed (an empty one is
// contiguous: there is nothing to checksum).
Handle create_dataset(hid_t group, const std::string& name, ScalarType dtype, const std::vector<std::int64_t>& shape,
                      const std::string& where) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(
      ok(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
         "cannot create the dataspace of " + where),
      H5Sclose);
  Handle dcpl(ok(H5Pcreate(H5P_DATASET_CREATE), "cannot create a property list"), H5Pclose);
  if (!dims.empty() && product(shape) > 0) {
    const auto chunk = chunk_of(shape, size_of(dtype));
    ok(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "cannot set the chunks of " + where);
    ok(H5Pset_fletcher32(dcpl), "cannot set the Fletcher32 filter of " + where);
  }
  ok(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "cannot set the fill time of " + where);
  return {ok(H5Dcreate2(group, name.c_str(), file_type(dtype), space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
             "cannot create dataset " + where),
          H5Dclose};
}

// A tensor one rank holds whole, written by all: its holder scatters chunk-aligned shares to
// every rank, and each rank filters and writes its own chunks in the one collective call. (HDF5
// writes a filtered dataset collectively only, one call per dataset; with the holder alone
// writing, the ranks would take turns.) False, having done nothing, when the tensor is too small
// to share or a share would exceed MPI's int counts.
template <class Prepare, class Write>
bool write_shared(const Ranks& r, hid_t d, const Entry& e, const std::map<std::string, StateTensor>& tensors,
                  const std::string& key, hid_t xfer, const std::string& what, Prepare&& prepare, Write&& write) {
  const std::int64_t n = product(e.shape), esize = static_cast<std::int64_t>(size_of(e.dtype));
  if (e.shape.empty() || n == 0 || n * esize > (std::int64_t{1} << 30)) return false;
  const auto chunk  = chunk_of(e.shape, static_cast<std::size_t>(esize));
  std::int64_t unit = 1;  // elements per chunk when chunks span all but the first dimension
  bool spans        = true;
  for (std::size_t j = 0; j < chunk.size(); ++j) {
    unit *= static_cast<std::int64_t>(chunk[j]);
    spans = spans && (j == 0 || static_cast<std::int64_t>(chunk[j]) == e.shape[j]);
  }
  if (!spans) unit = 1;
  const int size = r.size(), owner = e.parts[0].rank;
  if (n / unit < size) return false;  // fewer chunks than ranks: not worth a scatter
  auto share = [&](int k) { return k == size ? n : (n * k / size) / unit * unit; };
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  std::size_t calls = 0;
  for (int k = 0; k < size; ++k) {
    counts[static_cast<std::size_t>(k)] = static_cast<int>((share(k + 1) - share(k)) * esize);
    displs[static_cast<std::size_t>(k)] = static_cast<int>(share(k) * esize);
    calls = std::max(calls, transfers_of(e.shape, share(k), share(k + 1) - share(k)).size());
  }
  const std::int64_t lo = share(r.rank()), hi = share(r.rank() + 1);
  std::vector<unsigned char> mine;
  const unsigned char* from = nullptr;
  r.together([&] {
    prepare();
    mine.resize(static_cast<std::size_t>((hi - lo) * esize));
    if (r.rank() == owner) from = tensors.at(key).bytes();
  });
  MPI_Scatterv(from, counts.data(), displs.data(), MPI_BYTE, mine.data(), counts[static_cast<std::size_t>(r.rank())],
               MPI_BYTE, owner, r.comm->mpi_comm());
  write([&](bool fail) { transfer(true, d, e.dtype, e.shape, mine.data(), lo, hi - lo, calls, xfer, what, fail); });
  return true;
}

// ---------------------------------------------------------------------------------------------
// Configuration as flat "key -> value" text

void flatten(const Teuchos::ParameterList& l, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (auto it = l.begin(); it != l.end(); ++it) {
    const std::string key = prefix + l.name(it);
    const auto& e         = l.entry(it);
    if (e.isList()) {
      flatten(Teuchos::getValue<Teuchos::ParameterList>(e), key + "/", out);
    } else {
      std::ostringstream v;
      v.precision(17);
      v << std::boolalpha;
      e.leftshift(v, false);
      out[key] = v.str();
    }
  }
}
std::map<std::string, std::string> flat_configuration(const std::string& xml) {
  std::map<std::string, std::string> out;
  // Through koptim's reader: Teuchos' own throws its exceptions on a damaged file.
  if (!xml.empty()) flatten(*parameter_list_from_string(xml, "xml", "configuration"), "", out);
  // The keys of lr_schedule that its type does not read act on nothing and are not compared (a
  // list holds them at their defaults, and the default of total_steps and step_size was 1 before
  // it was -1, unset: a checkpoint of then is not a changed configuration).
  const auto type        = out.find("lr_schedule/type");
  const std::string kind = type == out.end() ? std::string("constant") : type->second;
  const std::string sub  = "lr_schedule/";
  for (auto it = out.lower_bound(sub); it != out.end() && it->first.compare(0, sub.size(), sub) == 0;)
    it = koptim::Impl::schedule_reads(kind, it->first.substr(sub.size())) ? std::next(it) : out.erase(it);
  return out;
}

// "key: a in the checkpoint, b now" for every key whose value differs.
std::vector<std::string> configuration_changes(const std::string& saved, const std::string& now) {
  std::vector<std::string> out;
  if (saved.empty() || now.empty()) return out;
  const auto a = flat_configuration(saved), b = flat_configuration(now);
  std::set<std::string> keys;
  for (const auto& kv : a) keys.insert(kv.first);
  for (const auto& kv : b) keys.insert(kv.first);
  for (const auto& k : keys) {
    const auto ia = a.find(k), ib = b.find(k);
    const std::string va = ia == a.end() ? "(absent)" : ia->second, vb = ib == b.end() ? "(absent)" : ib->second;
    if (va != vb) out.push_back(k + ": " + va + " in the checkpoint, " + vb + " now");
  }
  return out;
}

// The save options as bytes, to check that every rank passes the same.
std::string options_text(const SaveOptions& o) {
  Out out;
  out.u64(o.save_parameters ? 1 : 0);
  out.u64(o.metadata.integers.size());
  for (const auto& kv : o.metadata.integers) {
    out.str(kv.first);
    out.u64(static_cast<std::uint64_t>(kv.second));
  }
  out.u64(o.metadata.reals.size());
  for (const auto& kv : o.metadata.reals) {
    out.str(kv.first);
    out.bytes(&kv.second, 8);
  }
  out.u64(o.metadata.strings.size());
  for (const auto& kv : o.metadata.strings) {
    out.str(kv.first);
    out.str(kv.second);
  }
  return out.data();
}

void check_metadata(const Metadata& m) {
  auto name = [](const std::string& k) {
    if (k.empty() || k.size() > 65000 || k.find('/') != std::string::npos || k.find('\0') != std::string::npos)
      throw ConfigError("koptim::io::save_checkpoint: metadata name '" +
                        (k.size() > 80 ? k.substr(0, 80) + "...' (" + std::to_string(k.size()) + " bytes)" : k + "'") +
                        " is not allowed; names must be non-empty, at most 65000 bytes, without '/' or NUL");
  };
  std::set<std::string> seen;
  auto unique = [&](const std::string& k) {
    name(k);
    if (!seen.insert(k).second)
      throw ConfigError("koptim::io::save_checkpoint: metadata name '" + k + "' is used for two values");
  };
  for (const auto& kv : m.integers) unique(kv.first);
  for (const auto& kv : m.reals) unique(kv.first);
  for (const auto& kv : m.strings) {
    unique(kv.first);
    if (kv.second.size() > 65000 || kv.second.find('\0') != std::string::npos)
      throw ConfigError("koptim::io::save_checkpoint: metadata string '" + kv.first +
                        "' is not allowed: at most 65000 bytes, without NUL (" + std::to_string(kv.second.size()) +
                        " bytes given)");
  }
}

// A parameter's elements [offset, offset + count) in memory order where the host reads them: in
// place when it can, else copied into `copy`.
const unsigned char* parameter_bytes(const TensorRef& t, std::int64_t offset, std::int64_t count,
                                     std::vector<unsigned char>& copy) {
  StateTensor bytes;
  {
    koptim::Impl::BorrowState borrow;
    dispatch(t.dtype, [&](auto zero) {
      using T = decltype(zero);
      koptim::Impl::set_bytes(bytes, Kokkos::subview(t.flat<T>(), std::make_pair(offset, offset + count)));
    });
  }
  copy = std::move(bytes.data);
  return bytes.borrowed ? bytes.borrowed : copy.data();
}

std::string layout_of(const TensorRef& t) { return t.layout_right ? "right" : "left"; }

// Eight hex digits of this process (its host name and process id): short, so that a file name
// close to the file system's limit of 255 bytes keeps its temporary file.
std::string save_tag() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  const auto h = koptim::Impl::sha256(std::string(name) + '\0' + std::to_string(::getpid()));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", h[0], h[1], h[2], h[3]);
  return hex;
}

// fsync of a file; false on failure, with errno the failing call's.
bool sync_file(const std::string& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool good   = ::fsync(fd) == 0;
  const int failure = errno;
  ::close(fd);
  errno = failure;
  return good;
}
std::string directory_of(const std::string& p) {
  const auto s = p.rfind('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
}

// Opens a koptim checkpoint read-only, on this rank alone (no collective call: an error on one
// rank cannot leave another waiting), after checking that it is one and that its format is one
// this koptim reads.
// HDF5's signature, which koptim's checkpoints carry at offset 0 (no user block).
constexpr unsigned char hdf5_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

Handle open_checkpoint(const std::string& path, const std::string& where) {
  // Before HDF5 parses anything: the signature, and a superblock version whose metadata carries
  // checksums (2 or later). HDF5 1.10 reads a damaged file of the older format without noticing
  // and can read out of bounds doing so (found by the checkpoint fuzzer: a heap overflow inside
  // H5Aopen); with checksummed metadata a damaged byte is an error, not a parse.
  unsigned char head[9] = {};
  std::size_t got       = 0;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    got = std::fread(head, 1, sizeof head, f);
    std::fclose(f);
  } else {
    throw Error(where + "cannot open the file: " + std::strerror(errno));
  }
  if (got < sizeof head || std::memcmp(head, hdf5_signature, sizeof hdf5_signature) != 0)
    throw Error(where + "the file is not an HDF5 file (or is truncated or damaged)");
  if (head[8] < 2)
    throw Error(where + "the file's HDF5 superblock is version " + std::to_string(head[8]) +
                ", whose metadata carries no checksums; koptim reads checkpoints written in the HDF5 1.8 "
                "format or later (superblock version 2 or later, as koptim writes them), so that a damaged "
                "file is detected before it is parsed");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(where + "the file is not an HDF5 file (or is truncated or damaged)");
  // Every rank reads on its own (read-only, no collective calls): an error on one rank cannot
  // leave another waiting.
  Handle file(ok(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                 where + "cannot open the file as HDF5 (truncated or damaged?)"),
              H5Fclose);
  const std::string damaged = " (not a koptim checkpoint, or damaged)";
  auto root                 = [&](const char* name) { return read_attribute(file, name, "the file"); };
  const auto fmt            = root("format");
  if (fmt.kind != Attribute::string || fmt.s != format_name)
    throw Error(where + "the file is not a koptim checkpoint (no attribute format = \"" + format_name + "\")");
  const auto version = root("format_version");
  if (version.kind != Attribute::integer) throw Error(where + "attribute format_version is missing" + damaged);
  if (version.i > checkpoint_format_version || version.i < 1)
    throw Error(where + "the checkpoint has format version " + std::to_string(version.i) + "; this koptim (" +
                KOPTIM_VERSION_STRING + ") reads versions 1 to " + std::to_string(checkpoint_format_version) +
                (version.i > checkpoint_format_version ? " (written by a newer koptim)" : ""));
  return file;
}

Metadata read_metadata(hid_t file, const std::string& where) {
  Metadata m;
  Handle meta(ok(H5Gopen2(file, "metadata", H5P_DEFAULT), where + "cannot open /metadata (damaged?)"), H5Gclose);
  for (const auto& n : attribute_names(meta, "/metadata")) {
    const auto a = read_attribute(meta, n, "/metadata");
    if (a.kind == Attribute::integer)
      m.integers[n] = a.i;
    else if (a.kind == Attribute::real)
      m.reals[n] = a.r;
    else if (a.kind == Attribute::string)
      m.strings[n] = a.s;
    else
      throw Error(where + "metadata attribute '" + n + "' has a type koptim does not write");
  }
  return m;
}

}  // namespace

Metadata read_checkpoint_metadata(const std::string& path) {
  koptim::Impl::ScopedRegion region("koptim::io::read_checkpoint_metadata");
  QuietHdf5 quiet;
  const std::string where = "koptim::io::read_checkpoint_metadata('" + path + "'): ";
  Handle file             = open_checkpoint(path, where);
  return read_metadata(file, where);
}

// =============================================================================================

void save_checkpoint(const std::string& path, const Optimizer& opt, const SaveOptions& options) {
  koptim::Impl::ScopedRegion region("koptim::io::save_checkpoint");
  const std::string where = "koptim::io::save_checkpoint('" + path + "'): ";
  const Ranks r           = ranks_of(opt, options.comm, "save_checkpoint");
  QuietHdf5 quiet;
  const ParameterSet& ps = opt.parameters();

  // 1. Local work and the plan, agreed before any file is touched.
  OptimizerState state;
  std::map<std::string, Entry> plan;
  // Every rank writes the same groups and attributes: the options must agree as well as the path.
  const bool same_path    = !r.parallel() || r.comm->same_on_all_ranks(path);
  const bool same_options = !r.parallel() || r.comm->same_on_all_ranks(options_text(options));
  // Replicas saved over SaveOptions::comm write one file together: the groups and attributes of
  // each rank's own parameters and configuration (a hang, or another rank's configuration in the
  // file, when they differ). An optimizer with a communicator of its own was compared when built.
  const bool same_optimizer =
      !r.parallel() ||
      r.comm->same_on_all_ranks(koptim::Impl::encode_items(
          {opt.name(), koptim::Impl::encode_items(koptim::Impl::describe_parameters(opt)), opt.configuration()}));
  r.together([&] {
    if (!same_path) throw ConfigError(where + "the ranks name different files; every rank must pass the same path");
    if (!same_optimizer)
      throw ConfigError(where +
                        "the ranks save different optimizers (the optimizer, its parameters' names, shapes, "
                        "scalar types, layouts or groups, or its configuration differ); every rank must save "
                        "the same optimizer");
    if (!same_options)
      throw ConfigError(where +
                        "the ranks pass different options (save_parameters or metadata); every rank must pass "
                        "the same");
    if (path.empty()) throw ConfigError(where + "the path is empty");
    check_metadata(options.metadata);
    // The state where the host can read it in place (no copy); the optimizer does not change
    // before the save returns.
    koptim::Impl::BorrowState borrow;
    state = opt.export_state();
  });
  // The temporary file's name is this save's own (a tag of rank 0's host and process, which every
  // rank takes): two processes that save to the same path without a communicator between them (a
  // replicated optimizer saved on every rank without SaveOptions::comm) each write a whole file of
  // their own and rename it, instead of truncating and renaming one file that the other is writing.
  // The save's identity (rank 0's tag, clock and count of saves), which a load compares across
  // ranks: two files of one path that agree on everything else (node-local copies of two attempts
  // saved at the same step) differ in it.
  std::string tmp, id;
  r.together([&] {
    plan = plan_of(all_gather_bytes(r, manifest_of(state)));
    static std::atomic<std::uint64_t> saves{0};
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const auto tag = save_tag();
    const auto ns  = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
    id             = all_gather_bytes(r, tag + "-" + std::to_string(ns) + "-" + std::to_string(saves++))[0];
    tmp            = path + ".tmp-" + id.substr(0, tag.size());  // rank 0's tag (every rank's is as long)
  });

  // 2. The file, written collectively.
  int failure_after  = injected_failure;
  injected_failure   = -1;
  int datasets       = 0;
  auto count_dataset = [&] {
    if (failure_after >= 0 && datasets++ == failure_after)
      throw Error(where + "injected failure after " + std::to_string(failure_after) + " datasets (test hook)");
  };
  // A collective write's error (a full disk, a quota) may reach one rank alone: every write is
  // agreed on before the next collective, so that every rank fails the save and closes the file
  // with the others instead of leaving them in the next collective call.
  int write_failure_after = injected_write_failure;
  injected_write_failure  = -1;
  int writes              = 0;
  auto write              = [&](const auto& transfer_call) {
    const bool fail = write_failure_after >= 0 && writes++ == write_failure_after;
    r.together([&] { transfer_call(fail); });
  };
  try {
    r.together([&] {
      Handle fapl(ok(H5Pcreate(H5P_FILE_ACCESS), "cannot create a property list"), H5Pclose);
#ifdef H5_HAVE_PARALLEL
      if (r.parallel()) ok(H5Pset_fapl_mpio(fapl, r.comm->mpi_comm(), MPI_INFO_NULL), "cannot set MPI-IO");
#else
      if (r.parallel())
        throw ConfigError(where +
                          "the HDF5 koptim was built with has no MPI-IO (a parallel HDF5 is needed to save on " +
                          std::to_string(r.size()) + " ranks)");
#endif
      // The 1.8 file format: superblock version 2, object headers (with the attributes), group
      // B-trees and heaps with checksums of their own, so that damaged metadata is detected by
      // HDF5 before it parses it (the datasets carry Fletcher32; see open_checkpoint). The 1.10
      // format adds checksummed chunk indexes but made loads 1.5x slower (213 against 141 ms
      // for the 151 MB of the checkpoint benchmark); chunks are checked by Fletcher32.
      ok(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18), "cannot set the file format");
      Handle file(ok(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), where + "cannot create '" + tmp + "'"),
                  H5Fclose);
      Handle xfer(ok(H5Pcreate(H5P_DATASET_XFER), "cannot create a property list"), H5Pclose);
#ifdef H5_HAVE_PARALLEL
      if (r.parallel()) ok(H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE), "cannot set collective transfers");
#endif

      // Root attributes and the configuration.
      write_string(file, "format", format_name, "the file");
      write_int(file, "format_version", checkpoint_format_version, "the file");
      write_string(file, "koptim_version", KOPTIM_VERSION_STRING, "the file");
      write_string(file, "koptim_git_hash", koptim::git_hash(), "the file");
      write_string(file, "save_id", id, "the file");
      write_string(file, "optimizer", opt.name(), "the file");
      write_int(file, "num_ranks", r.size(), "the file");
      write_int(file, "has_parameter_values", options.save_parameters ? 1 : 0, "the file");
      {
        const std::string& xml = opt.configuration();
        Handle t               = string_type(xml.size());
        // One string, as a 1-element dataset: chunked, so it carries the checksum too.
        const hsize_t one = 1;
        Handle space(ok(H5Screate_simple(1, &one, nullptr), "cannot create a dataspace"), H5Sclose);
        Handle dcpl(ok(H5Pcreate(H5P_DATASET_CREATE), "cannot create a property list"), H5Pclose);
        ok(H5Pset_chunk(dcpl, 1, &one), "cannot set the chunks of /parameter_list");
        ok(H5Pset_fletcher32(dcpl), "cannot set the Fletcher32 filter of /parameter_list");
        Handle d(ok(H5Dcreate2(file, "parameter_list", t, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                    where + "cannot create dataset /parameter_list"),
                 H5Dclose);
        const std::string padded = xml.empty() ? std::string(1, '\0') : xml;
        write([&](bool fail) {
          ok(H5Dwrite(d, t, H5S_ALL, H5S_ALL, xfer, padded.data()), where + "cannot write /parameter_list");
          if (fail) throw Error(where + "/parameter_list: injected failure in its first write (test hook)");
        });
      }
      {
        Handle meta = group_create(file, "metadata", "/metadata");
        for (const auto& kv : options.metadata.integers) write_int(meta, kv.first, kv.second, "/metadata");
        for (const auto& kv : options.metadata.reals) write_real(meta, kv.first, kv.second, "/metadata");
        for (const auto& kv : options.metadata.strings) write_string(meta, kv.first, kv.second, "/metadata");
      }

      // Groups: /optimizer, /parameters/<name>/state and whatever the keys need below them.
      std::map<std::string, Handle> groups;
      std::function<hid_t(const std::vector<std::string>&)> group = [&](const std::vector<std::string>& p) -> hid_t {
        std::string full;
        for (const auto& s : p) full += "/" + s;
        auto it = groups.find(full);
        if (it != groups.end()) return it->second;
        const hid_t parent = p.size() == 1 ? file.get() : group(std::vector<std::string>(p.begin(), p.end() - 1));
        return groups.emplace(full, group_create(parent, p.back(), full)).first->second;
      };
      group({"optimizer"});
      group({"parameters"});
      for (std::size_t i = 0; i < ps.size(); ++i) {
        const auto& p           = ps[i];
        const std::string gname = "/parameters/" + escape(p.name);
        const hid_t g           = group({"parameters", escape(p.name)});
        write_string(g, "name", p.name, gname);
        write_int(g, "index", static_cast<std::int64_t>(i), gname);
        write_string(g, "dtype", to_string(p.param.dtype), gname);
        write_ints(g, "shape", p.param.shape, gname);
        write_string(g, "layout", layout_of(p.param), gname);
        // The parameter group, and the values it sets itself (absent: the list's), so that a load
        // can report a group's change as it reports the list's.
        const auto& grp = ps.groups()[static_cast<std::size_t>(p.group)];
        write_string(g, "group", grp.name, gname);
        write_int(g, "group_options", 1, gname);
        if (grp.options.lr) write_real(g, "group_lr", *grp.options.lr, gname);
        if (grp.options.weight_decay) write_real(g, "group_weight_decay", *grp.options.weight_decay, gname);
        group({"parameters", escape(p.name), "state"});
        if (!options.save_parameters) continue;
        // Every rank holds the values: each writes an equal share.
        const std::int64_t n = p.param.size;
        auto share           = [&](int k) { return n * k / r.size(); };
        std::size_t calls    = 0;
        for (int k = 0; k < r.size(); ++k)
          calls = std::max(calls, transfers_of(p.param.shape, share(k), share(k + 1) - share(k)).size());
        Handle d              = create_dataset(g, "value", p.param.dtype, p.param.shape, gname + "/value");
        const std::int64_t lo = share(r.rank()), hi = share(r.rank() + 1);
        std::vector<unsigned char> copy;
        unsigned char* bytes = nullptr;
        r.together([&] {
          count_dataset();
          bytes = const_cast<unsigned char*>(parameter_bytes(p.param, lo, hi - lo, copy));
        });
        write([&](bool fail) {
          transfer(true, d, p.param.dtype, p.param.shape, bytes, lo, hi - lo, calls, xfer, where + gname + "/value",
                   fail);
        });
      }

      // The state entries, in key order on every rank.
      for (const auto& kv : plan) {
        const auto loc = location_of(ps, kv.first);
        const hid_t g  = group(loc.first);
        std::string gname;
        for (const auto& s : loc.first) gname += "/" + s;
        const Entry& e = kv.second;
        if (e.kind == Entry::integer) {
          write_int(g, loc.second, e.i, gname);
          continue;
        }
        if (e.kind == Entry::real) {
          write_real(g, loc.second, e.r, gname);
          continue;
        }
        const std::string dname = gname + "/" + loc.second;
        Handle d                = create_dataset(g, loc.second, e.dtype, e.shape, dname);
        if (r.parallel() && e.parts.size() == 1 &&
            write_shared(r, d, e, state.tensors, kv.first, xfer, where + dname, count_dataset, write))
          continue;
        const Part* mine  = nullptr;
        std::size_t calls = 0;
        for (const auto& p : e.parts) {
          if (p.rank == r.rank()) mine = &p;
          calls = std::max(calls, transfers_of(e.shape, p.offset, p.count).size());
        }
        // (The tensor is only read; HDF5's write takes a non-const pointer.)
        unsigned char* data = nullptr;
        r.together([&] {
          count_dataset();
          if (mine) data = const_cast<unsigned char*>(state.tensors.at(kv.first).bytes());
        });
        write([&](bool fail) {
          transfer(true, d, e.dtype, e.shape, data, mine ? mine->offset : 0, mine ? mine->count : 0, calls, xfer,
                   where + dname, fail);
        });
      }
      groups.clear();
      // Every rank's writes to stable storage (with MPI-IO an MPI_File_sync on every rank, which
      // HDF5 skips when it closes a file): rank 0's fsync below reaches only what its own node
      // wrote on a parallel file system.
      r.together([&] { ok(H5Fflush(file, H5F_SCOPE_GLOBAL), where + "cannot flush '" + tmp + "' to disk"); });
      if (file.close() < 0) throw Error(where + "cannot close '" + tmp + "' (HDF5: " + hdf5_message() + ")");
    });

    // 3. Durable, then renamed over the target.
    r.together([&] {
      if (r.rank() != 0) return;
      if (!sync_file(tmp)) throw Error(where + "cannot sync '" + tmp + "' to disk: " + std::strerror(errno));
      if (std::rename(tmp.c_str(), path.c_str()) != 0)
        throw Error(where + "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
      // The rename itself, durable. A directory that cannot be opened for reading (write-only) or
      // whose file system cannot sync one (EINVAL) is left as it is; an error of the sync itself
      // (EIO) is reported, after the rename: the file at path is then the new one.
      const std::string dir = directory_of(path);
      const int fd          = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
      if (fd >= 0) {
        const int synced = ::fsync(fd), failure = errno;
        ::close(fd);
        if (synced != 0 && failure != EINVAL)
          throw Error(where + "wrote '" + path + "' (the new file is in place) but cannot sync its directory '" + dir +
                      "' to disk: " + std::strerror(failure) + "; the rename may not survive a crash of the machine");
      }
    });
  } catch (...) {
    // Every handle is closed by now; the previous file at path is untouched.
    if (r.rank() == 0) std::remove(tmp.c_str());
    throw;
  }
}

// =============================================================================================

LoadReport load_checkpoint(const std::string& path, Optimizer& opt, const LoadOptions& options) {
  koptim::Impl::ScopedRegion region("koptim::io::load_checkpoint");
  const std::string where = "koptim::io::load_checkpoint('" + path + "'): ";
  const Ranks r           = ranks_of(opt, options.comm, "load_checkpoint");
  QuietHdf5 quiet;
  const ParameterSet& ps = opt.parameters();

  LoadReport report;
  OptimizerState state;
  std::string save_id;
  std::vector<std::vector<unsigned char> > values(ps.size());
  const bool same_path = !r.parallel() || r.comm->same_on_all_ranks(path + (options.load_parameters ? "\1" : "\0"));
  r.together([&] {
    if (!same_path)
      throw ConfigError(where +
                        "the ranks name different files or pass different load_parameters; every rank must "
                        "pass the same");
    Handle file               = open_checkpoint(path, where);
    const std::string damaged = " (not a koptim checkpoint, or damaged)";
    auto root                 = [&](const char* name) { return read_attribute(file, name, "the file"); };
    const auto name = root("optimizer"), nranks = root("num_ranks"), kv = root("koptim_version"),
               has_values = root("has_parameter_values");
    if (name.kind != Attribute::string || nranks.kind != Attribute::integer || kv.kind != Attribute::string ||
        has_values.kind != Attribute::integer)
      throw Error(where + "the file's root attributes are incomplete" + damaged);
    if (name.s != opt.name())
      throw StateError(where + "the checkpoint holds the state of optimizer '" + name.s + "', not '" + opt.name() +
                       "'");
    if (has_values.i != 0 && has_values.i != 1)
      throw Error(where + "the file's root attribute has_parameter_values is " + std::to_string(has_values.i) +
                  ", not 0 or 1" + damaged);
    if (options.load_parameters && has_values.i == 0)
      throw ConfigError(where +
                        "the file holds no parameter values (it was saved with SaveOptions::save_parameters = "
                        "false), and LoadOptions::load_parameters is true; pass load_parameters = false to restore "
                        "the optimizer alone");
    if (nranks.i < 1 || nranks.i > std::numeric_limits<int>::max())
      throw Error(where + "the file's root attribute num_ranks is " + std::to_string(nranks.i) +
                  ", not a number of ranks (1 to 2^31 - 1)" + damaged);
    report.written_on_ranks = static_cast<int>(nranks.i);
    report.koptim_version   = kv.s;
    // Absent from files of koptim before it wrote one (the same format otherwise).
    if (H5Aexists(file, "save_id") > 0) {
      const auto id = root("save_id");
      if (id.kind != Attribute::string)
        throw Error(where + "the file's root attribute save_id is not a string" + damaged);
      save_id = id.s;
    }

    std::string saved_xml;
    {
      Handle d(ok(H5Dopen2(file, "parameter_list", H5P_DEFAULT), where + "cannot open /parameter_list" + damaged),
               H5Dclose);
      Handle t(ok(H5Dget_type(d), where + "cannot read /parameter_list"), H5Tclose);
      if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0)
        throw Error(where + "/parameter_list is not a fixed-length string" + damaged);
      // One string, as written: the read's buffer holds one element.
      Handle space(ok(H5Dget_space(d), where + "cannot read the shape of /parameter_list"), H5Sclose);
      hsize_t count = 0;
      if (H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, &count, nullptr) != 1 ||
          count != 1)
        throw Error(where + "/parameter_list is not one string" + damaged);
      saved_xml.assign(H5Tget_size(t), '\0');
      check_chunks(d, where + "/parameter_list");
      ok(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &saved_xml[0]), where + "cannot read /parameter_list");
      saved_xml.erase(std::find(saved_xml.begin(), saved_xml.end(), '\0'), saved_xml.end());
    }
    report.metadata = read_metadata(file, where);

    // The parameters: the same names, scalar types, shapes and layouts.
    Handle params(ok(H5Gopen2(file, "parameters", H5P_DEFAULT), where + "cannot open /parameters" + damaged), H5Gclose);
    std::set<std::string> seen, group_changes;
    std::vector<std::pair<int, std::string> > groups;  // (parameter index here, group name)
    for (const auto& m : members(params, "/parameters")) {
      const std::string gname = "/parameters/" + m.first;
      if (!m.second) throw Error(where + gname + " is not a group" + damaged);
      Handle g(ok(H5Gopen2(params, m.first.c_str(), H5P_DEFAULT), where + "cannot open " + gname), H5Gclose);
      const auto pname = read_attribute(g, "name", gname), dtype = read_attribute(g, "dtype", gname),
                 shape = read_attribute(g, "shape", gname), layout = read_attribute(g, "layout", gname);
      if (pname.kind != Attribute::string || dtype.kind != Attribute::string || shape.kind != Attribute::integers ||
          layout.kind != Attribute::string)
        throw Error(where + "the attributes of " + gname + " are incomplete" + damaged);
      const int i = ps.find(pname.s);
      if (i < 0)
        throw ShapeError(where + "the checkpoint has parameter '" + pname.s +
                         "', which this optimizer's ParameterSet does not have");
      const auto& p = ps[static_cast<std::size_t>(i)];
      if (dtype.s != to_string(p.param.dtype) || shape.v != p.param.shape || layout.s != layout_of(p.param))
        throw ShapeError(where + "parameter '" + p.name + "' is " + dtype.s + " " + shape_string(shape.v) + " Layout" +
                         (layout.s == "left" ? "Left" : "Right") + " in the checkpoint, " + to_string(p.param.dtype) +
                         " " + shape_string(p.param.shape) + " Layout" + (p.param.layout_right ? "Right" : "Left") +
                         " here");
      if (!seen.insert(pname.s).second)
        throw Error(where + gname + " holds parameter '" + pname.s + "', as an earlier group does" + damaged);
      groups.emplace_back(i, m.first);
      // Its parameter group then and now (files of an earlier koptim hold the name only).
      const auto& now = ps.groups()[static_cast<std::size_t>(p.group)];
      auto optional   = [&](const char* name, Attribute::Kind kind) {
        if (H5Aexists(g, name) <= 0) return Attribute{};
        const auto a = read_attribute(g, name, gname);
        if (a.kind != kind) throw Error(where + "attribute '" + name + "' of " + gname + " has another type" + damaged);
        return a;
      };
      // A group's own values are compared where the parameter stayed in it (a move is reported
      // as such).
      const auto was   = optional("group", Attribute::string);
      const bool moved = was.kind == Attribute::string && was.s != now.name;
      if (moved)
        group_changes.insert("parameter '" + p.name + "': group '" + was.s + "' in the checkpoint, '" + now.name +
                             "' now");
      if (!moved && optional("group_options", Attribute::integer).kind == Attribute::integer) {
        const auto own = [&](const char* name) {
          const auto a = optional(name, Attribute::real);
          return a.kind == Attribute::real ? std::optional<double>(a.r) : std::nullopt;
        };
        const auto shown = [](const std::optional<double>& v) {
          return v ? koptim::Impl::real_string(*v) : std::string("(the list's)");
        };
        const auto lr = own("group_lr"), wd = own("group_weight_decay");
        if (lr != now.options.lr)
          group_changes.insert("group '" + now.name + "' lr: " + shown(lr) + " in the checkpoint, " +
                               shown(now.options.lr) + " now");
        if (wd != now.options.weight_decay)
          group_changes.insert("group '" + now.name + "' weight_decay: " + shown(wd) + " in the checkpoint, " +
                               shown(now.options.weight_decay) + " now");
      }
    }
    for (const auto& p : ps.parameters())
      if (!seen.count(p.name))
        throw ShapeError(where + "this optimizer's parameter '" + p.name + "' is not in the checkpoint");

    // The state entries this rank keeps.
    state.optimizer = name.s;
    auto take       = [&](hid_t g, const std::string& gname, const std::string& key_prefix) {
      std::function<void(hid_t, const std::string&, const std::string&)> walk = [&](hid_t at,
                                                                                    const std::string& at_name,
                                                                                    const std::string& prefix) {
        for (const auto& n : attribute_names(at, at_name)) {
          const std::string key = prefix + unescape(n);
          if (opt.state_part(key).kind == Optimizer::StatePart::none) continue;
          const auto a = read_attribute(at, n, at_name);
          if (a.kind == Attribute::integer)
            state.integers[key] = a.i;
          else if (a.kind == Attribute::real)
            state.reals[key] = a.r;
          else
            throw Error(where + "state attribute " + at_name + "/" + n + " is neither an integer nor a real" + damaged);
        }
        for (const auto& m : members(at, at_name)) {
          const std::string key = prefix + unescape(m.first), mname = at_name + "/" + m.first;
          if (m.second) {
            Handle sub(ok(H5Gopen2(at, m.first.c_str(), H5P_DEFAULT), where + "cannot open " + mname), H5Gclose);
            walk(sub, mname, key + "/");
            continue;
          }
          const auto part = opt.state_part(key);
          if (part.kind == Optimizer::StatePart::none) continue;
          Handle d(ok(H5Dopen2(at, m.first.c_str(), H5P_DEFAULT), where + "cannot open " + mname), H5Dclose);
          Handle type(ok(H5Dget_type(d), where + "cannot read the type of " + mname), H5Tclose);
          Handle space(ok(H5Dget_space(d), where + "cannot read the shape of " + mname), H5Sclose);
          StateTensor t;
          if (!scalar_type_of_h5(type, t.dtype))
            throw Error(where + "dataset " + mname + " has a type koptim does not write" + damaged);
          const int rank = H5Sget_simple_extent_ndims(space);
          ok(rank, where + "cannot read the shape of " + mname);
          std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
          if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
          const std::vector<std::int64_t> shape(dims.begin(), dims.end());
          const std::int64_t n = product(shape);
          std::int64_t offset = 0, count = n;
          if (part.kind == Optimizer::StatePart::slice) {
            if (part.offset < 0 || part.count < 0 || part.offset + part.count > n)
              throw StateError(where + "state tensor '" + key + "' has shape " + shape_string(shape) +
                                     " in the checkpoint; this rank keeps its elements [" + std::to_string(part.offset) +
                                     ", " + std::to_string(part.offset + part.count) + ")");
            offset   = part.offset;
            count    = part.count;
            t.shape  = {count};
            t.whole  = shape;
            t.offset = offset;
          } else {
            t.shape = shape;
          }
          t.data.resize(static_cast<std::size_t>(count) * size_of(t.dtype));
          transfer(false, d, t.dtype, shape, t.data.data(), offset, count, 0, H5P_DEFAULT, where + "dataset " + mname);
          state.tensors[key] = std::move(t);
        }
      };
      walk(g, gname, key_prefix);
    };
    {
      Handle g(ok(H5Gopen2(file, "optimizer", H5P_DEFAULT), where + "cannot open /optimizer" + damaged), H5Gclose);
      take(g, "/optimizer", "");
    }
    for (const auto& gp : groups) {
      const std::string gname = "/parameters/" + gp.second;
      Handle g(ok(H5Gopen2(params, (gp.second + "/state").c_str(), H5P_DEFAULT),
                  where + "cannot open " + gname + "/state" + damaged),
               H5Gclose);
      take(g, gname + "/state", ps[static_cast<std::size_t>(gp.first)].name + "/");
    }

    // Does it fit? A structural mismatch names the configuration keys that differ.
    std::vector<std::string> changes;
    try {
      changes = configuration_changes(saved_xml, opt.configuration());
    } catch (const ConfigError& e) {
      throw StateError(where + "the checkpoint's configuration cannot be read (a damaged file?): " + e.what());
    }
    try {
      opt.check_state(state);
    } catch (const StateError& e) {
      std::string keys;
      for (const auto& c : changes) keys += (keys.empty() ? "" : "; ") + c;
      throw StateError(where + "the checkpoint's state does not fit this optimizer" +
                       (keys.empty() ? std::string(": ")
                                     : " built with another configuration (" + keys + "), which changes the state: ") +
                       e.what());
    }
    changes.insert(changes.end(), group_changes.begin(), group_changes.end());
    report.configuration_changes = changes;
    if (!options.allow_configuration_changes) {
      // Without both parameter lists the keys cannot be compared: refused rather than passed.
      if (saved_xml.empty() || opt.configuration().empty())
        throw ConfigError(where + "LoadOptions::allow_configuration_changes is false, and " +
                          (opt.configuration().empty() ? std::string("this optimizer was")
                                                       : std::string("the checkpoint's optimizer was")) +
                          " built from option structs, not by koptim::create: it has no parameter list to compare");
      // Keys that only place the work on the ranks (the results are bitwise those of one
      // process) may differ: a run written on N ranks continues on M.
      static const std::set<std::string> placement{"shard_state", "distributed_cost_model", "num_trainers_per_group"};
      std::string keys;
      for (const auto& c : changes)
        if (!placement.count(c.substr(0, c.find(':')))) keys += (keys.empty() ? "" : "; ") + c;
      if (!keys.empty())
        throw ConfigError(where + "the checkpoint was written with another configuration (" + keys +
                          "), and LoadOptions::allow_configuration_changes is false");
    }

    // The parameter values.
    report.parameters_loaded = options.load_parameters;
    if (report.parameters_loaded) {
      for (const auto& gp : groups) {
        const auto& p           = ps[static_cast<std::size_t>(gp.first)];
        const std::string dname = "/parameters/" + gp.second + "/value";
        Handle d(
            ok(H5Dopen2(params, (gp.second + "/value").c_str(), H5P_DEFAULT), where + "cannot open " + dname + damaged),
            H5Dclose);
        Handle type(ok(H5Dget_type(d), where + "cannot read the type of " + dname), H5Tclose);
        Handle space(ok(H5Dget_space(d), where + "cannot read the shape of " + dname), H5Sclose);
        ScalarType dt;
        std::vector<hsize_t> dims(p.param.shape.size());
        if (!scalar_type_of_h5(type, dt) || dt != p.param.dtype ||
            H5Sget_simple_extent_ndims(space) != static_cast<int>(dims.size()))
          throw ShapeError(where + "dataset " + dname + " does not have parameter '" + p.name +
                           "''s scalar type and rank");
        if (!dims.empty()) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
        if (std::vector<std::int64_t>(dims.begin(), dims.end()) != p.param.shape)
          throw ShapeError(where + "dataset " + dname + " does not have parameter '" + p.name + "''s shape " +
                           shape_string(p.param.shape));
        auto& v = values[static_cast<std::size_t>(gp.first)];
        v.resize(p.param.bytes());
        if (p.param.size > 0) check_chunks(d, where + "dataset " + dname);
        if (p.param.size > 0)
          ok(H5Dread(d, memory_type(p.param.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
             where + "cannot read dataset " + dname + " (a failed Fletcher32 checksum means the file is corrupted)");
      }
    }
    if (file.close() < 0) throw Error(where + "cannot close the file");
  });

  // Every rank read the same file: ranks that find different files behind one path (a copy of
  // its own on each node's file system, a file replaced during the load) would restore different
  // states. The file's step, skipped steps, metadata and writer compared (one collective).
  if (r.parallel()) {
    SaveOptions read;
    read.metadata = report.metadata;
    std::ostringstream seen;
    seen << options_text(read) << '\n' << report.written_on_ranks << '\n' << report.koptim_version << '\n' << save_id;
    for (const char* k : {"step", "skipped_steps"}) {
      const auto it = state.integers.find(k);
      seen << '\n' << (it == state.integers.end() ? -1 : it->second);
    }
    if (!r.comm->same_on_all_ranks(seen.str())) {
      const auto it = state.integers.find("step");
      throw Error(where + "the ranks read different files at this path (a copy of its own on each node, or the " +
                  "file replaced during the load?); this rank (" + std::to_string(r.rank()) + ") read step " +
                  (it == state.integers.end() ? std::string("(none)") : std::to_string(it->second)) + ", written on " +
                  std::to_string(report.written_on_ranks) + " ranks; nothing was changed");
    }
  }

  // Every rank has checked everything: now change. What can still fail here (memory for the
  // imported state's tables, a device copy) is agreed on too, so that no rank trains on while
  // another has thrown (no collective inside: import_state has none); the optimizer is then
  // interrupted on every rank, since one rank holds a state that is in part the file's.
  try {
    r.together([&] {
      opt.import_state(state);
      if (!report.parameters_loaded) return;
      for (std::size_t i = 0; i < ps.size(); ++i) {
        const auto& t = ps[i].param;
        if (t.size == 0) continue;
        dispatch(t.dtype, [&](auto zero) {
          using T = decltype(zero);
          Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged> > h(
              reinterpret_cast<const T*>(values[i].data()), t.size);
          Kokkos::deep_copy(t.flat<T>(), h);
        });
      }
    });
  } catch (const std::exception& e) {
    koptim::Impl::interrupt(opt, "load_checkpoint", e.what());
    throw;
  }
  report.step = opt.step_count();
  return report;
}

#endif

}  // namespace io
}  // namespace koptim
