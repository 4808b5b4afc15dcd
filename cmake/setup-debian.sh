#!/usr/bin/env bash
# Installs, only when missing, the Debian 12 packages koptim needs to build, test and run its
# demo. Fast (one dpkg-query) when everything is present. Run as root (or through sudo).
set -euo pipefail

packages=(
  cmake g++ make
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libtrilinos-teuchos-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev liblapacke-dev
  libgtest-dev libbenchmark-dev
  gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "koptim setup: all ${#packages[@]} Debian packages present"
  exit 0
fi

echo "koptim setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
