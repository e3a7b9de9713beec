"""One flat buffer per rank: every parameter tensor is a view into it.

A sync then is one MPI call on `data` with no packing. On a GPU `data` lives on
the device and `host` is a page-locked mirror allocated once; on the host
backend `host` is `data` itself.
"""
import math

import numpy as np

from .backend import array_module, empty_pinned, to_numpy

DTYPES = (np.float32, np.float64)


def _pointer(array):
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data.ptr


def _check_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.type not in DTYPES:
        raise ValueError("flat buffers hold float32 or float64, not %s" % dtype)
    return dtype


class FlatBuffer:
    """A contiguous 1-D array `data` and `views` of the given shapes into it.
    `tail` elements after the views belong to no tensor: a count that rides
    with the data in the same reduction (syncgrad's sample count)."""

    def __init__(self, data, shapes, tail=0):
        self.data = data
        self.tail = int(tail)
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.views = []
        offset = 0
        for shape in self.shapes:
            size = math.prod(shape)
            self.views.append(data[offset:offset + size].reshape(shape))
            offset += size
        if offset + self.tail != data.size:
            raise ValueError("shapes cover %d elements and a tail of %d, buffer has %d"
                             % (offset, self.tail, data.size))
        self._host = None
        self._whole = None    # (buffer, lo, hi) of a part

    # construction -----------------------------------------------------------
    @classmethod
    def allocate(cls, shapes, dtype=np.float32, xp=np, tail=0):
        shapes = [tuple(s) for s in shapes]
        total = sum(math.prod(s) for s in shapes)
        return cls(xp.zeros(total + tail, dtype=_check_dtype(dtype)), shapes, tail)

    @classmethod
    def pack(cls, arrays, dtype=None, xp=None, tail=0):
        """Copy `arrays` (any shapes, zero-size included) into a new buffer."""
        arrays = list(arrays)
        if xp is None:
            xp = array_module(arrays[0]) if arrays else np
        if dtype is None:
            dtype = arrays[0].dtype if arrays else np.float32
        buf = cls.allocate([a.shape for a in arrays], dtype, xp, tail)
        for view, array in zip(buf.views, arrays):
            view[...] = xp.asarray(array)
        return buf

    @classmethod
    def wrap(cls, arrays, dtype=None, xp=None, tail=0):
        """Adopt `arrays` without a copy when they already are consecutive
        views of one contiguous 1-D buffer (a network's parameters): the
        whole of it, or with tail=0 its first elements (an algorithm's
        gradients, whose count rides behind them); with a `tail`, the buffer
        must end exactly `tail` elements after them. Pack them into a new
        buffer otherwise."""
        arrays = list(arrays)
        base = _common_flat_base(arrays)
        total = sum(a.size for a in arrays)
        if base is not None and (dtype is None or np.dtype(dtype) == base.dtype) and (
                base.size == total + tail or (tail == 0 and base.size > total)):
            _check_dtype(base.dtype)
            data = base if base.size == total + tail else base[:total]
            return cls(data, [a.shape for a in arrays], tail)
        return cls.pack(arrays, dtype=dtype, xp=xp, tail=tail)

    # properties ----------------------------------------------------------------
    @property
    def xp(self):
        return array_module(self.data)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self):
        return self.data.size

    @property
    def nbytes(self):
        return self.data.nbytes

    @property
    def on_device(self):
        return not isinstance(self.data, np.ndarray)

    @property
    def device(self):
        """The CuPy device the data lives on; None on the host."""
        return self.data.device if self.on_device else None

    def like(self):
        """A new zero buffer of the same layout, dtype and device."""
        return FlatBuffer(self.xp.zeros_like(self.data), self.shapes, self.tail)

    def copy(self):
        return FlatBuffer(self.data.copy(), self.shapes, self.tail)

    def part(self, lo, hi):
        """Elements [lo, hi) as a one-tensor FlatBuffer sharing `data` and, on
        a GPU, the matching slice of the pinned mirror (a server's shard): MPI
        on the part goes through the same mirror as MPI on the whole."""
        part = FlatBuffer(self.data[lo:hi], [(hi - lo,)])
        part._whole = (self, lo, hi)      # the mirror's slice, when staged MPI first asks
        return part

    # host mirror ---------------------------------------------------------------
    @property
    def host(self):
        """The host array MPI reads and writes: `data` itself on the host
        backend, a pinned mirror (allocated on first use, then kept) on a GPU."""
        if not self.on_device:
            return self.data
        if self._host is None:
            if self._whole is not None:   # no mirror on the direct path, whole or part
                whole, lo, hi = self._whole
                self._host = whole.host[lo:hi]
            else:
                self._host = empty_pinned(self.data.shape, self.data.dtype)
        return self._host

    def to_host(self, lo=0, hi=None):
        """Device -> pinned mirror (of elements [lo, hi), default all);
        returns the mirror once the copy is done (the stream discipline of
        psgd/mpi.py: MPI may read it at once)."""
        done = self.to_host_async(lo, hi)
        if done is not None:
            done.synchronize()
        return self.host

    def from_host(self, lo=0, hi=None):
        """Pinned mirror -> device (of elements [lo, hi), default all);
        returns once the copy is done, so MPI may write the mirror again and
        kernels may read `data`."""
        done = self.from_host_async(lo, hi)
        if done is not None:
            done.synchronize()

    def to_host_async(self, lo=0, hi=None):
        """The copy of to_host queued on the current stream; returns the
        event that says it is done (None on the host backend). The mirror
        may not be read before that."""
        if not self.on_device:
            return None
        hi = self.size if hi is None else hi
        stream = self.xp.cuda.get_current_stream()
        self.data[lo:hi].get(stream=stream, out=self.host[lo:hi])
        return stream.record()

    def from_host_async(self, lo=0, hi=None):
        """The copy of from_host queued on the current stream (kernels
        queued after it read the copy); the event says when the mirror may
        be written again. None on the host backend."""
        if not self.on_device:
            return None
        hi = self.size if hi is None else hi
        stream = self.xp.cuda.get_current_stream()
        self.data[lo:hi].set(self.host[lo:hi], stream=stream)
        return stream.record()


def shard_bounds(size, count):
    """[(lo, hi)] of `count` contiguous shards of `size` elements, balanced
    by bytes (one dtype: by elements): their sizes differ by at most one."""
    return [(s * size // count, (s + 1) * size // count) for s in range(count)]


def host_copy(array):
    """A NumPy copy of a host or device array (for checkpoints and tests)."""
    return to_numpy(array, copy=True)


def _writable(array):
    # CuPy's flags have no `writeable`: device arrays always are
    return getattr(array.flags, "writeable", True)


def _common_flat_base(arrays):
    """The 1-D contiguous array that `arrays` tile from its first element
    on, in order, without gaps (perhaps leaving elements after them), or None.
    Only memory psgd may write is adopted: a read-only array (or base) is
    packed instead, or the first broadcast into it would fail on rank 1 only.
    The chain of bases ends at the last array: below it may lie any buffer
    (an mmap, a bytearray, ctypes, shared memory, a torch tensor)."""
    if not arrays:
        return None
    xp = array_module(arrays[0])
    base = arrays[0].base
    if not isinstance(base, xp.ndarray):
        return None
    while isinstance(base.base, xp.ndarray):
        base = base.base
    if base.ndim != 1 or not base.flags.c_contiguous or not _writable(base):
        return None
    ptr = _pointer(base)
    total = 0
    for a in arrays:
        if not isinstance(a, xp.ndarray) or a.dtype != base.dtype or not a.flags.c_contiguous \
                or not _writable(a):
            return None
        if a.size and _pointer(a) != ptr + total * base.itemsize:
            return None
        if a.size and a.base is None:
            return None
        total += a.size
    return base if total <= base.size else None
