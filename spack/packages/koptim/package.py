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

    # Compilers are dependencies (Spack 1.0): C++ for koptim, C for FindHDF5's check of its wrapper.
    depends_on("cxx", type="build")
    depends_on("c", type="build")
    depends_on("cmake@3.21:", type="build")
    depends_on("mpi")
    depends_on("lapack")
    depends_on("blas")
    depends_on("kokkos@4.0:")
    depends_on("kokkos-kernels@4.0:")
    # Teuchos from Spack's Trilinos (Teuchos has no variant: Trilinos always builds it). koptim
    # needs only Teuchos' parameter lists, so the Trilinos is built without Kokkos (one Kokkos
    # library in the process, docs/building.md; a Trilinos with Kokkos would also have to repeat
    # koptim's cuda, cuda_arch and wrapper choices) and without the solver stacks: ~kokkos needs
    # ~tpetra, which needs ~amesos2 ~ifpack2 ~muelu; the Epetra leaf packages are off too. Epetra
    # itself stays on: the recipe always enables Triutils, which requires it. The Epetra leaf
    # variants (~amesos~aztec~ifpack~ml~epetraext) exist in Spack's recipe for trilinos@:16 only,
    # so this spec selects Trilinos 16 or older (spack/README.md).
    depends_on(
        "trilinos+mpi~kokkos~tpetra~amesos2~ifpack2~muelu~belos~anasazi"
        "~amesos~aztec~ifpack~ml~epetraext~sacado"
    )
    depends_on("hdf5+mpi", when="+hdf5")
    depends_on("googletest", type="build", when="+tests")
    depends_on("benchmark", type="build", when="+benchmarks")

    # One GPU architecture: Kokkos builds for exactly one (its recipe's cuda_arch is single-valued),
    # so koptim's cuda_arch is single-valued as Kokkos' is (a second value is refused when the spec
    # is parsed), and that one value goes to kokkos, kokkos-kernels and nccl.
    variant(
        "cuda_arch",
        description="CUDA architecture of the GPU (exactly one: Kokkos builds for one)",
        values=("none",) + CudaPackage.cuda_arch_values,
        default="none",
        multi=False,
        sticky=True,
        when="+cuda",
    )
    conflicts(
        "cuda_arch=none",
        when="+cuda",
        msg="+cuda needs the GPU's architecture, one value: e.g. cuda_arch=90 (Kokkos builds for one)",
    )
    depends_on("kokkos+cuda+wrapper", when="+cuda")
    depends_on("kokkos-kernels+cuda+cublas", when="+cuda")
    depends_on("nccl+cuda", when="+nccl")
    for arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos cuda_arch={arch}", when=f"+cuda cuda_arch={arch}")
        depends_on(f"kokkos-kernels cuda_arch={arch}", when=f"+cuda cuda_arch={arch}")
        depends_on(f"nccl cuda_arch={arch}", when=f"+nccl cuda_arch={arch}")
    depends_on("kokkos~cuda", when="~cuda")
    # CUDA 13 needs Kokkos 4.7.01 or later (docs/building.md).
    conflicts("^cuda@13:", when="^kokkos@:4.6")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
            # Teuchos is found through find_package(Teuchos) on Spack's CMAKE_PREFIX_PATH.
            self.define("Teuchos_ROOT", spec["trilinos"].prefix),
            self.define_from_variant("koptim_ENABLE_TESTS", "tests"),
            self.define_from_variant("koptim_ENABLE_BENCHMARK", "benchmarks"),
            self.define("koptim_ENABLE_EXAMPLES", False),
            self.define("koptim_ENABLE_HDF5", "ON" if spec.satisfies("+hdf5") else "OFF"),
            self.define("koptim_ENABLE_NCCL", "ON" if spec.satisfies("+nccl") else "OFF"),
            self.define("koptim_HOST_ARCH", "native" if spec.satisfies("+native") else "none"),
        ]
        if spec.satisfies("+cuda"):
            # Kokkos' nvcc_wrapper (the kokkos package's kokkos_cxx with +wrapper; kokkos-kernels'
            # recipe asks the dependency's package object the same way).
            args.append(self.define("CMAKE_CXX_COMPILER", self["kokkos"].kokkos_cxx))
            # CMake's first compiler check runs before Kokkos' flags apply: without -arch,
            # nvcc_wrapper uses sm_70, which CUDA 13 no longer supports (docs/building.md).
            arch = spec.variants["cuda_arch"].value
            if not isinstance(arch, str):  # a multi-valued variant's tuple (one value: see above)
                arch = arch[0]
            args.append(self.define("CMAKE_CXX_FLAGS", f"-arch=sm_{arch}"))
        return args
