#!/usr/bin/env python3
"""koptim's Shampoo on many small blocks beside the Shampoo and SOAP implementations on PyPI.

The parameter set is koptim_perf_shampoo's transformer (koptim_PerfModels.hpp, Transformer):
12 layers of d_model 512 (attention q, k, v, o of 512 x 512 with biases, feed-forward 2048 x 512
and 512 x 2048 with biases, two layer norms), 37.8M float32 parameters, gradients N(0, 0.01^2)
fixed over the steps. Every optimizer preconditions in blocks of at most 128 (2304 blocks of
128 x 128 and 624 of 128) where it can, recomputes its roots or eigenbases every 10 steps, runs
10 steps of warm-up (heavyball 11: see RefreshCount), then 20 timed steps (which hold two of those
computations, at steps 20 and 30):

  koptim Shampoo         BM_TransformerStep/0: RMSProp grafting, max_preconditioner_dim 128
  koptim SOAP-like       BM_TransformerStep/1: eigenvalue_corrected, betas (0.95, 0.95), exact eigenbases
  koptim SOAP            BM_TransformerStep/2: the same with eigenbasis qr (SOAP's refresh: a QR step
                         only where the previous basis is off by more than qr_tolerance 0.01; with
                         these fixed gradients the bases stay good and no step is needed)
                         BM_TransformerStep/3: qr_tolerance 0, one QR step at every refresh: the work
                         heavyball's SOAP does
  pytorch_optimizer.ScalableShampoo  block_size 128, RMSProp grafting (it has no Adam grafting),
                         roots every 10 steps
  heavyball.SOAP         max_precond_dim 128, split (blocks of 128), precondition_frequency 10
  pytorch_optimizer.SOAP max_precondition_dim 128: it does not split, so the dimensions above
                         128 (all of them here) are left unpreconditioned: less work than the
                         others, reported for what a user gets from that setting

Rounds alternate koptim's benchmark program and the peers; each figure is the median over the
rounds. Developer-time only (torch, pytorch-optimizer, heavyball from PyPI):

    python3 -m pip install torch pytorch-optimizer heavyball
    python3 perf_tests/peers/run_shampoo_peers.py --koptim build/test/perf_tests/koptim_perf_shampoo \\
        --threads 1 --rounds 2 --out peers_shampoo.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

LAYERS, D, BLOCK, FREQ, WARMUP, STEPS = 12, 512, 128, 10, 10, 20
KOPTIM_ROWS = ["koptim Shampoo (RMSProp grafting)", "koptim SOAP-like (eigenvalue-corrected, exact eigenbases)",
               "koptim SOAP (eigenbasis qr, tolerance 0.01)", "koptim SOAP (eigenbasis qr, tolerance 0: a QR every refresh)"]


def koptim_round(binary, threads):
    # koptim's threads are Kokkos's (OpenMP); its BLAS and LAPACK calls run one per block on them,
    # single-threaded, as docs/shampoo.md advises (OPENBLAS_NUM_THREADS=1).
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="spread", OMP_PLACES="threads",
               OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([binary, "--benchmark_filter=BM_TransformerStep/./12/0/", "--benchmark_format=json"], env=env,
                         check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    rows = {}
    for b in data["benchmarks"]:
        variant = int(b["run_name"].split("/")[1])
        assert b["time_unit"] == "ms"
        rows[KOPTIM_ROWS[variant]] = b["real_time"]
    return rows, data["context"]


def transformer(torch):
    gen = torch.Generator().manual_seed(5)
    shapes = []
    for layer in range(LAYERS):
        for _ in "qkvo":
            shapes += [(D, D), (D,)]
        shapes += [(4 * D, D), (4 * D,), (D, 4 * D), (D,), (D,), (D,), (D,), (D,)]
    params = []
    for s in shapes:
        p = torch.nn.Parameter(0.01 * torch.randn(s, generator=gen))
        p.grad = 0.01 * torch.randn(s, generator=gen)
        params.append(p)
    return params


class RefreshCount:
    """Counts heavyball's preconditioner refreshes. heavyball decides them by adding
    1 / precondition_frequency to a float at every step and refreshing when its integer part
    changes: 0.1 added ten times is 0.9999999999999999, so its refreshes fall on steps 11, 20, 30,
    40, 51, ..., not on multiples of 10 as koptim's and pytorch_optimizer's do. A warm-up of 10
    steps would leave three refreshes (11, 20, 30) in its 20 timed steps against the others' two;
    its warm-up is 11 steps (refreshes 20 and 30 timed), and the count is checked."""

    def __init__(self, heavyball):
        self.n = 0
        self.utils = heavyball.utils
        self.original = heavyball.utils.psgd_should_update

        def counted(*args, **kwargs):
            refresh = self.original(*args, **kwargs)
            self.n += int(bool(refresh))
            return refresh

        heavyball.utils.psgd_should_update = counted

    def close(self):
        self.utils.psgd_should_update = self.original


def peers(torch):
    import heavyball
    import pytorch_optimizer as po
    from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting
    # name: (constructor, warm-up steps, refresh counter or None)
    return {
        "pytorch_optimizer.ScalableShampoo (block 128, RMSProp grafting)": (lambda ps: po.ScalableShampoo(
            ps, lr=1e-3, block_size=BLOCK, preconditioning_compute_steps=FREQ, start_preconditioning_step=FREQ,
            graft_type=LayerWiseGrafting.RMSPROP, matrix_eps=1e-8), WARMUP, None),
        "heavyball.SOAP (blocks of 128)": (lambda ps: heavyball.SOAP(
            ps, lr=1e-3, betas=(0.95, 0.95), max_precond_dim=BLOCK, split=True, precondition_frequency=FREQ),
            WARMUP + 1, lambda: RefreshCount(heavyball)),
        "pytorch_optimizer.SOAP (max dim 128: dims above it unpreconditioned)": (lambda ps: po.SOAP(
            ps, lr=1e-3, precondition_frequency=FREQ, max_precondition_dim=BLOCK), WARMUP, None),
    }


def peer_round(torch, make, warmup, counter):
    params = transformer(torch)
    grads = [p.grad for p in params]
    opt = make(params)

    def step():
        # heavyball consumes the gradients (p.grad = None after its step): give them back.
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    count = counter() if counter else None
    try:
        for _ in range(warmup):
            step()
        timed_from = count.n if count else 0
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        elapsed = time.perf_counter() - start
        if count and count.n - timed_from != STEPS // FREQ:
            raise RuntimeError("%d preconditioner refreshes in the %d timed steps, not %d" %
                               (count.n - timed_from, STEPS, STEPS // FREQ))
    finally:
        if count:
            count.close()
    return 1e3 * elapsed / STEPS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--koptim", required=True, help="koptim_perf_shampoo")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="peers_shampoo.json")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    times, context = {}, None
    for r in range(args.rounds):
        rows, context = koptim_round(args.koptim, args.threads)
        for k, v in rows.items():
            times.setdefault(k, []).append(v)
        for name, (make, warmup, counter) in peers(torch).items():
            try:
                times.setdefault(name, []).append(peer_round(torch, make, warmup, counter))
            except Exception as e:  # a peer that fails is reported, not hidden
                times.setdefault(name, []).append(None)
                print("%s failed: %s" % (name, e), file=sys.stderr)
        print("round %d: %s" % (r + 1, {k: v[-1] for k, v in times.items()}), file=sys.stderr)
    result = {
        "machine": platform.processor() or platform.machine(), "threads": args.threads,
        "torch": torch.__version__, "koptim_context": context,
        "ms_per_step": {k: (statistics.median([x for x in v if x is not None]) if any(x is not None for x in v)
                            else None) for k, v in times.items()},
        "rounds": times,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    fastest_koptim = min(v for k, v in result["ms_per_step"].items() if k.startswith("koptim") and v)
    print("| optimizer | ms/step | / fastest koptim |")
    print("|---|---:|---:|")
    for k, v in result["ms_per_step"].items():
        print("| %s | %s | %s |" % (k, "failed" if v is None else "%.0f" % v,
                                   "" if v is None else "%.2f" % (v / fastest_koptim)))


if __name__ == "__main__":
    main()
