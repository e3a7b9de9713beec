"""The quantizers' passes compiled with Numba, where it is installed: an
encode or decode reads and writes each element once or twice while it is
in cache, where the NumPy passes (one_bit.py, quantizers.py) make 10-20
trips through a block. The same wire bytes and residuals as the NumPy
passes, except 1bit's block means: summed here in vector lanes, there
pairwise, so a mean may differ in its last bits (every rank still decodes
the same bytes). Single-threaded: the ranks own the cores. Used for
stripes of at least jit.MIN_SIZE elements (psgd/jit.py).

Each inner loop is a function of its own over a slice: LLVM vectorizes
those, and did not vectorize the same loops nested in the block loop
(benchmarks/FINDINGS.md, "Packing on the host")."""
import numpy as np

from .. import jit


# 1bit -----------------------------------------------------------------------------

def _pack_signs(v, bits):
    """bits <- v >= 0, eight to a byte, first element in the lowest bit."""
    whole = v.size >> 3
    for j in range(whole):
        byte = 0
        for t in range(8):
            byte |= (v[8 * j + t] >= 0) << t
        bits[j] = byte
    if whole * 8 < v.size:
        byte = 0
        for t in range(v.size - whole * 8):
            byte |= (v[8 * whole + t] >= 0) << t
        bits[whole] = byte


def _class_sums(v):
    """(sum, sum of the non-negative, their count): an inf or NaN makes the
    sum, so a mean, non-finite (max() would drop a NaN from the second)."""
    total, up, ones = 0.0, 0.0, 0
    for i in range(v.size):
        x = v[i]
        total += x
        up += max(x, 0.0)
        ones += x >= 0
    return total, up, ones


def _subtract_means(v, high, low):
    for i in range(v.size):
        x = v[i]
        v[i] = x - (high if x >= 0 else low)


def one_bit_encode(u, bits, means, block, step):
    """bits <- u >= 0 packed; means[k] <- (mean of the non-negative, mean of
    the negative) of block k, as float32; u <- u - D(Q(u))."""
    n = u.size
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        _pack_signs(u[lo:hi], bits[lo >> 3:(hi + 7) >> 3])
        for a in range(lo, hi, block):
            b = min(a + block, hi)
            total, up, ones = _class_sums(u[a:b])
            k = a // block
            means[k, 0] = up / max(ones, 1)
            means[k, 1] = (total - up) / max(b - a - ones, 1)
            _subtract_means(u[a:b], means[k, 0], means[k, 1])


def _place_means(bits, first, v, high, low, add):
    """v[i] <- (or +=) high where bit first + i is set, else low: a byte at
    a time where the block starts on a byte (the loops vectorize)."""
    start = 0
    if first & 7 == 0:
        start = v.size & ~7
        base = first >> 3
        if add:
            for i in range(start):
                v[i] += high if (bits[base + (i >> 3)] >> (i & 7)) & 1 else low
        else:
            for i in range(start):
                v[i] = high if (bits[base + (i >> 3)] >> (i & 7)) & 1 else low
    for i in range(start, v.size):
        j = first + i
        m = high if (bits[j >> 3] >> (j & 7)) & 1 else low
        v[i] = v[i] + m if add else m


def one_bit_decode(bits, means, out, add, block):
    for a in range(0, out.size, block):
        k = a // block
        _place_means(bits, a, out[a:a + block], means[k, 0], means[k, 1], add)


# bf16 and fp16 ------------------------------------------------------------------------
# u may be float64: Q rounds it to float32 first, D widens back (quantizers.py).

def bf16_encode(u, top):
    """top <- u's bf16 bits (nearest even); u <- u - D(top); False on an
    inf or NaN in, or a value rounded past the largest bf16."""
    bad = 0
    for i in range(u.size):
        b = np.float32(u[i]).view(np.uint32)
        r = np.uint32(b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
        bad |= ((b & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) | (
            (r & np.uint32(0x7F800000)) == np.uint32(0x7F800000))
        top[i] = r >> np.uint32(16)
        u[i] -= np.uint32(r & np.uint32(0xFFFF0000)).view(np.float32)
    return bad == 0


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


# reassoc lets 1bit's block sums vectorize; nnan/ninf would drop the
# finiteness checks (so not fastmath=True)
LOOPS = jit.Loops(globals(), ("_pack_signs", "_class_sums", "_subtract_means", "_place_means",
                              "_to_half", "_from_half", "_half_bits", "_subtract_halves",
                              "one_bit_encode", "one_bit_decode",
                              "bf16_encode", "bf16_decode", "fp16_encode", "fp16_decode"),
                  fastmath={"reassoc", "contract"})
