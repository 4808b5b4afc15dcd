// Checkpoint and restart: the parameters, the complete optimizer state and the user's own
// metadata in one HDF5 file, written collectively by every rank, loadable on any number of
// ranks.
//
//   koptim::io::SaveOptions o;
//   o.metadata.integers["epoch"] = epoch;
//   koptim::io::save_checkpoint("run.h5", *opt, o);          // collective over opt's ranks
//   ...
//   auto report = koptim::io::load_checkpoint("run.h5", *opt);  // a new process, any ranks
//   epoch       = report.metadata.integers.at("epoch");
//
// - One file, written by every rank of the optimizer's communicator (or SaveOptions::comm) at
//   once through MPI-IO; state is stored by parameter and block, never by rank, so a file
//   written on N ranks loads on M: each rank reads only the blocks, tensors or slices it keeps
//   (Optimizer::state_part).
// - Atomic: the file is written as "<path>.tmp-<tag>" beside the target (eight hex digits of
//   rank 0's host and process), flushed to disk on every rank and renamed over the target only
//   once every rank has written its part; an error or a crash during a save leaves the previous
//   file untouched (but for an error syncing the directory after the rename: docs/checkpoint.md).
// - Every dataset carries HDF5's Fletcher32 checksum; a corrupted dataset is detected at load.
// - A load either restores everything (the optimizer's state, the parameters' values) or throws
//   a koptim::Error naming the problem, on every rank, with nothing changed.
// - The layout (docs/checkpoint.md) is plain HDF5: h5dump and h5py read it without koptim.
//
// Without HDF5 (configured with koptim_ENABLE_HDF5=OFF or not found) both functions throw
// ConfigError saying so; KOPTIM_ENABLE_HDF5 in koptim_config.hpp tells at compile time.
#ifndef KOPTIM_IO_CHECKPOINT_HPP
#define KOPTIM_IO_CHECKPOINT_HPP

#include <koptim/core/koptim_Optimizer.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace koptim {
namespace comm {
class Communicator;
}

namespace io {

// The version of the file layout this koptim writes; it reads this version and older ones.
constexpr int checkpoint_format_version = 1;

// The user's own values (an epoch, a data-loader position, RNG seeds), stored and read back
// exactly. Names must be non-empty, at most 65000 bytes, without '/' or NUL; strings at most
// 65000 bytes, no NUL.
struct Metadata {
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> reals;
  std::map<std::string, std::string> strings;
  bool operator==(const Metadata& o) const {
    return integers == o.integers && reals == o.reals && strings == o.strings;
  }
};

struct SaveOptions {
  // Store the parameters' values (false: the optimizer's state only, for codes that write their
  // model themselves).
  bool save_parameters = true;
  Metadata metadata;
  // The ranks that save together when the optimizer keeps no communicator of its own
  // (replicated data-parallel training): every rank must call save_checkpoint, and one file is
  // written. When the optimizer has a communicator it saves over that one: the options may name
  // it again, or a duplicate of it (the same ranks in the same order), or none; any other is
  // refused with ConfigError on every rank, nothing written.
  std::shared_ptr<comm::Communicator> comm;
};

struct LoadOptions {
  // Restore the parameters' values (the file must hold them: one saved with
  // SaveOptions::save_parameters = false is refused with ConfigError, nothing changed); false
  // restores the optimizer alone and leaves the parameters as they are.
  bool load_parameters = true;
  // As SaveOptions::comm (another communicator than the optimizer's: refused, nothing changed).
  std::shared_ptr<comm::Communicator> comm;
  // false: a checkpoint written with another configuration (any entry LoadReport's
  // configuration_changes would list: a key of the parameter list, a parameter's group or a
  // group's lr or weight_decay) is refused with ConfigError naming the changes, nothing changed;
  // for resuming a run that must continue exactly as it was. The keys that only place the work on
  // the ranks (shard_state, distributed_cost_model, num_trainers_per_group: the results are
  // bitwise those of one process) may still differ, so that a run continues on other ranks. The
  // keys are compared only between optimizers built by koptim::create (one built from option
  // structs has no parameter list): false with such an optimizer on either side is refused.
  bool allow_configuration_changes = true;
};

struct LoadReport {
  Metadata metadata;
  bool parameters_loaded = false;
  int written_on_ranks   = 1;  // the number of ranks that wrote the file
  std::int64_t step      = 0;  // the optimizer's step count after the load
  std::string koptim_version;  // of the koptim that wrote the file
  // Keys of the parameter list whose value differs between the file and this optimizer without
  // changing the state's structure (for example "lr: 0.01 in the checkpoint, 0.02 now"), then
  // parameters in another group and groups with another lr or weight_decay of their own
  // ("group 'no_decay' weight_decay: 0 in the checkpoint, (the list's) now"); this optimizer's
  // values are used.
  std::vector<std::string> configuration_changes;
};

// Writes the checkpoint (collective: every rank passes the same path and options, metadata
// included; ranks that do not are refused with ConfigError). Throws koptim::Error on every rank,
// the previous file at `path` untouched, when anything fails.
void save_checkpoint(const std::string& path, const Optimizer& opt, const SaveOptions& options = {});

// Restores the optimizer's state and (by default) the parameters from a checkpoint
// (collective). Refused with a koptim::Error naming what is wrong, nothing changed: a missing,
// truncated, corrupted or non-HDF5 file, a newer format, another optimizer kind, parameters with
// other names, shapes, scalar types or layouts, a configuration that changes the state's
// structure (the message names the keys and both values), ranks that name different files.
LoadReport load_checkpoint(const std::string& path, Optimizer& opt, const LoadOptions& options = {});

// The metadata of a checkpoint alone (for example to check that it belongs to this run before
// loading it), read by the calling process only. Throws koptim::Error for a file that is not a
// readable koptim checkpoint.
Metadata read_checkpoint_metadata(const std::string& path);

namespace Impl {
// Test hook: the next save on the calling rank fails after writing this many datasets (called on
// every rank: as a disk error would; on one: as that rank's memory would); negative: never. Reset
// after it fires.
void inject_save_failure_after(int datasets);
// Test hook: the next save on the calling rank fails in the first of its collective write calls
// of dataset `datasets` (0 the first; /parameter_list is one), as a full disk would on one node
// (a rank's share of a dataset may take several calls, which the other ranks make too); negative:
// never. Reset after it fires.
void inject_save_write_failure_after(int datasets);
}  // namespace Impl

}  // namespace io
}  // namespace koptim

#endif
