#include <koptim/core/koptim_Check.hpp>
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
  require(total_steps >= 1, "total_steps = " + std::to_string(total_steps) + " is not allowed; allowed: >= 1");
  require(min_lr_factor >= 0.0 && min_lr_factor <= 1.0,
          "min_lr_factor = " + Impl::real_string(min_lr_factor) + " is not allowed; allowed: [0, 1]");
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
  require(step_size >= 1, "step_size = " + std::to_string(step_size) + " is not allowed; allowed: >= 1");
  require(gamma > 0.0 && gamma <= 1.0, "gamma = " + Impl::real_string(gamma) + " is not allowed; allowed: (0, 1]");
  LRSchedule s;
  s.decay_     = Decay::step;
  s.step_size_ = step_size;
  s.gamma_     = gamma;
  return s;
}

LRSchedule LRSchedule::with_warmup(std::int64_t warmup_steps) const {
  require(warmup_steps >= 0, "warmup_steps = " + std::to_string(warmup_steps) + " is not allowed; allowed: >= 0");
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
      s << "cosine decay to " << min_lr_factor_ << " at step " << total_steps_;
      break;
    case Decay::linear:
      s << "linear decay to " << min_lr_factor_ << " at step " << total_steps_;
      break;
    case Decay::step:
      s << "step decay by " << gamma_ << " every " << step_size_ << " steps";
      break;
  }
  return s.str();
}

}  // namespace koptim
