// Shampoo's own keys, each declared once (see src/config/koptim_OptionKeys.hpp), in the order of
// the printed reference. The inverse_exponent_override sublist (keys that follow a pattern) is
// read and checked apart.
#ifndef KOPTIM_SRC_SHAMPOO_SHAMPOOKEYS_HPP
#define KOPTIM_SRC_SHAMPOO_SHAMPOOKEYS_HPP

#include "../config/koptim_OptionKeys.hpp"

#include <koptim/shampoo/koptim_Shampoo.hpp>

namespace koptim {

template <class O, class V, Impl::OptionsOf<O, ShampooOptions> = 0>
void visit_keys(O& o, V& v) {
  namespace R = Impl::ranges::shampoo;
  v.real_pair("betas", o.betas,
              "(b1, b2): b1 filters the gradient (0: no filtering), b2 weighs the factor matrices (1: sum).", R::beta1,
              R::beta2);
  v.optional_real("beta3", o.beta3,
                  "Filter of the gradient fed to the preconditioner (not with betas[0] = 0, which filters nothing).",
                  R::beta3, "beta3 = betas[0]");
  v.real("epsilon", o.epsilon,
         "Added to the factors before the inverse root (and the eigenvalue-corrected denominator); with 0 a factor "
         "not of full rank at a root computation is an error, unless pseudo_inverse.",
         R::epsilon);
  v.real("momentum", o.momentum, "Classic momentum mu applied to the preconditioned direction.", R::momentum);
  v.real("dampening", o.dampening, "Dampening d of the momentum (with momentum 0 only the default is accepted).",
         R::dampening);
  v.boolean("use_nesterov", o.use_nesterov, "Nesterov momentum (needs momentum > 0).");
  v.choice("weight_decay_type", o.weight_decay_type,
           "L2 (added to the gradient), decoupled (weight_decay W added to the direction), corrected "
           "(weight_decay lr/lr_peak W) or independent (weight_decay/lr_peak W); lr_peak is the group's lr.");
  v.integer("max_preconditioner_dim", o.max_preconditioner_dim,
            "Largest side of a factor matrix: dims are merged up to it and split above it.", R::max_preconditioner_dim);
  v.boolean("use_merge_dims", o.use_merge_dims,
            "Merge adjacent dimensions (from the last one) while their product fits.");
  v.integer("precondition_frequency", o.precondition_frequency, "Inverse roots are recomputed every this many steps.",
            R::precondition_frequency);
  v.optional_integer("start_preconditioning_step", o.start_preconditioning_step,
                     "First step that uses the Shampoo direction (at least precondition_frequency); the grafting "
                     "method alone before.",
                     R::start_preconditioning_step, "precondition_frequency");
  v.boolean("use_bias_correction", o.use_bias_correction,
            "Bias-correct the filtered gradient (b1 > 0), the factors and the eigenvalue correction E (b2 < 1); "
            "Adam grafting is bias-corrected either way.");
  v.choice("grafting", o.grafting, "Grafting method giving each block's step size.");
  v.optional_real("grafting_beta2", o.grafting_beta2,
                  "Second-moment decay of RMSProp/Adam grafting (set only with those).", R::grafting_beta2,
                  "0.99 for RMSProp, 0.999 for Adam");
  v.real("grafting_epsilon", o.grafting_epsilon,
         "Epsilon of AdaGrad/RMSProp/Adam grafting (with another grafting only the default is accepted); 0 allowed: "
         "a coordinate whose accumulator is 0 then gets no step (not 0/0).",
         R::grafting_epsilon);
  v.boolean("eigenvalue_corrected", o.eigenvalue_corrected,
            "Eigenvalue-corrected Shampoo (SOAP-like): Adam-style second moment in the factors' eigenbasis.");
  v.choice("eigenbasis", o.eigenbasis,
           "Eigenvalue-corrected: how the eigenbases are refreshed: eigh (an exact eigendecomposition each time) "
           "or qr (SOAP's: exact the first time, then from the previous eigenvectors by orthogonal iteration, "
           "QR steps while the basis is off by more than qr_tolerance); qr needs eigenvalue_corrected = true.");
  v.integer("qr_max_iterations", o.qr_max_iterations,
            "eigenbasis = qr: QR steps per refresh at most (with another eigenbasis only the default is accepted).",
            R::qr_max_iterations);
  v.real("qr_tolerance", o.qr_tolerance,
         "eigenbasis = qr: a basis V counts as converged when the Frobenius norm of the off-diagonal part of "
         "B = V^T L V is at most qr_tolerance times that of B (L the factor); 0: every refresh takes "
         "qr_max_iterations steps. With another eigenbasis only the default is accepted.",
         R::qr_tolerance);
  v.choice("root_method", o.root_method,
           "Inverse roots by symmetric eigendecomposition or coupled Newton (not eigenvalue_corrected, which computes "
           "no roots: only the default is accepted there).");
  v.choice("eigensolver", o.eigensolver,
           "automatic (LAPACK for host memory, batched Jacobi otherwise), lapack or jacobi; lapack with device "
           "memory: the eigendecompositions (of the inverse roots and of eigenvalue_corrected's eigenbases) by "
           "cuSOLVER on the device where Kokkos Kernels has cuSOLVER (syevjBatched up to n = 32, syevd above), "
           "else by LAPACK on host copies; for "
           "eigenbasis = qr, the refresh runs in LAPACK for host memory unless jacobi is chosen, in a Kokkos "
           "kernel otherwise.");
  v.boolean("pseudo_inverse", o.pseudo_inverse,
            "Pseudo-inverse roots of rank-deficient factors (needs epsilon = 0; not with eigenvalue_corrected).");
  v.real("rank_rtol", o.rank_rtol,
         "Pseudo-inverse: eigenvalues <= max(rank_rtol lambda_max, rank_atol) count as zero (without pseudo_inverse "
         "only the default is accepted).",
         R::rank_rtol);
  v.real("rank_atol", o.rank_atol, "Pseudo-inverse: see rank_rtol.", R::rank_atol);
  v.integer("num_tolerated_failed_amortized_computations", o.num_tolerated_failed_amortized_computations,
            "Consecutive root-inverse solver failures of a block tolerated (the previous root is kept) before an "
            "error.",
            R::num_tolerated_failed_amortized_computations);
  v.optional_integer(
      "num_trainers_per_group", o.num_trainers_per_group,
      "Distributed: ranks per group sharing the preconditioner work (a divisor of the number of ranks; 1 or -1 "
      "without a communicator); groups replicate it.",
      R::num_trainers_per_group, "all ranks");
  v.choice("communication_dtype", o.communication_dtype,
           "Distributed: precision of the update all-gather: float32 (each update in its parameter's precision; "
           "N ranks equal 1 rank bitwise) or bfloat16.");
  v.choice("distributed_cost_model", o.distributed_cost_model,
           "Distributed: cost of a block when assigning blocks to ranks: bytes (of its update, rounded up to 64) or "
           "cubic (sum of the cubes of its dimensions, as eigensolves).");
}

}  // namespace koptim

#endif
