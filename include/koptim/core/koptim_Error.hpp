// koptim's exceptions. Every rejected input throws one of these with a message that names what
// was wrong (the parameter, key or value) and what is allowed; the optimizer state and the
// parameters are left as they were. An error found only after a step has begun to change the
// state (Shampoo's inverse roots, which say so; a collective or an allocation failing during the
// update; an import_state() failing while it writes the tensors) interrupts the optimizer
// instead (Optimizer::interrupted()).
#ifndef KOPTIM_CORE_ERROR_HPP
#define KOPTIM_CORE_ERROR_HPP

#include <stdexcept>
#include <string>

namespace koptim {

// Base of every koptim exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parameter list key or value that is not allowed.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Views that do not fit together (shape, layout, scalar type, contiguity, names).
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A NaN or Inf in a gradient (or in a computed quantity that must be finite).
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// An exported state that does not belong to this optimizer or is incomplete.
class StateError : public Error {
 public:
  using Error::Error;
};

}  // namespace koptim

#endif
