# Spack recipe for koptim, kept with the sources (spack/README.md says how to use it).
from spack.package import *


class Koptim(CMakePackage, CudaPackage):
    """Neural-network optimizers (Distributed Shampoo, Gefen, the torch.optim diagonal methods)
    on Kokkos, configured with Teuchos parameter lists, distributed with MPI (and NCCL), with
    HDF5 checkpoints."""

    homepage = "https://github.com/koptim/koptim"
    git = "https://github.com/koptim/koptim.git"

    maintainers("koptim")
    license("BSD-3-Clause")

    version("main", branch="main")

    variant("mpi", default=True, description="MPI communicator (required: koptim is built on MPI)")
    variant("hdf5", default=True, description="Checkpoints in HDF5 (koptim::io), parallel HDF5")
    variant("nccl", default=False, description="NCCL data plane for GPU ranks (needs +cuda)")
    variant("native", default=False, description="-march=native for koptim's own code (koptim_HOST_ARCH)")
    variant("tests", default=False, description="Build the unit tests (GoogleTest)")
    variant("benchmarks", default=False, description="Build the perf tests (Google Benchmark)")

    conflicts("~mpi", msg="koptim's communicator and its Teuchos dependency need MPI")
    conflicts("+nccl", when="~cuda", msg="NCCL is the GPU data plane: it needs +cuda")

    depends_on("cmake@3.21:", type="build")
    depends_on("mpi")
    depends_on("lapack")
    depends_on("blas")
    depends_on("kokkos@4.0:")
    depends_on("kokkos-kernels@4.0:")
    # Teuchos from Spack's Trilinos: Spack unifies the DAG, so a Trilinos that uses Kokkos uses
    # this same kokkos node (one Kokkos library in the process, docs/building.md).
    depends_on("trilinos+teuchos+mpi")
    depends_on("hdf5+mpi", when="+hdf5")
    depends_on("nccl", when="+nccl")
    depends_on("googletest", type="build", when="+tests")
    depends_on("benchmark", type="build", when="+benchmarks")

    for arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda+wrapper cuda_arch={arch}", when=f"+cuda cuda_arch={arch}")
        depends_on(f"kokkos-kernels+cuda+cublas cuda_arch={arch}", when=f"+cuda cuda_arch={arch}")
    depends_on("kokkos~cuda", when="~cuda")
    # CUDA 13 needs Kokkos 4.7.01 or later (docs/building.md).
    conflicts("^cuda@13:", when="^kokkos@:4.6")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
            self.define("Trilinos_ROOT", spec["trilinos"].prefix),
            self.define_from_variant("koptim_ENABLE_TESTS", "tests"),
            self.define_from_variant("koptim_ENABLE_BENCHMARK", "benchmarks"),
            self.define("koptim_ENABLE_EXAMPLES", False),
            self.define("koptim_ENABLE_HDF5", "ON" if spec.satisfies("+hdf5") else "OFF"),
            self.define("koptim_ENABLE_NCCL", "ON" if spec.satisfies("+nccl") else "OFF"),
            self.define("koptim_HOST_ARCH", "native" if spec.satisfies("+native") else "none"),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx))
        return args
