#!/usr/bin/env bash
# valgrind memcheck of the single-process unit-test programs (the MPI programs run under
# mpiexec and are covered by the asan preset instead).
#   bash cmake/valgrind-unit-tests.sh [build dir (default build/valgrind)] [program ...]
# (programs default to all six: koptim_core koptim_config koptim_diagonal koptim_robustness koptim_gefen
# koptim_shampoo; KOPTIM_VALGRIND_FILTER sets a gtest filter).
# Needs the valgrind preset's build (cmake --preset valgrind && cmake --build --preset valgrind -j 2):
# the test preset's build carries -march=native, whose AVX-512 instructions valgrind 3.19 cannot
# run. Exit status 1 when any program has a memcheck error (invalid read or write, use of uninitialised values, a definite or indirect leak) or a
# failing test. Open MPI's and PMIx's own reports are suppressed with the files they ship; koptim's
# few entries are in cmake/valgrind.supp, each explained there.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/valgrind}
shift || true
programs=("$@")
[ ${#programs[@]} -eq 0 ] && programs=(koptim_core koptim_config koptim_diagonal koptim_robustness koptim_gefen koptim_shampoo)
filter=${KOPTIM_VALGRIND_FILTER:-*}
supp=(--suppressions=cmake/valgrind.supp)
for f in /usr/share/openmpi/openmpi-valgrind.supp /usr/lib/x86_64-linux-gnu/pmix2/share/pmix/pmix-valgrind.supp; do
  [ -f "$f" ] && supp+=("--suppressions=$f")
done
if grep -q "^koptim_HOST_ARCH:STRING=native" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "valgrind: $build was configured with koptim_HOST_ARCH=native, which valgrind cannot run on AVX-512" \
       "machines; use the valgrind preset (cmake --preset valgrind && cmake --build --preset valgrind -j 2)" >&2
  exit 2
fi
if ! command -v valgrind > /dev/null; then
  echo "valgrind: not installed (apt-get install valgrind)" >&2
  exit 2
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
status=0
for t in "${programs[@]}"; do
  exe="$build/unit_tests/$t"
  if [ ! -x "$exe" ]; then
    echo "valgrind: $exe is not built" >&2
    exit 2
  fi
  log="$build/valgrind_$t.log"
  start=$(date +%s)
  if valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
      --errors-for-leak-kinds=definite,indirect --track-origins=yes --num-callers=40 "${supp[@]}" --log-file="$log" \
      "$exe" --gtest_filter="$filter" > "$build/valgrind_$t.out" 2>&1; then
    rc=0
  else
    rc=$?
  fi
  summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1 | sed 's/^==[0-9]*== //')
  tests=$(grep -E "^\[  (PASSED|FAILED)  \]" "$build/valgrind_$t.out" | tr '\n' ' ')
  echo "$t: exit $rc, $((  $(date +%s) - start )) s; $summary; $tests"
  [ "$rc" -ne 0 ] && status=1
done
exit $status
