#include "koptim_Check.hpp"

#include "../config/koptim_KeyRanges.hpp"
#include <koptim/core/koptim_Schedule.hpp>
#include <koptim/core/koptim_Error.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace koptim {

namespace {
void require(bool ok, const std::string& what) {
  if (!ok) throw ConfigError("koptim::LRSchedule: " + what);
}
}  // namespace

LRSchedule LRSchedule::cosine(std::int64_t total_steps, double min_lr_factor) {
  Impl::require("LRSchedule", "total_steps", static_cast<double>(total_steps), Impl::ranges::total_steps, true);
  Impl::require("LRSchedule", "min_lr_factor", min_lr_factor, Impl::ranges::min_lr_factor);
  LRSchedule s;
  s.decay_         = Decay::cosine;
  s.total_steps_   = total_steps;
  s.min_lr_factor_ = min_lr_factor;
  return s;
}

LRSchedule LRSchedule::linear(std::int64_t total_steps, double min_lr_factor) {
  LRSchedule s = cosine(total_steps, min_lr_factor);
  s.decay_     = Decay::linear;
  return s;
}

LRSchedule LRSchedule::step(std::int64_t step_size, double gamma) {
  Impl::require("LRSchedule", "step_size", static_cast<double>(step_size), Impl::ranges::step_size, true);
  Impl::require("LRSchedule", "gamma", gamma, Impl::ranges::gamma);
  LRSchedule s;
  s.decay_     = Decay::step;
  s.step_size_ = step_size;
  s.gamma_     = gamma;
  return s;
}

LRSchedule LRSchedule::with_warmup(std::int64_t warmup_steps) const {
  Impl::require("LRSchedule", "warmup_steps", static_cast<double>(warmup_steps), Impl::ranges::warmup_steps, true);
  if (decay_ == Decay::cosine || decay_ == Decay::linear) {
    require(warmup_steps < total_steps_, "warmup_steps = " + std::to_string(warmup_steps) +
                                             " must be smaller than total_steps = " + std::to_string(total_steps_));
  }
  LRSchedule s    = *this;
  s.warmup_steps_ = warmup_steps;
  return s;
}

double LRSchedule::factor(std::int64_t t) const {
  if (t < 1) t = 1;
  if (t <= warmup_steps_) return static_cast<double>(t) / static_cast<double>(warmup_steps_);
  const std::int64_t after = t - warmup_steps_;  // 1 on the first step after warmup
  switch (decay_) {
    case Decay::constant:
      return 1.0;
    case Decay::cosine:
    case Decay::linear: {
      const double p = std::min(1.0, static_cast<double>(after) / static_cast<double>(total_steps_ - warmup_steps_));
      const double shape = decay_ == Decay::cosine ? 0.5 * (1.0 + std::cos(M_PI * p)) : 1.0 - p;
      return min_lr_factor_ + (1.0 - min_lr_factor_) * shape;
    }
    case Decay::step:
      return std::pow(gamma_, static_cast<double>((after - 1) / step_size_));
  }
  return 1.0;
}

std::string LRSchedule::describe() const {
  std::ostringstream s;
  if (warmup_steps_ > 0) s << "linear warmup over " << warmup_steps_ << " steps, then ";
  switch (decay_) {
    case Decay::constant:
      s << "constant";
      break;
    case Decay::cosine:
      s << "cosine decay to " << Impl::real_string(min_lr_factor_) << " at step " << total_steps_;
      break;
    case Decay::linear:
      s << "linear decay to " << Impl::real_string(min_lr_factor_) << " at step " << total_steps_;
      break;
    case Decay::step:
      s << "step decay by " << Impl::real_string(gamma_) << " every " << step_size_ << " steps";
      break;
  }
  return s.str();
}

}  // namespace koptim
