#!/usr/bin/env bash
# The learning-rate sweep behind the files in example/configs/: every optimizer of the demo gets
# the same grid of lr values on each task (the file's other settings unchanged), and the value
# with the lowest final training loss goes into its file. Then the spread over seeds: the demo
# with the chosen files and seeds 1, 2, 3.
#
#   example/sweep.sh [BUILD_DIR [lr|seeds|all]]   (default build/release, all; prints Markdown)
#
# Each sweep run is one example program (koptim_digits, koptim_burgers) with --lr; the sweep
# takes about 4 minutes on 2 cores, the seeds about 3.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build/release}"
mode="${2:-all}"
case "$mode" in
  lr | seeds | all) ;;
  *) echo "usage: $0 [BUILD_DIR [lr|seeds|all]] (got mode '$mode')" >&2; exit 2 ;;
esac
if [ $# -gt 2 ]; then echo "usage: $0 [BUILD_DIR [lr|seeds|all]] (extra argument '$3')" >&2; exit 2; fi
lrs=(2e-3 5e-3 1e-2 2e-2 5e-2 1e-1)
export OPENBLAS_NUM_THREADS=1

if [ "$mode" != seeds ]; then
echo "## Learning-rate sweep (final training loss; test metric in parentheses)"
for task in digits burgers; do
  echo
  echo "$task:"
  echo
  printf "| optimizer |"; for lr in "${lrs[@]}"; do printf " lr %s |" "$lr"; done; echo
  printf "|---|"; for lr in "${lrs[@]}"; do printf -- "---|"; done; echo
  for opt in adamw shampoo gefen; do
    printf "| %s |" "$opt"
    for lr in "${lrs[@]}"; do
      line=$("$build/example/koptim_$task" --config "$root/example/configs/${task}_$opt.yaml" --lr "$lr" --quiet |
             grep '^final:')
      loss=$(sed -E 's/.*train loss ([^,]+),.*/\1/' <<<"$line")
      metric=$(sed -E 's/.*test (accuracy|rel_l2_error) ([^,]+),.*/\2/' <<<"$line")
      printf " %s (%s) |" "$loss" "$metric"
    done
    echo
  done
done

fi

if [ "$mode" != lr ]; then
echo
echo "## The demo with seeds 1, 2, 3"
out="$(mktemp -d)"
for seed in 1 2 3; do
  echo
  echo "seed $seed:"
  "$build/example/koptim_demo" --seed "$seed" --quiet --output "$out" | grep -E '^(\||digits:|burgers:)'
done
rm -rf "$out"
fi
