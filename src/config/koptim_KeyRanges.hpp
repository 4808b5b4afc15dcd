// The allowed range of every real and integer key of koptim's parameter lists, declared once:
// the factory's validators (and so docs/parameters.md, printed from them) and the optimizers'
// constructors both use these, and a test (tstKeyRanges.cpp) checks at and around each bound that
// what the reference states is what create() accepts. Integer keys are ints in a parameter list;
// their C++ fields accept the same range. Conditions between keys (start_preconditioning_step >=
// precondition_frequency, nesterov needs momentum > 0) are the constructors' and named in the keys'
// descriptions.
#ifndef KOPTIM_CONFIG_KEYRANGES_HPP
#define KOPTIM_CONFIG_KEYRANGES_HPP

#include "../core/koptim_Check.hpp"

#include <limits>

namespace koptim {
namespace Impl {
namespace ranges {

inline constexpr double inf     = std::numeric_limits<double>::infinity();
inline constexpr double int_max = std::numeric_limits<int>::max();

inline constexpr Range closed(double lo, double hi) { return {lo, hi, false, false}; }
inline constexpr Range closed_open(double lo, double hi) { return {lo, hi, false, true}; }
inline constexpr Range open_closed(double lo, double hi) { return {lo, hi, true, false}; }
inline constexpr Range open_open(double lo, double hi) { return {lo, hi, true, true}; }

inline constexpr Range nonnegative     = closed_open(0.0, inf);  // finite
inline constexpr Range positive        = open_open(0.0, inf);    // finite
inline constexpr Range unit            = closed(0.0, 1.0);
inline constexpr Range decay           = closed_open(0.0, 1.0);  // a moving average's factor
inline constexpr Range count_from_zero = closed(0.0, int_max);
inline constexpr Range count_from_one  = closed(1.0, int_max);

// Every optimizer: lr and weight_decay (finite in double; the Optimizer base class also refuses,
// for a group with float32 parameters, values beyond the largest float).
inline constexpr Range lr           = closed_open(0.0, 1e300);
inline constexpr Range weight_decay = closed_open(0.0, 1e300);
// lr_schedule.
inline constexpr Range warmup_steps  = count_from_zero;
inline constexpr Range total_steps   = count_from_one;
inline constexpr Range min_lr_factor = unit;
inline constexpr Range step_size     = count_from_one;
inline constexpr Range gamma         = open_closed(0.0, 1.0);

namespace sgd {
inline constexpr Range momentum  = nonnegative;
inline constexpr Range dampening = unit;
}  // namespace sgd
namespace adagrad {
inline constexpr Range lr_decay                  = nonnegative;
inline constexpr Range initial_accumulator_value = nonnegative;
inline constexpr Range eps                       = nonnegative;
}  // namespace adagrad
namespace rmsprop {
inline constexpr Range alpha    = unit;
inline constexpr Range eps      = nonnegative;
inline constexpr Range momentum = nonnegative;
}  // namespace rmsprop
namespace adam {  // Adam and AdamW
inline constexpr Range beta1 = decay;
inline constexpr Range beta2 = decay;
inline constexpr Range eps   = nonnegative;
}  // namespace adam
namespace gefen {
inline constexpr Range beta1 = decay;
inline constexpr Range beta2 = decay;
inline constexpr Range eps   = positive;
}  // namespace gefen
namespace shampoo {
inline constexpr Range beta1                                       = decay;
inline constexpr Range beta2                                       = open_closed(0.0, 1.0);  // 1: a sum
inline constexpr Range beta3                                       = decay;  // unset (-1 in a list): betas[0]
inline constexpr Range epsilon                                     = nonnegative;
inline constexpr Range momentum                                    = decay;
inline constexpr Range dampening                                   = decay;
inline constexpr Range max_preconditioner_dim                      = count_from_one;
inline constexpr Range precondition_frequency                      = count_from_one;
inline constexpr Range start_preconditioning_step                  = count_from_one;  // unset (-1): frequency
inline constexpr Range grafting_beta2                              = decay;           // unset (-1): 0.99 / 0.999
inline constexpr Range grafting_epsilon                            = nonnegative;
inline constexpr Range qr_max_iterations                           = count_from_one;
inline constexpr Range qr_tolerance                                = unit;
inline constexpr Range rank_rtol                                   = nonnegative;
inline constexpr Range rank_atol                                   = nonnegative;
inline constexpr Range num_tolerated_failed_amortized_computations = count_from_zero;
inline constexpr Range num_trainers_per_group                      = count_from_one;  // unset (-1): all ranks
inline constexpr Range inverse_exponent                            = nonnegative;
}  // namespace shampoo

}  // namespace ranges
}  // namespace Impl
}  // namespace koptim

#endif
