#!/usr/bin/env python3
"""koptim's Gefen beside the reference Gefen package on PyPI and torch's fused AdamW.

The tensor is koptim_perf_gefen's: one float32 matrix of 16384 x 1024 (16.8M parameters), its
gradient g_ij = r_i c_j z_ij with log-normal row and column scales and normal z (the same
distribution, drawn here with torch's generator), w = 0.5, lr 1e-3, weight decay 0.01, one
thread. koptim's figures are BM_Step/method:0 (AdamW) and method:1 (Gefen) at n = 16777216. Each
optimizer takes one step first (Gefen: partitions and codebook), then STEPS timed steps; rounds
alternate koptim's program and the peers, and each figure is the median over the rounds.
Developer-time only:

    python3 -m pip install torch gefen
    python3 perf_tests/peers/run_gefen_peers.py --koptim build/test/perf_tests/koptim_perf_gefen --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROWS, COLS, STEPS = 16384, 1024, 10


def koptim_round(binary):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([binary, "--benchmark_filter=BM_Step/method:(0|1)/n:16777216", "--benchmark_format=json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        assert b["time_unit"] == "ms"
        rows["koptim AdamW" if "/method:0/" in b["run_name"] else "koptim Gefen"] = b["real_time"]
    return rows


def tensor(torch):
    gen = torch.Generator().manual_seed(1)
    r = 1e-3 * torch.exp(torch.randn(ROWS, 1, generator=gen))
    c = torch.exp(0.5 * torch.randn(1, COLS, generator=gen))
    w = torch.nn.Parameter(torch.full((ROWS, COLS), 0.5))
    w.grad = r * c * torch.randn(ROWS, COLS, generator=gen)
    return w


def peer_round(torch, make):
    w = tensor(torch)
    g = w.grad
    opt = make([w])
    w.grad = g
    opt.step()
    start = time.perf_counter()
    for _ in range(STEPS):
        w.grad = g
        opt.step()
    return 1e3 * (time.perf_counter() - start) / STEPS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--koptim", required=True, help="koptim_perf_gefen")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="peers_gefen.json")
    args = ap.parse_args()
    import torch
    from gefen import Gefen
    torch.set_num_threads(1)
    peers = {
        "torch AdamW (fused)": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, fused=True),
        "gefen (PyPI)": lambda ps: Gefen(ps, lr=1e-3, weight_decay=0.01),
    }
    times = {}
    for r in range(args.rounds):
        for k, v in koptim_round(args.koptim).items():
            times.setdefault(k, []).append(v)
        for name, make in peers.items():
            try:
                times.setdefault(name, []).append(peer_round(torch, make))
            except Exception as e:  # reported, not hidden
                times.setdefault(name, []).append(None)
                print("%s failed: %s" % (name, e), file=sys.stderr)
    med = {k: (statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None)
           for k, v in times.items()}
    with open(args.out, "w") as f:
        json.dump({"threads": 1, "torch": torch.__version__, "ms_per_step": med, "rounds": times}, f, indent=1)
    print("| optimizer | ms/step (16.8M parameters) | / koptim Gefen |")
    print("|---|---:|---:|")
    for k, v in med.items():
        print("| %s | %s | %s |" % (k, "failed" if v is None else "%.1f" % v,
                                   "" if v is None else "%.2f" % (v / med["koptim Gefen"])))


if __name__ == "__main__":
    main()
