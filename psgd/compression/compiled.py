"""bf16's and fp16's passes compiled with Numba, where it is installed (1bit's
are in one_bit_loops.py): an encode or decode reads and writes each
element once or twice while it is in cache, where the NumPy passes
(quantizers.py) make 10-20 trips through a block. The same wire bytes and
residuals as the NumPy passes. Single-threaded: the ranks own the cores. Used for
stripes of at least jit.MIN_SIZE elements (psgd/jit.py).

Each inner loop is a function of its own over a slice: LLVM vectorizes
those, and did not vectorize the same loops nested in the block loop
(benchmarks/FINDINGS.md, "Packing on the host")."""
import numpy as np

from .. import jit


# bf16 and fp16 ------------------------------------------------------------------------
# u may be float64: Q rounds it to float32 first, D widens back (quantizers.py).

def bf16_encode(u, top):
    """top <- u's bf16 bits (nearest even); u <- u - D(top); False on an
    inf or NaN in, or a value rounded past the largest bf16: an exponent
    field of all ones, the largest one can be (a running max of the fields
    vectorizes better than or-ing two compares)."""
    exponent = np.uint32(0x7F800000)
    top_exponent = np.uint32(0)
    for i in range(u.size):
        b = np.float32(u[i]).view(np.uint32)
        r = np.uint32(b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
        top_exponent = max(top_exponent, max(b & exponent, r & exponent))
        top[i] = np.uint16(r >> np.uint32(16))
        u[i] -= np.uint32(r & np.uint32(0xFFFF0000)).view(np.float32)
    return top_exponent != exponent


def bf16_decode(top, out, add):
    for i in range(out.size):
        v = np.uint32(np.uint32(top[i]) << np.uint32(16)).view(np.float32)
        out[i] = out[i] + v if add else v


def _to_half(x):
    """fp16 bits of float32 x, nearest even (quantizers._to_half_bits)."""
    b = np.float32(x).view(np.uint32)
    f = b & np.uint32(0x7FFFFFFF)
    # mod 2^32, as the NumPy pass (Numba widens uint32 sums)
    normal = np.uint32(f + np.uint32(0xC8000FFF) + ((f >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13)
    # below fp16's normals: |x| + 0.5 rounds |x| to the nearest even multiple
    # of 2^-24, the spacing of float32s in [0.5, 1) (np.rint is a libm call)
    tiny = np.uint32(np.float32(np.abs(x) + np.float32(0.5)).view(np.uint32) - np.uint32(0x3F000000))
    h = tiny if f < np.uint32(113 << 23) else normal
    big = np.uint32(0x7E00) if f > np.uint32(0x7F800000) else np.uint32(0x7C00)
    h = big if f >= np.uint32(143 << 23) else h
    return np.uint32(h | ((b >> np.uint32(16)) & np.uint32(0x8000)))


def _from_half(h):
    """float32 value of fp16 bits h."""
    m = h & np.uint32(0x3FF)
    e = h & np.uint32(0x7C00)
    bits = (h & np.uint32(0x7FFF)) << np.uint32(13)
    bits += np.uint32(0x38000000) if e != np.uint32(0x7C00) else np.uint32(0x70000000)
    value = np.uint32(bits).view(np.float32)
    tiny = np.float32(np.int32(m)) * np.float32(2.0 ** -24)     # subnormal: exact
    value = tiny if e == 0 else value
    return -value if h & np.uint32(0x8000) else value


def _half_bits(u, half):
    bad = np.uint32(0)
    for i in range(u.size):
        h = _to_half(np.float32(u[i]))
        bad |= np.uint32(np.uint32(h & np.uint32(0x7C00)) == np.uint32(0x7C00))
        half[i] = h
    return bad


def _subtract_halves(u, half):
    for i in range(u.size):
        u[i] -= _from_half(np.uint32(half[i]))


def fp16_encode(u, half, step):
    """half <- u's fp16 bits; u <- u - D(half); False on a value past fp16's
    range, an inf or a NaN. Two loops per cache-sized chunk: together in
    one loop they ran 15-30% slower."""
    bad = np.uint32(0)
    for lo in range(0, u.size, step):
        hi = min(lo + step, u.size)
        bad |= _half_bits(u[lo:hi], half[lo:hi])
        _subtract_halves(u[lo:hi], half[lo:hi])
    return bad == 0


def fp16_decode(half, out, add):
    for i in range(out.size):
        v = _from_half(np.uint32(half[i]))
        out[i] = out[i] + v if add else v


# nnan/ninf would drop the finiteness checks (so not fastmath=True)
LOOPS = jit.Loops(globals(), ("_to_half", "_from_half", "_half_bits", "_subtract_halves",
                              "bf16_encode", "bf16_decode", "fp16_encode", "fp16_decode"),
                  fastmath={"reassoc", "contract"})
