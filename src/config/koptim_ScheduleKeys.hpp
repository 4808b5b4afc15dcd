// The keys of lr_schedule that only some schedule types read. A key that its list's type does not
// read acts on nothing: the factory refuses it unless it holds its default, and a checkpoint does
// not compare it as a configuration change.
#ifndef KOPTIM_SRC_CONFIG_SCHEDULEKEYS_HPP
#define KOPTIM_SRC_CONFIG_SCHEDULEKEYS_HPP

#include <algorithm>
#include <string>
#include <vector>

namespace koptim {
namespace Impl {

// The schedule types that read key; empty for the keys that every type reads (type,
// warmup_steps).
inline std::vector<std::string> schedule_key_readers(const std::string& key) {
  if (key == "total_steps" || key == "min_lr_factor") return {"cosine", "linear"};
  if (key == "step_size" || key == "gamma") return {"step"};
  return {};
}

// Whether lr_schedule type `type` reads key.
inline bool schedule_reads(const std::string& type, const std::string& key) {
  const auto readers = schedule_key_readers(key);
  return readers.empty() || std::find(readers.begin(), readers.end(), type) != readers.end();
}

// The key that gives the length of schedule type `type` (total_steps for cosine and linear,
// step_size for step); it has no default that could be right. Empty for the types without one.
inline std::string schedule_length_key(const std::string& type) {
  for (const char* key : {"total_steps", "step_size"})
    if (!schedule_key_readers(key).empty() && schedule_reads(type, key)) return key;
  return {};
}

}  // namespace Impl
}  // namespace koptim

#endif
