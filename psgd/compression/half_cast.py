"""fp16's encode and decode by the CPU's own conversion instructions
(x86's F16C, present since 2012; ARMv8's FCVT), where it has them: one
pass over the buffer, vectorized, at about a memcpy's cost. The integer
passes over the float32 bits (compiled.py) stay for other CPUs: written
as a chain of selects per element, LLVM vectorizes them poorly
(benchmarks/FINDINGS.md, "fp16 by the CPU's conversion").

Numba has no float16 on the CPU, so the conversions are LLVM's own
fptrunc and fpext to half, written as Numba intrinsics. fptrunc rounds to
nearest even, as IEEE and the integer passes do: the same wire bytes and
residuals (tests/unit/compression/test_compiled.py compares them)."""
import platform

import numpy as np

from .. import jit


def _cpu_converts_halves(numba):
    """Defines _half_bits and _half_value for the loops below; False where
    the CPU has no conversion instructions (LLVM would call a runtime
    function that Numba's JIT may not have)."""
    if platform.machine().lower() not in ("aarch64", "arm64"):
        from llvmlite import binding
        try:
            if not binding.get_host_cpu_features().get("f16c", False):
                return False
        except RuntimeError:     # LLVM cannot tell on this host
            return False
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def half_bits(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
        return types.uint16(types.float32), codegen

    @intrinsic
    def half_value(typingctx, h):
        if h != types.uint16:
            return None

        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
        return types.float32(types.uint16), codegen

    globals().update(_half_bits=half_bits, _half_value=half_value)
    return True


def fp16_encode(u, half):
    """half <- u's fp16 bits; u <- u - D(half); False on a value past fp16's
    range, an inf or a NaN (all exponent bits set). u may be float64: Q
    rounds it to float32 first, as the other passes do."""
    bad = 0
    for i in range(u.size):
        h = _half_bits(np.float32(u[i]))
        bad |= (h & 0x7C00) == 0x7C00
        half[i] = h
        u[i] -= _half_value(h)
    return bad == 0


def fp16_decode(half, out, add):
    for i in range(out.size):
        v = _half_value(half[i])
        out[i] = out[i] + v if add else v


LOOPS = jit.Loops(globals(), ("fp16_encode", "fp16_decode"), setup=_cpu_converts_halves)
