// Learning-rate schedules: a factor that multiplies every group's learning rate at step t
// (t = 1 for the first step). A schedule is an optional linear warmup followed by one decay:
//
//   constant:  1
//   cosine:    min_lr_factor + (1 - min_lr_factor) * (1 + cos(pi * p)) / 2
//   linear:    min_lr_factor + (1 - min_lr_factor) * (1 - p)
//   step:      gamma ^ floor((t - warmup_steps - 1) / step_size)
//
// with p = clamp((t - warmup_steps) / (total_steps - warmup_steps), 0, 1). During warmup
// (t <= warmup_steps) the factor is t / warmup_steps. "Warmup then cosine" is
// LRSchedule::cosine(total, min).with_warmup(w). Against torch.optim's schedulers stepped after
// each optimizer step: step decay and warmup give their factors; cosine and linear decay are one
// step ahead (step t takes what torch's step t + 1 takes; docs/parameters.md).
#ifndef KOPTIM_CORE_SCHEDULE_HPP
#define KOPTIM_CORE_SCHEDULE_HPP

#include <cstdint>
#include <string>

namespace koptim {

class LRSchedule {
 public:
  enum class Decay { constant, cosine, linear, step };

  LRSchedule() = default;
  static LRSchedule constant() { return LRSchedule(); }
  static LRSchedule linear_warmup(std::int64_t warmup_steps) { return LRSchedule().with_warmup(warmup_steps); }
  static LRSchedule cosine(std::int64_t total_steps, double min_lr_factor = 0.0);
  static LRSchedule linear(std::int64_t total_steps, double min_lr_factor = 0.0);
  static LRSchedule step(std::int64_t step_size, double gamma);
  // A copy of this schedule that first warms up linearly over warmup_steps steps.
  LRSchedule with_warmup(std::int64_t warmup_steps) const;

  // The factor at step t >= 1.
  double factor(std::int64_t t) const;

  Decay decay() const { return decay_; }
  std::int64_t warmup_steps() const { return warmup_steps_; }
  std::int64_t total_steps() const { return total_steps_; }
  double min_lr_factor() const { return min_lr_factor_; }
  std::int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }
  // In words, every number exactly (its shortest form that reads back the same: ranks compare it).
  std::string describe() const;

 private:
  Decay decay_               = Decay::constant;
  std::int64_t warmup_steps_ = 0;
  std::int64_t total_steps_  = 1;
  double min_lr_factor_      = 0.0;
  std::int64_t step_size_    = 1;
  double gamma_              = 1.0;
};

}  // namespace koptim

#endif
