#!/usr/bin/env python3
"""koptim's diagonal optimizers beside the implementations a user would otherwise pick, on the
same machine, in one run.

Peers: torch.optim AdamW, Adagrad and SGD with momentum, each in every implementation torch has
on the CPU (the default per-tensor loop, foreach, fused; one that torch refuses is reported as
such), on one float32 tensor of 1M and of 16M parameters filled as koptim_perf_diagonal fills
its own (w = 0.5, g = 0.01) with the same hyperparameters (SGD lr 1e-3 momentum 0.9; Adagrad lr
1e-2 eps 1e-10; AdamW lr 1e-3 weight decay 0.01 eps 1e-8). Rounds alternate koptim's benchmark
program and the peers, so that both see the same machine; every figure is the median over the
rounds of medians over repetitions.

Developer-time only (torch from PyPI); koptim's build and tests never need it.

    python3 -m pip install torch
    python3 perf_tests/peers/run_peers.py --koptim build/test/perf_tests/koptim_perf_diagonal \\
        --threads 1 --rounds 3 --out peers_diagonal.json
    python3 perf_tests/report.py peers_diagonal.json

--threads takes several counts (e.g. "1 2"): torch.set_num_threads(k) and OMP_NUM_THREADS=k for
koptim, whose thread count is that of its Kokkos backend (a Serial Kokkos, as Debian's, runs one
thread whatever k is: the JSON records the backend and its concurrency). koptim's program runs
with its OpenMP threads bound (OMP_PROC_BIND=spread, OMP_PLACES=threads, as Kokkos advises);
torch runs in this process as a user runs it, its threads not bound.

--device cuda compares on a GPU: torch's tensors on the GPU (times taken after
torch.cuda.synchronize()), --koptim the perf program of a CUDA build of koptim (its Views in
device memory). Both sides also time a copy of n floats (koptim's Kokkos::deep_copy, torch's
dst.copy_(src)), the yardstick of the bandwidth column: GB/s is the least traffic of a step
(SGD, AdaGrad: 20 bytes per parameter; AdamW: 28; koptim's check of the gradients: 4 more; a
copy: 8) over its time. The GPU run kit (perf_tests/gpu/run_kit.sh) runs it where torch has CUDA.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

SIZES = [1 << 20, 1 << 24]
METHODS = ["SGD", "AdaGrad", "AdamW"]
METHOD_ID = {"SGD": 0, "AdaGrad": 1, "AdamW": 2}


def least_bytes(method, impl):
    """The bytes per parameter a step (or a copy) must move at least."""
    if method == "copy":
        return 8
    if impl == "one read of the gradients":
        return 4
    return (28 if method == "AdamW" else 20) + (4 if impl == "koptim (checked)" else 0)


def koptim_round(binary, threads, repetitions, device):
    """Median ms per step of koptim's step (checked and unchecked) and of the plain loop."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1",
               OMP_PROC_BIND="spread", OMP_PLACES="threads")
    out = subprocess.run([binary, "--benchmark_filter=n:(1048576|16777216)",
                          "--benchmark_repetitions=%d" % repetitions, "--benchmark_report_aggregates_only=true",
                          "--benchmark_format=json"], env=env, check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    rows = []
    for b in data["benchmarks"]:
        # The medians over the repetitions; with one repetition Google Benchmark writes no aggregates.
        if (b.get("aggregate_name") != "median") if repetitions > 1 else (b.get("run_type") == "aggregate"):
            continue
        name = b["run_name"]  # BM_KoptimStep/method:2/n:1048576/checked:1/real_time
        fields = dict(part.split(":") for part in name.split("/")[1:] if ":" in part)
        assert b["time_unit"] == "ms"
        if name.startswith("BM_DeviceCopy"):
            rows.append({"method": "copy", "n": int(fields["n"]), "impl": "koptim Kokkos::deep_copy",
                         "ms": b["real_time"]})
            continue
        if name.startswith("BM_ReadOnce"):
            if device != "cpu":
                continue  # host memory: not the GPU's figure
            # The floor of the check: one read of the gradients, beside every method.
            for method in METHODS:
                rows.append({"method": method, "n": int(fields["n"]), "impl": "one read of the gradients",
                             "ms": b["real_time"]})
            continue
        method = METHODS[int(fields["method"])]
        if name.startswith("BM_KoptimStep"):
            impl = "koptim (checked)" if fields["checked"] == "1" else "koptim (unchecked)"
        else:
            impl = "plain C++ loop"
        rows.append({"method": method, "n": int(fields["n"]), "impl": impl, "ms": b["real_time"]})
    ctx = data["context"]
    return rows, {"kokkos_execution_space": ctx.get("kokkos_execution_space"),
                  "kokkos_concurrency": ctx.get("kokkos_concurrency"), "kokkos_version": ctx.get("kokkos_version"),
                  "koptim_git_hash": ctx.get("koptim_git_hash"), "host_name": ctx.get("host_name"),
                  "num_cpus": ctx.get("num_cpus"), "mhz_per_cpu": ctx.get("mhz_per_cpu")}


def torch_optimizer(torch, method, params, variant):
    kw = {}
    if variant == "foreach":
        kw["foreach"] = True
    elif variant == "fused":
        kw["fused"] = True
    else:
        kw["foreach"] = False
    if method == "SGD":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)
    if method == "AdaGrad":
        return torch.optim.Adagrad(params, lr=1e-2, eps=1e-10, **kw)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, eps=1e-8, **kw)


def timed_ms(torch, device, step, repetitions, min_seconds=0.3):
    """Median ms per call of step() over repetitions of at least min_seconds each. On a GPU each
    call is waited for, as koptim's benchmark fences after each step."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(repetitions):
        steps = 0
        sync()
        start = time.perf_counter()
        while True:
            step()
            sync()
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds and steps >= 3:
                break
        times.append(1e3 * elapsed / steps)
    return statistics.median(times)


def torch_ms(torch, method, n, variant, repetitions, device):
    """Median ms per step (None when torch refuses the variant on this device)."""
    w = torch.full((n,), 0.5, dtype=torch.float32, device=device)
    w.grad = torch.full((n,), 0.01, dtype=torch.float32, device=device)
    try:
        opt = torch_optimizer(torch, method, [w], variant)
        for _ in range(3):  # state allocated, first-touch done
            opt.step()
    except (RuntimeError, ValueError, TypeError) as e:
        return None, str(e).splitlines()[0]
    return timed_ms(torch, device, opt.step, repetitions), None


def torch_copy_ms(torch, n, repetitions, device):
    """Median ms of dst.copy_(src), n floats."""
    src = torch.full((n,), 0.01, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return timed_ms(torch, device, lambda: dst.copy_(src), repetitions)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--koptim", required=True, help="koptim_perf_diagonal")
    ap.add_argument("--threads", nargs="+", type=int, default=[1])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("run_peers: --device cuda, but torch sees no GPU")

    samples = {}  # (threads, method, n, impl) -> [ms per round]
    notes = {}
    context = {}
    done = 0

    def write():
        """The rows so far: written after every round, so that a run cut short keeps its rounds."""
        result = {
            "format": "koptim-peers-1",
            "command": " ".join(sys.argv),
            "context": dict(context, torch_version=torch.__version__, python=platform.python_version(),
                            machine=platform.processor() or platform.machine(), rounds=args.rounds,
                            rounds_done=done, repetitions=args.repetitions, device=args.device,
                            gpu=torch.cuda.get_device_name(0) if args.device == "cuda" else None),
            "rows": [{"threads": k[0], "method": k[1], "n": k[2], "impl": k[3], "ms": statistics.median(v),
                      "ms_all_rounds": v, "ns_per_param": 1e6 * statistics.median(v) / k[2],
                      "GB_per_s": least_bytes(k[1], k[3]) * k[2] / (1e6 * statistics.median(v))}
                     for k, v in sorted(samples.items())],
            "refused": [{"method": k[0], "impl": k[1], "why": v} for k, v in sorted(notes.items())],
        }
        with open(args.out + ".part", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".part", args.out)

    for threads in args.threads:
        torch.set_num_threads(threads)
        for r in range(args.rounds):
            rows, context = koptim_round(args.koptim, threads, args.repetitions, args.device)
            for row in rows:
                samples.setdefault((threads, row["method"], row["n"], row["impl"]), []).append(row["ms"])
            for n in SIZES:
                samples.setdefault((threads, "copy", n, "torch copy_"), []).append(
                    torch_copy_ms(torch, n, args.repetitions, args.device))
            for method in METHODS:
                for n in SIZES:
                    for variant in ["for-loop", "foreach", "fused"]:
                        impl = "torch %s" % variant
                        ms, why = torch_ms(torch, method, n, variant, args.repetitions, args.device)
                        if ms is None:
                            notes[(method, impl)] = why
                            continue
                        samples.setdefault((threads, method, n, impl), []).append(ms)
            done += 1
            write()
            print("threads %d: round %d of %d done" % (threads, r + 1, args.rounds), file=sys.stderr)
    print("wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
