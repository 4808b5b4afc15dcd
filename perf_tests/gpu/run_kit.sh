#!/usr/bin/env bash
# Runs the GPU run kit (made by assemble_kit.sh) on the GPU machine, within about 8 minutes:
# the unit tests, the NCCL test at one rank, the perf tests with JSON output, then (where torch
# sees the GPU) koptim's diagonal optimizers beside torch.optim's on the GPU
# (perf_tests/peers/run_peers.py --device cuda), into $kit/results/. Each step has its own time
# limit, cut to what is left of the whole run's budget (KOPTIM_KIT_BUDGET_S seconds, default 480,
# so that the run ends in time even where every step would use its limit; a step with less than
# 15 s left is not started and is listed as such); a failure is recorded and the next runs. Where $OUT is set (the lending tool's folder of
# files to bring back, which takes few files), the results go there after every step as one
# results.tar.gz beside summary.txt.
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
out=$kit/results
mkdir -p "$out"
# CUDA's libraries: the toolkit, then the Python packages (nvidia-cublas, nvidia-nccl-cu13).
extra=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && extra="$extra:$d"; done
py_libs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = []
for s in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += glob.glob(os.path.join(s, "nvidia", "*", "lib"))
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="$kit/lib$extra${py_libs:+:$py_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI from the kit (components, orted, help texts), where assemble_kit.sh packed it.
if [ -d "$kit/openmpi" ]; then
  export OPAL_PKGLIBDIR="$kit/openmpi/lib/components" OPAL_PKGDATADIR="$kit/openmpi/share/openmpi"
  export OPAL_BINDIR="$kit/openmpi/bin" PATH="$kit/openmpi/bin:$PATH"
  export OMPI_MCA_mca_base_component_path="$kit/openmpi/lib/components"
  export PMIX_MCA_mca_base_component_path="$kit/openmpi/pmix"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OPENBLAS_NUM_THREADS=1 KOPTIM_REFERENCE_DIR="$kit/reference"
# A NaN from a device kernel fails its test instead of trapping in the test's first comparison
# and ending the program (and every later test's result) there.
export KOPTIM_TEST_NO_FPE_TRAP=${KOPTIM_TEST_NO_FPE_TRAP:-1}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1 || true
status=0
budget=${KOPTIM_KIT_BUDGET_S:-480}
case "$budget" in '' | *[!0-9]*)
  echo "KOPTIM_KIT_BUDGET_S must be a whole number of seconds, got '$budget'" >&2
  exit 2
  ;;
esac
deadline=$(($(date +%s) + budget))
run() {  # run LIMIT NAME COMMAND...
  local limit=$1 name=$2
  shift 2
  local start=$(date +%s)
  local left=$((deadline - start))
  if [ "$left" -lt 15 ]; then
    echo "$name: not run (the kit's budget of $budget s is spent)" | tee -a "$out/summary.txt"
    status=1
    bundle
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
  bundle
}
bundle() {  # what has been written so far, to $OUT
  [ -n "${OUT:-}" ] || return 0
  tar -C "$out" -czf "$OUT/results.tar.gz" . && cp "$out/summary.txt" "$OUT/summary.txt"
}
: > "$out/summary.txt"
# Correctness on the device first, then the targets' measurements, then the rest: the results
# are bundled after every step, so a run cut short keeps what matters most.
# (Gefen's quality tests, some 40 s of host loops around small steps, come later on their own.)
for t in koptim_core koptim_diagonal koptim_gefen koptim_shampoo; do
  filter=()
  [ "$t" = koptim_gefen ] && filter=(--gtest_filter=-GefenQuality.*)
  [ -x "$kit/bin/$t" ] && run 90 "$t" "$kit/bin/$t" "${filter[@]}"
done
for p in koptim_perf_diagonal koptim_perf_gefen koptim_perf_shampoo; do
  limit=100
  [ "$p" = koptim_perf_shampoo ] && limit=150
  [ -x "$kit/bin/$p" ] && run "$limit" "$p" "$kit/bin/$p" --benchmark_format=json --benchmark_out="$out/$p.json" \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
done
# The peers on the GPU, where torch has CUDA (its Python packages on the machine).
# KOPTIM_KIT_PEERS_DEVICE=cpu rehearses this step with a CPU build and torch on the CPU.
peers_device=${KOPTIM_KIT_PEERS_DEVICE:-cuda}
if [ -x "$kit/bin/koptim_perf_diagonal" ] && [ -f "$kit/run_peers.py" ] &&
   python3 -c "import sys, torch; sys.exit(0 if '$peers_device' == 'cpu' or torch.cuda.is_available() else 1)" \
     2>/dev/null; then
  run 150 peers_diagonal_$peers_device python3 "$kit/run_peers.py" --device "$peers_device" \
      --koptim "$kit/bin/koptim_perf_diagonal" --rounds 2 --repetitions 3 --out "$out/peers_diagonal_$peers_device.json"
  [ -f "$kit/report.py" ] && [ -f "$out/peers_diagonal_$peers_device.json" ] &&
    python3 "$kit/report.py" "$out/peers_diagonal_$peers_device.json" > "$out/peers_diagonal_$peers_device.md" 2>&1 &&
    bundle
else
  echo "peers_diagonal_$peers_device: not run (no torch with CUDA here)" | tee -a "$out/summary.txt"
fi
# Allocations, fences and kernel launches per steady-state step (Kokkos Tools), on the device.
[ -x "$kit/bin/koptim_steady_state" ] && run 120 koptim_steady_state "$kit/bin/koptim_steady_state"
[ -x "$kit/bin/koptim_nccl" ] && run 60 koptim_nccl_np1 "$kit/bin/koptim_nccl"
[ -x "$kit/bin/koptim_comm" ] && run 60 koptim_comm_np1 "$kit/bin/koptim_comm"
for t in koptim_checkpoint koptim_robustness; do
  [ -x "$kit/bin/$t" ] && run 90 "$t" "$kit/bin/$t"
done
[ -x "$kit/bin/koptim_perf_comm" ] && run 100 koptim_perf_comm "$kit/bin/koptim_perf_comm" --benchmark_format=json \
    --benchmark_out="$out/koptim_perf_comm.json" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
[ -x "$kit/bin/koptim_gefen" ] && run 90 koptim_gefen_quality "$kit/bin/koptim_gefen" --gtest_filter=GefenQuality.*
# The examples on the device, last: their gradient and model checks, then 100 steps of each
# with Shampoo (the CPU's, Serial build at 9fbec9a: digits test accuracy 0.986, test loss 6.39e-2;
# Burgers test rel_l2_error 0.211; a GPU's last bits differ, its figures should be close).
[ -x "$kit/bin/koptim_example_checks" ] && run 60 koptim_example_checks "$kit/bin/koptim_example_checks"
[ -x "$kit/bin/koptim_digits" ] && run 60 koptim_digits_shampoo "$kit/bin/koptim_digits" \
    --config "$kit/example/configs/digits_shampoo.yaml" --data "$kit/example/data/digits.txt" --steps 100
[ -x "$kit/bin/koptim_burgers" ] && run 60 koptim_burgers_shampoo "$kit/bin/koptim_burgers" \
    --config "$kit/example/configs/burgers_shampoo.yaml" --steps 100
echo "results in $out (summary.txt, one log and JSON per program)"
exit $status
