#!/usr/bin/env python3
"""Turns a Google Benchmark JSON file from koptim's perf tests into a Markdown table.

    ./build/test/perf_tests/koptim_perf_diagonal --benchmark_format=json --benchmark_out=diag.json
    python3 perf_tests/report.py diag.json
"""
import json
import sys


def main(path):
    with open(path) as f:
        data = json.load(f)
    ctx = data["context"]
    print("Machine: %s CPUs at %s MHz; Kokkos %s (%s, concurrency %s); build %s" % (
        ctx.get("num_cpus"), ctx.get("mhz_per_cpu"), ctx.get("kokkos_version"), ctx.get("kokkos_execution_space"),
        ctx.get("kokkos_concurrency"), ctx.get("library_build_type")))
    print()
    print("| benchmark | label | params | ns/param |")
    print("|---|---|---:|---:|")
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        print("| %s | %s | %d | %.3f |" % (b["name"], b.get("label", ""), b["params"], b["ns_per_param"]))


if __name__ == "__main__":
    main(sys.argv[1])
