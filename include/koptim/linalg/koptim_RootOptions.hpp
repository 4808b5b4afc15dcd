// The choices of how Shampoo computes its inverse matrix roots, without the kernels that compute
// them (koptim_MatrixRoot.hpp): what ShampooOptions and a user's code need.
#ifndef KOPTIM_LINALG_ROOTOPTIONS_HPP
#define KOPTIM_LINALG_ROOTOPTIONS_HPP

namespace koptim {
namespace linalg {

// eigen: symmetric eigendecomposition; coupled_newton: the coupled Newton iteration (exponents
// 1/p only), falling back to the eigendecomposition where it diverges.
enum class RootMethod { eigen, coupled_newton };

// automatic: LAPACK when the factors are in host-accessible memory, Jacobi otherwise.
enum class EighSolver { automatic, lapack, jacobi };

// The names a parameter list uses ("eigen", "lapack", ...).
const char* to_string(RootMethod m);
const char* to_string(EighSolver s);

}  // namespace linalg
}  // namespace koptim

#endif
