#!/usr/bin/env python3
"""Turns a Google Benchmark JSON file from koptim's perf tests, or the JSON of
perf_tests/peers/run_peers.py (koptim beside torch.optim), into a Markdown table.

    ./build/test/perf_tests/koptim_perf_diagonal --benchmark_format=json --benchmark_out=diag.json
    python3 perf_tests/report.py diag.json
    python3 perf_tests/report.py peers_diagonal.json     # ms per step and the ratio to torch fused
"""
import json
import sys


def peers(data):
    ctx = data["context"]
    print("Machine: %s CPUs at %s MHz%s; Kokkos %s (%s, concurrency %s), koptim %s; torch %s; %s rounds of %s "
          "repetitions, medians" % (ctx.get("num_cpus"), ctx.get("mhz_per_cpu"),
                                    ", GPU %s" % ctx["gpu"] if ctx.get("gpu") else "", ctx.get("kokkos_version"),
                                    ctx.get("kokkos_execution_space"), ctx.get("kokkos_concurrency"),
                                    ctx.get("koptim_git_hash"), ctx.get("torch_version"), ctx.get("rounds_done", ctx.get("rounds")),
                                    ctx.get("repetitions")))
    print("Command: `%s`" % data["command"])
    print()
    print("| threads | method | params | implementation | ms per step | ns per param | GB/s | time / torch fused |")
    print("|---:|---|---:|---|---:|---:|---:|---:|")
    rows = data["rows"]
    fused = {(r["threads"], r["method"], r["n"]): r["ms"] for r in rows if r["impl"] == "torch fused"}
    for r in rows:
        ref = fused.get((r["threads"], r["method"], r["n"]))
        # GB/s: the least traffic over the time (older files have none).
        gbs = "%.1f" % r["GB_per_s"] if "GB_per_s" in r else "-"
        print("| %d | %s | %s | %s | %.3f | %.3f | %s | %s |" % (
            r["threads"], r["method"], "%dM" % (r["n"] >> 20), r["impl"], r["ms"], r["ns_per_param"], gbs,
            "%.2f" % (r["ms"] / ref) if ref else "-"))
    for r in data.get("refused", []):
        print()
        print("- %s %s: refused by torch (%s)" % (r["method"], r["impl"], r["why"]))


def main(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("format") == "koptim-peers-1":
        return peers(data)
    ctx = data["context"]
    print("Machine: %s CPUs at %s MHz; Kokkos %s (%s, concurrency %s); build %s" % (
        ctx.get("num_cpus"), ctx.get("mhz_per_cpu"), ctx.get("kokkos_version"), ctx.get("kokkos_execution_space"),
        ctx.get("kokkos_concurrency"), ctx.get("library_build_type")))
    print()
    print("| benchmark | label | time | params | ns/param |")
    print("|---|---|---:|---:|---:|")
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        # Programs without a per-parameter counter (communication, checkpoints) get "-".
        params = "%d" % b["params"] if "params" in b else "-"
        per = "%.3f" % b["ns_per_param"] if "ns_per_param" in b else "-"
        print("| %s | %s | %.4g %s | %s | %s |" % (b["name"], b.get("label", ""), b["real_time"], b["time_unit"],
                                                   params, per))


if __name__ == "__main__":
    main(sys.argv[1])
