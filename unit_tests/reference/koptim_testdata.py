"""The counter-based test data shared by the reference generators and unit_tests/koptim_TestData.hpp:
splitmix64 hashes of (seed, tensor, step, index) mapped to values on a 2^-23 grid, exact in
float32 and float64, so every implementation starts from bit-identical numbers."""

M64 = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def hash4(seed, tensor, step, index):
    return mix(mix(mix(mix(seed) ^ tensor) ^ step) ^ index)


def value(seed, tensor, step, index):
    """Uniform in [-1, 1) on a 2^-23 grid times 2^(step % 4 - 1); zero for 1 in 8 gradient entries."""
    h = hash4(seed, tensor, step, index)
    u = ((h >> 40) - (1 << 23)) / float(1 << 23)
    if step == 0:
        return u
    if (h & 7) == 0:
        return 0.0
    return u * 2.0 ** ((step % 4) - 1)
