#!/usr/bin/env bash
# Assembles the GPU run kit: koptim's test and perf programs from a build folder, stripped, with
# every shared library they need that a bare machine lacks, in one folder small enough to carry
# (the machine the kit was made for takes at most 64 MiB from the working tree and has CUDA,
# cuBLAS and NCCL but none of koptim's Debian dependencies).
#
#   bash perf_tests/gpu/assemble_kit.sh build/cuda build/gpu-kit   # then carry build/gpu-kit.tar.xz
#   python3 -m tarfile -e build/gpu-kit.tar.xz /tmp && bash /tmp/gpu-kit/run_kit.sh   # on the GPU machine
#
# The archive is xz at its strongest setting in one thread (a few minutes on 2 cores): every program
# links the same static library, and xz's 64 MiB window finds those copies again, which gzip's
# 32 KiB one cannot (4 CUDA test programs: 13.5 MB as .tar.gz, 4.8 MB as .tar.xz). Python's
# tarfile unpacks it where no xz is installed. Without xz here it falls back to gzip.
#
# Libraries the target machine has are left out: the C/C++ runtime and glibc, and CUDA's own
# (libcuda, libcudart, libcublas*, libcusolver*, libnccl, ...), which its CUDA install and its
# Python packages (nvidia-cublas, nvidia-nccl-cu13) provide; run_kit.sh finds those. glibc means
# every library of the libc6 package, whose private ABI must match the target's own libc.so.6:
# libresolv, libutil, libanl, libnsl.so.1, libmvec and the NSS modules besides libc, libm,
# libdl, libpthread and librt (libcrypt is not glibc's: libxcrypt; libnsl.so.2 is libnsl2's).
#
# Lookups that may find nothing (ldd of a file that is not dynamic, ompi_info, orted, PMIx's
# folder) never stop the script under set -e: what is missing is said, and left out.
set -euo pipefail
build=${1:?build folder (e.g. build/cuda)}
kit=${2:-gpu-kit}
limit_mib=${KOPTIM_KIT_LIMIT_MIB:-60}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib"
programs=(unit_tests/koptim_core unit_tests/koptim_diagonal unit_tests/koptim_gefen unit_tests/koptim_shampoo
          unit_tests/koptim_comm unit_tests/koptim_nccl unit_tests/koptim_checkpoint unit_tests/koptim_steady_state
          unit_tests/koptim_robustness perf_tests/koptim_perf_diagonal perf_tests/koptim_perf_gefen
          perf_tests/koptim_perf_shampoo perf_tests/koptim_perf_comm example/koptim_example_checks
          example/koptim_digits example/koptim_burgers)
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libutil\.|libanl\.|libnsl\.so\.1|libmvec\.|libnss_|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcusolver|libcusparse|libnccl|libnvJitLink|libnvrtc)'
# Copies into $kit/lib every shared library $1 needs that the target machine lacks (nothing for a
# file that is not dynamically linked: ldd then fails, which is not an error here).
copy_libraries() {
  { ldd "$1" 2>/dev/null || true; } | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [ -e "$kit/lib/$name" ] || cp -L "$path" "$kit/lib/$name"
  done
}
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || { echo "assemble_kit: $build/$p not built, left out" >&2; continue; }
  cp "$build/$p" "$kit/bin/"
  copy_libraries "$build/$p"
done
# Open MPI loads its components at run time and a singleton MPI_Init starts an orted: both, its
# help texts and PMIx's components come along (run_kit.sh points Open MPI at them).
ompi_pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p' || true)
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p' || true)
if [ -z "$ompi_pkglib" ] || [ ! -d "$ompi_pkglib" ]; then
  echo "assemble_kit: no Open MPI components found (ompi_info missing, or no pkglibdir): left out;" \
       "the kit's MPI programs then need an Open MPI on the target machine" >&2
else
  mkdir -p "$kit/openmpi/bin" "$kit/openmpi/lib" "$kit/openmpi/share" "$kit/openmpi/pmix"
  cp -rL "$ompi_pkglib" "$kit/openmpi/lib/components"
  if [ -n "$ompi_pkgdata" ] && [ -d "$ompi_pkgdata" ]; then
    cp -rL "$ompi_pkgdata" "$kit/openmpi/share/openmpi"
  else
    echo "assemble_kit: Open MPI's help texts (pkgdatadir) not found: left out (its messages lose their text)" >&2
  fi
  orted=$(command -v orted || true)
  if [ -n "$orted" ]; then
    cp -L "$orted" "$kit/openmpi/bin/"
  else
    echo "assemble_kit: orted not found: left out (a singleton MPI_Init on the target then needs its own)" >&2
  fi
  pmix=$(ls -d /usr/lib/x86_64-linux-gnu/pmix*/lib/pmix 2>/dev/null | head -1 || true)
  if [ -n "$pmix" ]; then
    cp -rL "$pmix"/. "$kit/openmpi/pmix/"
  else
    echo "assemble_kit: PMIx's components (/usr/lib/x86_64-linux-gnu/pmix*/lib/pmix) not found: left out" >&2
  fi
  for f in "$kit"/openmpi/bin/* "$kit"/openmpi/lib/components/*.so "$kit"/openmpi/pmix/*.so; do
    if [ -e "$f" ]; then copy_libraries "$f"; fi
  done
fi
strip --strip-unneeded "$kit"/bin/* "$kit"/lib/* 2>/dev/null || true
cp "$here/run_kit.sh" "$here/../peers/run_peers.py" "$here/../report.py" "$kit/"
# The tests' reference data.
mkdir -p "$kit/reference" && cp -r "$here/../../unit_tests/reference/"*.txt "$kit/reference/" 2>/dev/null || true
# The examples' configurations and the digits data (their short runs at the end of run_kit.sh).
mkdir -p "$kit/example" && cp -r "$here/../../example/configs" "$here/../../example/data" "$kit/example/"
if command -v xz > /dev/null; then
  archive=$kit.tar.xz
  tar -C "$(dirname "$kit")" -cf - "$(basename "$kit")" | xz -9e -T1 > "$archive"
else
  archive=$kit.tar.gz
  tar -C "$(dirname "$kit")" -czf "$archive" "$(basename "$kit")"
fi
size=$(du -m "$archive" | cut -f1)
echo "assemble_kit: $archive is ${size} MiB ($(ls "$kit/bin" | wc -l) programs, $(ls "$kit/lib" | wc -l) libraries)"
if [ "$size" -gt "$limit_mib" ]; then
  echo "assemble_kit: over ${limit_mib} MiB; leave programs out (edit the list) or split the carry" >&2
  exit 1
fi
