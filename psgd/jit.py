"""Host loops compiled with Numba, where it is installed (the "fast"
extra), for buffers of at least MIN_SIZE elements: a loop reads and writes
each element once, where NumPy's blocked passes make several trips through
a block. Below MIN_SIZE a pass is one block of a few NumPy calls anyway,
and a process that never meets a large buffer never imports Numba (its
import and the cached loops cost a process about 0.5 s: every small test
job would pay it). PSGD_ACCEL=numpy or numexpr keeps the NumPy passes.

A module of loops names them in a Loops object; the first large buffer
compiles them all (from Numba's cache on disk after the first run), each
loop replacing the module's own function, so loops that call each other
get the compiled callees. A module whose loops need more than Numba
(an intrinsic, a CPU feature) passes `setup`: called with numba before
the loops compile, it defines what they need in the module's namespace,
or returns False to keep the other passes."""
import importlib.util

from . import settings

MIN_SIZE = 1 << 17     # psgd/kernels.py's BLOCK: one block's passes are cheap already


class Loops:
    def __init__(self, namespace, names, fastmath=False, setup=None):
        self.namespace, self.names, self.fastmath = namespace, names, fastmath
        self.setup = setup
        self.compiled = None         # not tried yet

    def ready(self, size):
        """Whether a buffer of `size` elements goes through the compiled
        loops; compiles them the first time the answer is yes."""
        if size < MIN_SIZE or settings.get("PSGD_ACCEL") != "auto":
            return False
        if self.compiled is None:
            self.compiled = self._compile()
        return self.compiled

    def _compile(self):
        if importlib.util.find_spec("numba") is None:
            return False
        try:
            import numba
        except ImportError:    # e.g. a Numba that refuses this NumPy: the NumPy passes
            return False
        if self.setup is not None and not self.setup(numba):
            return False
        jit = numba.njit(cache=True, nogil=True, fastmath=self.fastmath)
        for name in self.names:
            self.namespace[name] = jit(self.namespace[name])
        return True
