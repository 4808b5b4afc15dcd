#!/usr/bin/env python3
"""Independent NumPy reference of koptim's Distributed Shampoo for koptim's unit tests.

What it is
    A plain, single-process, float64 implementation of Distributed Shampoo as docs/shampoo.md
    describes it (blocking, one step in the order given there, the eigenvalue-corrected
    variant), written from the specification text alone (not from koptim's C++ code). Where the text leaves
    room, the reading of facebookresearch/optimizers `distributed_shampoo` was taken; every such
    choice is marked "CHOICE" in a comment below.

    It writes shampoo_reference.txt beside this script: for every case, the parameters of a
    small MLP-shaped parameter set after steps 1, 2, 5, 10, 30 and 60, starting from the same
    counter-based hash values as generate_diagonal.py (initial parameters at step 0, gradients at
    steps >= 1, bit for bit what unit_tests/koptim_TestData.hpp computes). A second section
    (lines starting with `hand`) holds tiny hand-checkable cases with explicit gradients; the
    script asserts their closed-form results before writing anything.

How to run it (developer-time only; the tests read the text file and need no Python)
    python3 unit_tests/reference/generate_shampoo.py            # writes shampoo_reference.txt
    python3 unit_tests/reference/generate_shampoo.py --sensitivity
        # also reports, per case, how far the trajectory moves when the eigensolver's rounding
        # changes (float64) and when everything runs in float32: the tolerances a test can use.
    Needs only NumPy. The reference itself is float64 everywhere.

File format (one item per line, words separated by single spaces; '#' starts a comment line)
    case NAME Shampoo float64 SEED     starts a case; SEED is the hash seed of its data
    option KEY VALUE...                a non-default option of the case (koptim's key names)
    tensor NDIM D1 ... DNDIM           the parameter tensors, in order t = 0, 1, ... (NDIM 0: scalar)
    merged T NDIM D1 ...               tensor T after dropping size-1 dims and merging (2.1 steps 1-2)
    blocks T NB  K D1..DK  K D1..DK ...  tensor T's NB blocks (order K, sizes), chunk indices row-major
    stat NAME N                        a count the optimizer reports after the last step
                                       (qr_refreshes, qr_iterations: see Shampoo::qr_iterations)
    check STEP T V...                  tensor T (row-major) after step STEP, repr() of the doubles
    end                                ends the case
    hand NAME KIND ...                 hand-checkable case NAME (all its lines start with `hand NAME`):
        hand NAME option KEY VALUE...      as above
        hand NAME tensor NDIM D...         its one tensor (t = 0)
        hand NAME init T V...              initial values of tensor T (instead of the hash)
        hand NAME grad STEP T V...         gradient of tensor T at STEP (instead of the hash)
        hand NAME check STEP T V...        as above; the case runs as many steps as it has grads
"""
import argparse
import os
import sys
import time

import numpy as np

# ---------------------------------------------------------------------------------------------
# Test data: exactly the counter-based hash of generate_diagonal.py / koptim_TestData.hpp.
# ---------------------------------------------------------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from koptim_testdata import value  # noqa: E402  (the hash shared with koptim_TestData.hpp)


def hashed_tensor(seed, t, step, shape):
    n = int(np.prod(shape, dtype=np.int64))
    return np.array([value(seed, t, step, i) for i in range(n)], dtype=np.float64).reshape(shape)


# "Small MLP-shaped" parameter set, tensor index t in this order; row-major.
PARAMS = [("W1", (16, 12)), ("b1", (16,)), ("W2", (4, 16)), ("b2", (4,)), ("K", (4, 3, 2, 2)), ("s", ())]
STEPS = 60
CHECKS = [1, 2, 5, 10, 30, 60]

# koptim's keys and defaults (None: required or resolved later).
DEFAULTS = dict(
    lr=None,
    betas=(0.9, 1.0),
    beta3=-1.0,                     # -1: b3 = b1
    epsilon=1e-12,
    momentum=0.0,
    dampening=0.0,
    use_nesterov=False,
    weight_decay=0.0,
    weight_decay_type="decoupled",  # L2 | decoupled | corrected | independent
    max_preconditioner_dim=1024,
    use_merge_dims=True,
    precondition_frequency=1,
    start_preconditioning_step=-1,  # -1: = precondition_frequency
    use_bias_correction=True,
    grafting="none",                # none | SGD | AdaGrad | RMSProp | Adam
    grafting_beta2=None,            # RMSProp 0.99, Adam 0.999 when not given
    grafting_epsilon=1e-10,
    eigenvalue_corrected=False,
    eigenbasis="eigh",              # eigh | qr (eigenvalue-corrected only)
    qr_max_iterations=1,
    qr_tolerance=0.01,
    inverse_exponent_override={},   # "order_K" -> a, "order_K_dim_J" -> a (J counts from 0)
    pseudo_inverse=False,
)


# ---------------------------------------------------------------------------------------------
# 2.1 Blocking
# ---------------------------------------------------------------------------------------------
def merged_shape(shape, max_dim, use_merge_dims):
    """Steps 1 and 2 of 2.1: drop size-1 dims, then merge adjacent dims from the LAST one."""
    # Step 1: drop dimensions of size 1; a 0-D tensor (or all-ones shape) becomes (1,).
    # CHOICE: size-1 dims are dropped, and a 0-D tensor becomes (1,) (order 1, one 1x1 factor),
    # also when use_merge_dims is false: 2.1 lists it as a step of its own. (distributed_shampoo's
    # code returns the shape untouched when merging is off, so there a 0-D tensor stays order 0,
    # unpreconditioned; its documentation says size-1 dims are squeezed in any case.) No tensor
    # of the cases below has a size-1 dimension, so only the scalar s meets this.
    dims = [d for d in shape if d != 1] or [1]
    if not use_merge_dims:
        return tuple(dims)
    # Step 2: walk from the last dimension to the first; the dimension being built absorbs its
    # left neighbour while the product stays <= max_dim. E.g. (32,3,64,64) with 8192 ->
    # (96,4096), (64,3,3,3) with 1024 -> (64,27), any tensor with <= max_dim elements -> vector.
    out = [dims[-1]]
    for d in reversed(dims[:-1]):
        if out[0] * d <= max_dim:
            out[0] *= d
        else:
            out.insert(0, d)
    return tuple(out)


def block_slices(shape, max_dim):
    """Step 3 of 2.1: split every dim into chunks of max_dim (the last chunk shorter); every
    combination of chunks is a block. Blocks are listed with chunk indices in row-major order
    (the order does not change the result, blocks are independent)."""
    per_dim = [[slice(a, min(a + max_dim, d)) for a in range(0, d, max_dim)] for d in shape]
    blocks = [()]
    for chunks in per_dim:
        blocks = [b + (c,) for b in blocks for c in chunks]
    return blocks


# ---------------------------------------------------------------------------------------------
# Small tensor helpers
# ---------------------------------------------------------------------------------------------
def mode_product(T, X, j):
    """(T x_j X)[..., i, ...] = sum_l X[i, l] T[..., l, ...] (mode-j product)."""
    return np.moveaxis(np.tensordot(X, T, axes=([1], [j])), 0, j)


def mode_gram(G, j):
    """G_(j) G_(j)^T: the mode-j unfolding (d_j x prod(other dims)) times its transpose."""
    others = [i for i in range(G.ndim) if i != j]
    return np.tensordot(G, G, axes=(others, others))


def inverse_root(Lhat, a, eps, pseudo_inverse):
    """X = Lhat^(-a) by eigendecomposition (2.2 step 3)."""
    d = Lhat.shape[0]
    if a == 0.0:
        return np.eye(d, dtype=Lhat.dtype)  # a = 0: dimension left unpreconditioned, X = I
    if pseudo_inverse:
        # epsilon must be 0; eigenvalues <= max(rtol * max(lambda_max, 0), atol) are treated as
        # zero, their lambda^(-a) is 0. koptim's defaults rtol = atol = 0.
        rtol, atol = 0.0, 0.0
        lam, Q = np.linalg.eigh(Lhat)
        cutoff = max(rtol * max(lam.max(), 0.0), atol)
        inv = np.zeros_like(lam)
        keep = lam > cutoff
        inv[keep] = lam[keep] ** (-a)
    else:
        # eigh(Lhat + eps I) = Q diag(lam) Q^T; if lambda_min < eps, lam <- lam - lambda_min + eps.
        lam, Q = np.linalg.eigh(Lhat + eps * np.eye(d, dtype=Lhat.dtype))
        lam_min = lam.min()
        if lam_min < eps:
            lam = lam - lam_min + eps
        inv = lam ** (-a)
    return (Q * inv) @ Q.T


def eigenvectors(L):
    """Q of eigh(L): columns ordered by ASCENDING eigenvalue (LAPACK/numpy/torch convention).
    2.3: bias correction and eps do not change the eigenvectors, so L itself is decomposed.
    CHOICE: the column order matters in 2.3, since E is indexed by eigenvector position and
    is kept (not re-rotated, not re-ordered) when Q is refreshed; ascending order as torch's
    eigh. Signs of the columns do not matter (they cancel)."""
    return np.linalg.eigh(L)[1]


def qr_refresh(A, Q, max_iterations, tolerance, log=None):
    """2.3 with eigenbasis qr: from the previous eigenvectors Q (columns), B = Q^T A Q; while
    fewer than max_iterations QR steps were done and ||B - diag(B)||_F > tolerance ||B||_F,
    Q <- Q of the QR decomposition of A Q (numpy: Householder, LAPACK geqrf/orgqr) and B again; then
    the columns in ascending order of diag(B), a stable sort.
    CHOICE (distributed_shampoo's QR eigendecomposition): the factor bias-corrected as for eigh
    (no effect on Q but rounding), E is not reordered with the columns, the first refresh is an
    exact eigh (the previous eigenvectors are the identity then, not a basis of the factor)."""
    def off_ratio(B):
        off = np.sqrt(np.sum(B * B) - np.sum(np.diag(B) ** 2).clip(0.0))
        return off, np.sqrt(np.sum(B * B))
    B = Q.T @ A @ Q
    done = 0
    while done < max_iterations:
        off, full = off_ratio(B)
        if tolerance > 0.0 and off <= tolerance * full:  # tolerance 0: every step (koptim's rule)
            break
        Q, _ = np.linalg.qr(A @ Q)
        done += 1
        B = Q.T @ A @ Q
    d = np.einsum("ik,ik->k", Q, A @ Q)
    order = np.argsort(d, kind="stable")
    if log is not None:
        log.append(done)
        s = np.sort(d)
        if len(s) > 1 and s[-1] > 0:
            log.append(-float(np.min(np.diff(s)) / s[-1]))  # negative: a relative gap of the estimates
    return Q[:, order]


def parse_overrides(overrides):
    """{"order_K": a, "order_K_dim_J": a} -> {K: a} and {(K, J): a}. J counts from 0 (CHOICE:
    as distributed_shampoo's inverse_exponent_override = {order: {dim: a}}), so order_2_dim_1 is
    the second (column) factor of a matrix block."""
    universal, per_dim = {}, {}
    for key, a in overrides.items():
        parts = key.split("_")
        if len(parts) == 2 and parts[0] == "order":
            universal[int(parts[1])] = float(a)
        elif len(parts) == 4 and parts[0] == "order" and parts[2] == "dim":
            per_dim[(int(parts[1]), int(parts[3]))] = float(a)
        else:
            raise ValueError("bad inverse_exponent_override key " + key)
    return universal, per_dim


def exponents(order, universal, per_dim):
    """a_j for the dims of a block of order k: 1/(2 max(k,1)) unless overridden.
    CHOICE: a dim-specific override wins over an order-wide one; dims without an override keep
    the default 1/(2k) (distributed_shampoo's documented behaviour)."""
    out = []
    for j in range(order):
        a = 1.0 / (2.0 * max(order, 1))
        if order in universal:
            a = universal[order]
        if (order, j) in per_dim:
            a = per_dim[(order, j)]
        out.append(a)
    return out


# ---------------------------------------------------------------------------------------------
# The optimizer
# ---------------------------------------------------------------------------------------------
class Block:
    def __init__(self, shape, o, dtype):
        self.shape = shape
        k = len(shape)
        self.a = exponents(k, *parse_overrides(o["inverse_exponent_override"]))
        # Factors L_j start at zero; inverse roots X_j (or eigenvectors Q_j) at the identity.
        # CHOICE: a dim with exponent 0 keeps no factor (distributed_shampoo does not precondition
        # it at all); its X stays I, which is the same result.
        self.L = [np.zeros((d, d), dtype) if a != 0.0 else None for d, a in zip(shape, self.a)]
        self.X = [np.eye(d, dtype=dtype) for d in shape]  # X_j (2.2) or Q_j (2.3)
        self.E = np.zeros(shape, dtype)   # 2.3 second moment of the rotated gradient
        self.M = np.zeros(shape, dtype)   # first moment (b1) of the gradient
        self.A = np.zeros(shape, dtype)   # grafting accumulator
        self.B = np.zeros(shape, dtype)   # classic momentum buffer, starts at 0
        self.refreshed = False            # 2.3 eigenbasis qr: an exact refresh has been done


class Shampoo:
    def __init__(self, shapes, options, dtype=np.float64, eigh_hook=None):
        o = dict(DEFAULTS)
        for k, v in options.items():
            if k not in o:
                raise KeyError(k)
            o[k] = v
        if o["lr"] is None:
            raise ValueError("lr is required")
        if o["start_preconditioning_step"] == -1:
            o["start_preconditioning_step"] = o["precondition_frequency"]
        if o["start_preconditioning_step"] < o["precondition_frequency"]:
            raise ValueError("start_preconditioning_step must be >= precondition_frequency")
        if o["grafting_beta2"] is None:
            o["grafting_beta2"] = {"RMSProp": 0.99, "Adam": 0.999}.get(o["grafting"], 1.0)
        if o["pseudo_inverse"] and o["epsilon"] != 0.0:
            raise ValueError("pseudo_inverse needs epsilon = 0")
        if o["eigenvalue_corrected"] and (o["inverse_exponent_override"] or o["pseudo_inverse"]):
            raise ValueError("eigenvalue_corrected: no exponent override / pseudo-inverse here")
        self.o = o
        self.dtype = dtype
        self.t = 0
        self.eigh_hook = eigh_hook  # only for --sensitivity: perturbs the eigensolver's rounding
        self.qr_log = []  # eigenbasis qr: QR steps of each refresh, and (negative) eigen-gaps
        m, merge = o["max_preconditioner_dim"], o["use_merge_dims"]
        self.layout = []  # per tensor: (merged shape, [(slices, Block), ...])
        for shape in shapes:
            ms = merged_shape(shape, m, merge)
            blocks = []
            for sl in block_slices(ms, m):
                bshape = tuple(s.stop - s.start for s in sl)
                blocks.append((sl, Block(bshape, o, dtype)))
            self.layout.append((ms, blocks))

    def step(self, params, grads):
        """One step of 2.2 on every block; params are updated in place and returned."""
        o = self.o
        self.t += 1
        t = self.t
        b1, b2 = o["betas"]
        f, s = o["precondition_frequency"], o["start_preconditioning_step"]
        c = dict(  # the step's constants, shared by all blocks
            t=t, b1=b1, b2=b2, s=s,
            b3=b1 if o["beta3"] == -1.0 else o["beta3"],
            w=1.0 - b2 if b2 < 1.0 else 1.0,  # weight of G G^T in the factors (and of R^2 in E)
            bc2=1.0 - b2 ** t if (o["use_bias_correction"] and b2 < 1.0) else 1.0,
            amortized=(t % f == 0 and t > s) or t == s,
        )
        for p, g, (ms, blocks) in zip(params, grads, self.layout):
            W = p.reshape(ms)          # a view: writing W[sl] updates p
            Gfull = g.reshape(ms).astype(self.dtype)
            for sl, blk in blocks:
                Wb = W[sl]
                P = self.block_direction(blk, Wb, Gfull[sl].copy(), c)
                W[sl] = Wb - o["lr"] * P  # 8. W <- W - lr P
        return params

    def block_direction(self, blk, Wb, G, c):
        """Steps 1-7 of 2.2 for one block: returns the direction P."""
        o = self.o
        k = len(blk.shape)
        t, b1, b2, b3, w, bc2, s = c["t"], c["b1"], c["b2"], c["b3"], c["w"], c["bc2"], c["s"]
        eps, lr, wd, wdt = o["epsilon"], o["lr"], o["weight_decay"], o["weight_decay_type"]
        graft, gb, geps = o["grafting"], o["grafting_beta2"], o["grafting_epsilon"]
        # 1. L2 weight decay only: G <- G + wd W (the factors, grafting and moments all see it).
        if wdt == "L2" and wd != 0.0:
            G = G + wd * Wb
        # 2. Factor update, every step: L_j <- b2 L_j + w G_(j) G_(j)^T, w = 1-b2 (b2<1) else 1.
        for j in range(k):
            if blk.L[j] is not None:
                blk.L[j] = b2 * blk.L[j] + w * mode_gram(G, j)
        #    The grafting state is updated from the same G (2.2 step 5).
        if graft == "AdaGrad":
            blk.A = blk.A + G * G
        elif graft in ("RMSProp", "Adam"):
            blk.A = gb * blk.A + (1.0 - gb) * G * G
        # 3. Amortized computation only when (t % f == 0 and t > s) or t == s.
        if c["amortized"]:
            for j in range(k):
                if blk.L[j] is None:
                    continue
                if o["eigenvalue_corrected"] and o["eigenbasis"] == "qr" and blk.refreshed:
                    # 2.3, eigenbasis qr: warm start from the previous eigenvectors.
                    blk.X[j] = qr_refresh(blk.L[j] / bc2, blk.X[j], o["qr_max_iterations"], o["qr_tolerance"],
                                          self.qr_log)
                elif o["eigenvalue_corrected"]:
                    # 2.3: refresh the eigenvectors Q_j of L_j (every f steps, same rule).
                    blk.X[j] = self.eigh_vectors(blk.L[j])
                else:
                    # L_hat = L / (1 - b2^t) only with bias correction and b2 < 1; X = L_hat^-a.
                    blk.X[j] = self.root(blk.L[j] / bc2, blk.a[j], eps)
            blk.refreshed = True
        if o["eigenvalue_corrected"]:
            # 2.3: E <- b2 E + w R^2 with R = G x_1 Q_1^T ... x_k Q_k^T, every step.
            # CHOICE: R uses the Q refreshed in this step's amortized computation (the order of
            # 2.2, and distributed_shampoo's: factors, then eigenvectors, then E). Before the
            # first refresh Q = I, so E is the Adam second moment of G.
            R = G
            for j in range(k):
                R = mode_product(R, blk.X[j].T, j)
            blk.E = b2 * blk.E + w * R * R
        # 4. Filtered gradient with b3: F = b3 M_{t-1} + (1-b3) G if b3 != b1;
        #    M_t = b1 M_{t-1} + (1-b1) G; F = M_t if b3 == b1.
        #    With bias correction M_hat = F / (1 - b3 b1^(t-1)); with b1 = 0, M_hat = G.
        if b1 != 0.0:
            F = b3 * blk.M + (1.0 - b3) * G if b3 != b1 else None
            blk.M = b1 * blk.M + (1.0 - b1) * G
            if F is None:
                F = blk.M
            Mhat = F / (1.0 - b3 * b1 ** (t - 1)) if o["use_bias_correction"] else F
        else:
            Mhat = G
        # 5. Direction.
        if o["eigenvalue_corrected"]:
            # 2.3: P_s = (R_M / (sqrt(E / (1-b2^t)) + eps)) x_1 Q_1 ... x_k Q_k, R_M the rotated
            # M_hat; bias correction of E only when b2 < 1 (and use_bias_correction, as bc2).
            RM = Mhat
            for j in range(k):
                RM = mode_product(RM, blk.X[j].T, j)
            Ps = RM / (np.sqrt(blk.E / bc2) + eps)
            for j in range(k):
                Ps = mode_product(Ps, blk.X[j], j)
        else:
            # P_s = M_hat x_1 X_1 ... x_k X_k (= M_hat before step s: the roots are I).
            Ps = Mhat
            for j in range(k):
                Ps = mode_product(Ps, blk.X[j], j)
        if graft == "none":
            P = Ps
        else:
            # Grafting preconditioners: SGD identity; AdaGrad A += G^2; RMSProp A = b A + (1-b) G^2
            # never bias-corrected; Adam the same, always bias-corrected A/(1-b^t), no first
            # moment of its own. P_g = M_hat / (sqrt(A_hat) + eps_g).
            if graft == "SGD":
                Pg = Mhat
            else:
                Ahat = blk.A / (1.0 - gb ** t) if graft == "Adam" else blk.A
                Pg = Mhat / (np.sqrt(Ahat) + geps)
            if t >= s:
                # From step s on, per block: P = P_s ||P_g||_F / (||P_s||_F + 1e-16).
                P = Ps * (np.linalg.norm(Pg) / (np.linalg.norm(Ps) + 1e-16))
            else:
                P = Pg  # before step s the grafting method alone
        # 6. Weight decay: P <- P + alpha W; alpha = wd (decoupled), wd lr/lr_peak (corrected),
        #    wd/lr_peak (independent), with lr_peak = lr (no schedule here); none for L2.
        if wd != 0.0 and wdt != "L2":
            lr_peak = lr
            alpha = {"decoupled": wd, "corrected": wd * lr / lr_peak, "independent": wd / lr_peak}[wdt]
            P = P + alpha * Wb
        # 7. Classic momentum: B <- mu B + (1-d) P (B starts at 0);
        #    P <- (1-d) P + mu B with Nesterov, else P <- B.
        # CHOICE: skipped entirely when momentum = 0 (distributed_shampoo enables it only with a
        # momentum config; otherwise dampening alone would scale P by 1-d).
        mu, d = o["momentum"], o["dampening"]
        if mu != 0.0:
            blk.B = mu * blk.B + (1.0 - d) * P
            P = (1.0 - d) * P + mu * blk.B if o["use_nesterov"] else blk.B
        return P

    # The two eigensolver entry points; --sensitivity swaps their rounding.
    def root(self, Lhat, a, eps):
        if self.eigh_hook is not None:
            return self.eigh_hook("root", Lhat, a, eps, self.o["pseudo_inverse"])
        return inverse_root(Lhat, a, eps, self.o["pseudo_inverse"])

    def eigh_vectors(self, L):
        if self.eigh_hook is not None:
            return self.eigh_hook("vectors", L)
        return eigenvectors(L)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
CASES = [
    # 1: defaults except lr and AdaGrad grafting (every tensor is one vector block).
    ("adagrad_graft", dict(lr=0.01, grafting="AdaGrad", betas=(0.9, 1.0))),
    # 2: Adam grafting, root every 5 steps from step 10, decoupled decay. max_preconditioner_dim 8
    #    added so that every factor has full rank by step 10: with f > 1 the gradients of steps
    #    t+1..t+f-1 have components in the null space of a rank-deficient factor, which X maps
    #    with eps^-1/2 = 1e6 times eigenvalues that are pure rounding noise (no implementation
    #    could reproduce another's numbers).
    ("adam_graft_freq", dict(lr=0.003, betas=(0.9, 0.999), grafting="Adam", precondition_frequency=5,
                             start_preconditioning_step=10, weight_decay=0.01, max_preconditioner_dim=8)),
    # 3: b3 != b1, RMSProp grafting, Nesterov momentum, L2 decay.
    ("rmsprop_beta3_nesterov", dict(lr=0.005, betas=(0.9, 0.99), beta3=0.95, grafting="RMSProp",
                                    momentum=0.5, use_nesterov=True, weight_decay=0.001,
                                    weight_decay_type="L2")),
    # 4: b1 = 0 (M_hat = G), small blocks without merging (order-2 and an order-4 block), no bias
    #    correction, no grafting.
    ("no_graft_small_blocks", dict(lr=0.001, betas=(0.0, 0.99), max_preconditioner_dim=8,
                                   use_merge_dims=False, use_bias_correction=False, epsilon=1e-6)),
    # 5: SGD grafting, exponent overrides, dampened momentum, corrected decay. max_preconditioner_dim
    #    16 added so that order-2 blocks exist (W1 16x12, W2 4x16, K 4x12) and order_2_dim_1 acts.
    ("sgd_graft_override", dict(lr=0.01, grafting="SGD",
                                inverse_exponent_override={"order_2_dim_1": 0.0, "order_1": 0.25},
                                momentum=0.9, dampening=0.1, weight_decay=0.01,
                                weight_decay_type="corrected", max_preconditioner_dim=16)),
    # 6: eigenvalue-corrected. max_preconditioner_dim 4 added: 2.3 is only well defined when no
    #    factor has a repeated eigenvalue at a refresh (E is diagonal in the eigenbasis, which is
    #    arbitrary inside a repeated eigenspace; a rank-deficient 192-vector factor has a
    #    130-dimensional null space). With blocks of at most 4 every factor refreshed at t = 3, 6, ...
    #    has distinct eigenvalues (the script asserts it); K becomes a (4,3,4) order-3 block.
    ("eigenvalue_corrected", dict(lr=0.003, betas=(0.9, 0.99), eigenvalue_corrected=True,
                                  precondition_frequency=3, epsilon=1e-8, weight_decay=0.01,
                                  weight_decay_type="independent", max_preconditioner_dim=4)),
    # Added cases.
    # 7: nothing but lr (betas (0.9, 1), eps 1e-12, f 1, vectors with L^-1/2, no grafting).
    ("defaults", dict(lr=0.01)),
    # 8: eigenvalue-corrected with AdaGrad-like factors (b2 = 1, w = 1, no bias correction of E),
    #    AdaGrad grafting on top, refresh every 2 steps from step 4, no merging: 4x4 blocks and K as
    #    an order-4 (4,3,2,2) block.
    ("eigenvalue_corrected_graft", dict(lr=0.01, betas=(0.9, 1.0), eigenvalue_corrected=True,
                                        grafting="AdaGrad", precondition_frequency=2,
                                        start_preconditioning_step=4, max_preconditioner_dim=4,
                                        use_merge_dims=False, epsilon=1e-10)),
    # 9: pseudo-inverse (epsilon 0) once every factor has full rank (blocks <= 8, start at 10);
    #    RMSProp grafting with its own beta2, Adam-like factors.
    ("pseudo_inverse", dict(lr=0.002, betas=(0.95, 0.999), pseudo_inverse=True, epsilon=0.0,
                            max_preconditioner_dim=8, start_preconditioning_step=10,
                            grafting="RMSProp", grafting_beta2=0.95, grafting_epsilon=1e-8)),
    # 10: per-dimension and order-wide overrides on an order-4 block and order-2 blocks, Adam
    #     grafting, b3 != b1, momentum without Nesterov.
    ("override_high_order", dict(lr=0.005, betas=(0.8, 0.999), beta3=0.9, max_preconditioner_dim=16,
                                 use_merge_dims=False, grafting="Adam", grafting_beta2=0.99,
                                 inverse_exponent_override={"order_4_dim_0": 0.0, "order_4_dim_3": 0.5,
                                                            "order_2": 0.3},
                                 momentum=0.5)),
    # 11: preconditioning never starts within the run (s = 100 > 60): P = P_g, Adam grafting, which
    #     equals torch Adam with L2 weight decay (b3 = b1, same eps); asserted below.
    ("never_started_adam", dict(lr=0.01, betas=(0.9, 0.999), grafting="Adam", grafting_epsilon=1e-8,
                                start_preconditioning_step=100, weight_decay=0.01,
                                weight_decay_type="L2")),
    # 12: case 6 with SOAP's refresh (eigenbasis qr): exact at t = 3, then warm-started QR steps,
    #     at most 3 per refresh, while the basis is off by more than 0.2 (the script asserts that
    #     refreshes with 0, 1, 2 and 3 steps all occur: 484, 3, 29 and 263 of them). Adam grafting.
    ("eigenvalue_corrected_qr", dict(lr=0.003, betas=(0.9, 0.95), eigenvalue_corrected=True,
                                     eigenbasis="qr", qr_max_iterations=3, qr_tolerance=0.2,
                                     precondition_frequency=3, epsilon=1e-8, grafting="Adam",
                                     max_preconditioner_dim=4)),
]


def fmt_option(k, v):
    if isinstance(v, tuple):
        return ["option %s %r %r" % (k, float(v[0]), float(v[1]))]
    if isinstance(v, bool):
        return ["option %s %s" % (k, "true" if v else "false")]
    if isinstance(v, dict):
        return ["option %s %s %r" % (k, kk, float(vv)) for kk, vv in v.items()]
    if isinstance(v, str):
        return ["option %s %s" % (k, v)]
    if isinstance(v, int):
        return ["option %s %d" % (k, v)]
    return ["option %s %r" % (k, float(v))]


def option_lines(options):
    lines = []
    for k in DEFAULTS:  # fixed key order; only non-default values (lr always)
        if k in options and options[k] != DEFAULTS[k]:
            lines += fmt_option(k, options[k])
    return lines


def initial_params(seed, dtype=np.float64):
    return [hashed_tensor(seed, t, 0, shape).astype(dtype) for t, (_, shape) in enumerate(PARAMS)]


def run_case(seed, options, dtype=np.float64, eigh_hook=None, gap_log=None):
    """Runs STEPS steps; returns {step: [param arrays]} at CHECKS, and the optimizer."""
    shapes = [shape for _, shape in PARAMS]
    params = initial_params(seed, dtype)
    if eigh_hook is None and gap_log is not None:
        eigh_hook = gap_checker(gap_log)
    opt = Shampoo(shapes, options, dtype, eigh_hook)
    out = {}
    for step in range(1, STEPS + 1):
        grads = [hashed_tensor(seed, t, step, shape).astype(dtype) for t, shape in enumerate(shapes)]
        opt.step(params, grads)
        for p in params:
            assert np.all(np.isfinite(p)), "non-finite parameter at step %d" % step
        if step in CHECKS:
            out[step] = [p.copy() for p in params]
    return out, opt


def gap_checker(log):
    """eigh hook that behaves exactly like the default and records, for every eigenvector
    refresh (2.3), the smallest gap between consecutive eigenvalues relative to the largest."""
    def hook(kind, *args):
        if kind == "root":
            return inverse_root(*args)
        L = args[0]
        lam = np.linalg.eigvalsh(L)
        if len(lam) > 1 and lam[-1] > 0:
            log.append(float(np.min(np.diff(lam)) / lam[-1]))
        return eigenvectors(L)
    return hook


def write_case(out, name, seed, options):
    gaps = []
    res, opt = run_case(seed, options, gap_log=gaps if options.get("eigenvalue_corrected") else None)
    if options.get("eigenvalue_corrected"):
        # 2.3 is reproducible only if each refreshed factor has distinct eigenvalues (with eigenbasis
        # qr: distinct estimates, which fix the order of the columns).
        gaps += [-x for x in opt.qr_log if x < 0]
        assert gaps and min(gaps) > 1e-6, "%s: repeated eigenvalue at a refresh (%g)" % (name, min(gaps))
    if options.get("eigenbasis") == "qr":
        steps = [x for x in opt.qr_log if x >= 0]
        assert set(steps) == set(range(options["qr_max_iterations"] + 1)), \
            "%s: QR steps per refresh %s: not every count occurs" % (name, sorted(set(steps)))
    out.write("case %s Shampoo float64 %d\n" % (name, seed))
    for line in option_lines(options):
        out.write(line + "\n")
    for _, shape in PARAMS:
        out.write("tensor %d%s\n" % (len(shape), "".join(" %d" % d for d in shape)))
    for t, (ms, blocks) in enumerate(opt.layout):
        out.write("merged %d %d %s\n" % (t, len(ms), " ".join(str(d) for d in ms)))
        desc = " ".join("%d %s" % (len(b.shape), " ".join(str(d) for d in b.shape)) for _, b in blocks)
        out.write("blocks %d %d %s\n" % (t, len(blocks), desc))
    if options.get("eigenbasis") == "qr":
        steps = [x for x in opt.qr_log if x >= 0]
        out.write("stat qr_refreshes %d\nstat qr_iterations %d\n" % (len(steps), sum(steps)))
    for step in CHECKS:
        for t, p in enumerate(res[step]):
            out.write("check %d %d %s\n" % (step, t, " ".join(repr(float(x)) for x in p.flatten())))
    out.write("end\n")
    return res, gaps


# ---------------------------------------------------------------------------------------------
# Hand-checkable cases (asserted here, and written as `hand` lines)
# ---------------------------------------------------------------------------------------------
def run_hand(shape, options, init, grads):
    p = [np.array(init, dtype=np.float64).reshape(shape)]
    opt = Shampoo([shape], options)
    traj = []
    for g in grads:
        before = p[0].copy()
        opt.step(p, [np.array(g, dtype=np.float64).reshape(shape)])
        traj.append((p[0].copy(), (before - p[0]) / options["lr"]))  # (W_t, direction P_t)
    return traj


HAND = []  # (name, shape, options, init, grads) of the cases written to the file


def hand_checks():
    """Closed-form checks; each returns only if the reference reproduces the hand result."""
    ok = []
    close = lambda x, y, tol=1e-11: np.allclose(x, y, rtol=tol, atol=tol)

    # (a) A 2-vector, G1 = [1, 0], G2 = [0, 1], betas (0, 1) (M_hat = G, L = sum G G^T), lr 1,
    #     no grafting, eps 1e-12: step 1 L = diag(1, 0), X = L^-1/2 maps G1 to itself; step 2
    #     L = I, so the direction is G2 itself.
    o = dict(lr=1.0, betas=(0.0, 1.0))
    tr = run_hand((2,), o, [0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]])
    assert close(tr[0][1], [1.0, 0.0]) and close(tr[1][1], [0.0, 1.0])
    assert close(tr[1][0], [-1.0, -1.0])
    HAND.append(("vector_unit_steps", (2,), o, [0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]))
    ok.append("2-vector G1=[1,0], G2=[0,1], betas (0,1), lr 1: P1 = G1, P2 = G2, W2 = [-1,-1]")

    # (b) A 2x2 matrix block (use_merge_dims false, else it is a 4-vector): G1 = [[0,1],[1,0]]
    #     gives L = R = I, so P1 = I^-1/4 G1 I^-1/4 = G1; G2 = [[1,0],[0,-1]] gives L = R = 2I and
    #     P2 = 2^-1/4 G2 2^-1/4 = G2 / sqrt(2).
    o = dict(lr=1.0, betas=(0.0, 1.0), use_merge_dims=False)
    g = [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, -1.0]]
    tr = run_hand((2, 2), o, [0.0] * 4, g)
    assert close(tr[0][1], np.reshape(g[0], (2, 2))) and close(tr[1][1], np.reshape(g[1], (2, 2)) / np.sqrt(2.0))
    HAND.append(("matrix_identity_factors", (2, 2), o, [0.0] * 4, g))
    ok.append("2x2 block G1=[[0,1],[1,0]]: L=R=I, P1 = G1; G2=[[1,0],[0,-1]]: L=R=2I, P2 = G2/sqrt(2)")

    # (c) Same with betas (0, 0.5) and bias correction: L1 = 0.5 I, L_hat = L1/(1-0.5) = I;
    #     L2 = 0.25 I + 0.5 I, L_hat = 0.75 I / 0.75 = I: both directions equal the gradients.
    o = dict(lr=1.0, betas=(0.0, 0.5), use_merge_dims=False)
    tr = run_hand((2, 2), o, [0.0] * 4, g)
    assert close(tr[0][1], np.reshape(g[0], (2, 2))) and close(tr[1][1], np.reshape(g[1], (2, 2)))
    HAND.append(("matrix_bias_corrected", (2, 2), o, [0.0] * 4, g))
    ok.append("2x2 block, betas (0,0.5), bias correction: L_hat = I at steps 1 and 2, P = G")

    # (d) order_2_dim_1 0: only the row factor acts. G = [[3,0],[0,4]]: L = diag(9,16),
    #     X_0 = L^-1/4 = diag(1/sqrt 3, 1/2), X_1 = I: P = diag(sqrt 3, 2).
    o = dict(lr=1.0, betas=(0.0, 1.0), use_merge_dims=False,
             inverse_exponent_override={"order_2_dim_1": 0.0}, epsilon=0.0)
    tr = run_hand((2, 2), o, [0.0] * 4, [[3.0, 0.0, 0.0, 4.0]])
    assert close(tr[0][1], [[np.sqrt(3.0), 0.0], [0.0, 2.0]])
    HAND.append(("matrix_dim1_unpreconditioned", (2, 2), o, [0.0] * 4, [[3.0, 0.0, 0.0, 4.0]]))
    ok.append("2x2 block diag(3,4), order_2_dim_1 0, eps 0: P = diag(3,4) diag(9,16)^-1/4 = diag(sqrt3, 2)")

    # (e) SGD grafting rescales P_s to the norm of M_hat, per block: 2-vector G1 = [3, 4],
    #     L = G G^T (rank 1), P_s = (L + eps I)^-1/2 G = G/sqrt(25 + eps) -> P = G whatever eps
    #     (1e-4 here: keeps the rounding noise of the null direction, times eps^-1/2, tiny).
    o = dict(lr=1.0, betas=(0.0, 1.0), grafting="SGD", epsilon=1e-4)
    tr = run_hand((2,), o, [0.0, 0.0], [[3.0, 4.0]])
    assert close(tr[0][1], [3.0, 4.0], 1e-12)
    HAND.append(("vector_sgd_graft", (2,), o, [0.0, 0.0], [[3.0, 4.0]]))
    ok.append("2-vector G=[3,4], SGD grafting: P_s = G/5 rescaled to ||G||: P = G")

    # (f) Weight decay and momentum on a scalar with gradient 0: L stays 0, so X = eps^-1/2 and
    #     M_hat = 0; P = alpha W then momentum. W0 = 1, wd 0.1 decoupled, lr 0.5, mu 0.5:
    #     B1 = 0.1, W1 = 0.95; B2 = 0.5*0.1 + 0.095 = 0.145, W2 = 0.95 - 0.0725 = 0.8775.
    o = dict(lr=0.5, weight_decay=0.1, momentum=0.5)
    tr = run_hand((), o, [1.0], [[0.0], [0.0]])
    assert close(tr[0][0], 0.95) and close(tr[1][0], 0.8775)
    HAND.append(("scalar_decay_momentum", (), o, [1.0], [[0.0], [0.0]]))
    ok.append("scalar, zero gradients, wd 0.1 decoupled, mu 0.5, lr 0.5: W = 1 -> 0.95 -> 0.8775")

    # (g) A 3x3 matrix root with known values.
    A = np.array([[1195.0, -944.0, -224.0], [-944.0, 746.0, 177.0], [-224.0, 177.0, 42.0]])
    X = inverse_root(A, 0.5, 0.0, False)
    assert np.allclose(X, [[1, 1, 1], [1, 2, -3], [1, -3, 18]], rtol=0, atol=1e-9)
    ok.append("A = [[1195,-944,-224],[-944,746,177],[-224,177,42]]: A^-1/2 = [[1,1,1],[1,2,-3],[1,-3,18]] (1e-9)")

    # (h) 2.1 examples and the blocking of the parameter set.
    assert merged_shape((32, 3, 64, 64), 8192, True) == (96, 4096)
    assert merged_shape((64, 3, 3, 3), 1024, True) == (64, 27)
    assert merged_shape((16, 32), 1024, True) == (512,)
    assert merged_shape((), 1024, True) == (1,) and merged_shape((), 8, False) == (1,)
    assert merged_shape((4, 3, 2, 2), 4, True) == (4, 3, 4)
    assert len(block_slices((16, 12), 8)) == 4 and [s.stop - s.start for s in block_slices((12,), 8)[1]] == [4]
    ok.append("2.1 examples: (32,3,64,64)/8192 -> (96,4096); (64,3,3,3)/1024 -> (64,27); 16x32 -> 512; () -> (1,)")

    # (i) Eigenvalue-corrected before any refresh = Adam (Q = I): b3 = b1, same eps, 4 steps.
    rng = np.random.default_rng(0)
    gs = rng.standard_normal((4, 5))
    o = dict(lr=0.1, betas=(0.9, 0.99), eigenvalue_corrected=True, epsilon=1e-8, start_preconditioning_step=10,
             precondition_frequency=10)
    tr = run_hand((5,), o, [0.0] * 5, gs)
    w_adam, m, v = np.zeros(5), np.zeros(5), np.zeros(5)
    for t, gg in enumerate(gs, start=1):
        m = 0.9 * m + 0.1 * gg
        v = 0.99 * v + 0.01 * gg * gg
        w_adam = w_adam - 0.1 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-8)
    assert close(tr[-1][0], w_adam, 1e-12)
    ok.append("eigenvalue-corrected before its first refresh = Adam (4 steps, 1e-12)")
    return ok


def write_hand(out):
    out.write("# hand-checkable cases: explicit init and gradients, results asserted by the script\n")
    for name, shape, o, init, grads in HAND:
        pre = "hand %s " % name
        for line in option_lines(o):
            out.write(pre + line + "\n")
        out.write(pre + "tensor %d%s\n" % (len(shape), "".join(" %d" % d for d in shape)))
        out.write(pre + "init 0 %s\n" % " ".join(repr(float(x)) for x in init))
        tr = run_hand(shape, o, init, grads)
        for step, g in enumerate(grads, start=1):
            out.write(pre + "grad %d 0 %s\n" % (step, " ".join(repr(float(x)) for x in g)))
        for step, (w, _) in enumerate(tr, start=1):
            out.write(pre + "check %d 0 %s\n" % (step, " ".join(repr(float(x)) for x in np.ravel(w))))


def adam_l2_check(res, seed, options):
    """Case never_started_adam: with s beyond the run, P = P_g, which is torch Adam with L2
    weight decay; compare with an independent loop over whole tensors."""
    b1, b2 = options["betas"]
    lr, wd, eps = options["lr"], options["weight_decay"], options["grafting_epsilon"]
    ws = initial_params(seed)
    ms = [np.zeros_like(w) for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    worst = 0.0
    for step in range(1, STEPS + 1):
        for t, (_, shape) in enumerate(PARAMS):
            g = hashed_tensor(seed, t, step, shape) + wd * ws[t]
            ms[t] = b1 * ms[t] + (1 - b1) * g
            vs[t] = b2 * vs[t] + (1 - b2) * g * g
            ws[t] = ws[t] - lr * (ms[t] / (1 - b1 ** step)) / (np.sqrt(vs[t] / (1 - b2 ** step)) + eps)
        if step in CHECKS:
            worst = max(worst, max(float(np.max(np.abs(a - b))) for a, b in zip(ws, res[step])))
    assert worst < 1e-12, worst
    return worst


# ---------------------------------------------------------------------------------------------
# --sensitivity: what tolerance can an independent implementation expect?
# ---------------------------------------------------------------------------------------------
def rotated_eigh_hook(seed):
    """Same mathematics, different rounding: decompose U^T A U for a random orthogonal U (and a
    random permutation of the input), as another eigensolver would round differently."""
    rng = np.random.default_rng(seed)

    def rotated(A):
        d = A.shape[0]
        U, _ = np.linalg.qr(rng.standard_normal((d, d)))
        lam, V = np.linalg.eigh(U.T @ A @ U)
        return lam, U @ V

    def hook(kind, *args):
        if kind == "vectors":
            return rotated(args[0])[1]
        Lhat, a, eps, pseudo = args
        d = Lhat.shape[0]
        if a == 0.0:
            return np.eye(d, dtype=Lhat.dtype)
        lam, Q = rotated(Lhat if pseudo else Lhat + eps * np.eye(d, dtype=Lhat.dtype))
        if pseudo:
            inv = np.where(lam > 0.0, np.abs(lam) ** (-a), 0.0)
        else:
            if lam.min() < eps:
                lam = lam - lam.min() + eps
            inv = lam ** (-a)
        return (Q * inv) @ Q.T
    return hook


def max_diff(a, b):
    return max(max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(a[s], b[s])) for s in CHECKS)


def sensitivity(seed, options, ref):
    rot, _ = run_case(seed, options, eigh_hook=rotated_eigh_hook(seed))
    try:
        f32, _ = run_case(seed, options, dtype=np.float32)
        d32 = max_diff(f32, ref)
    except AssertionError:
        d32 = float("inf")
    return max_diff(rot, ref), d32


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sensitivity", action="store_true",
                    help="also report trajectory changes under other eigensolver rounding and in float32")
    ap.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "shampoo_reference.txt"))
    args = ap.parse_args()
    start = time.time()
    for line in hand_checks():
        print("hand check ok: " + line)
    tmp = args.output + ".tmp"
    with open(tmp, "w") as out:
        out.write("# numpy %s; generated by generate_shampoo.py (docs/shampoo.md); float64; do not edit\n"
                  % np.__version__)
        out.write("# parameters: %s; %d steps; checks after steps %s\n"
                  % (", ".join("%s %s" % (n, s) for n, s in PARAMS), STEPS, " ".join(map(str, CHECKS))))
        for seed, (name, options) in enumerate(CASES, start=1):
            res, gaps = write_case(out, name, seed, options)
            biggest = max(float(np.max(np.abs(p))) for p in res[STEPS])
            msg = "case %-28s seed %2d  max |W| after %d steps %.4g" % (name, seed, STEPS, biggest)
            if gaps:
                msg += "  min relative eigen-gap at refresh %.3g" % min(gaps)
            if name == "never_started_adam":
                msg += "  vs inline Adam %.2g" % adam_l2_check(res, seed, options)
            if args.sensitivity:
                msg += "  rounding-perturbed f64 %.2g  f32 %.2g" % sensitivity(seed, options, res)
            print(msg)
        write_hand(out)
    os.replace(tmp, args.output)
    print("wrote %s in %.1f s" % (args.output, time.time() - start))


if __name__ == "__main__":
    sys.exit(main())
