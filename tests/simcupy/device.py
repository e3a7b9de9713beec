"""The simulated device: streams, events, and arrays that live in their own
memory and change only when their stream's work runs.

Every array has two NumPy arrays: `_phys`, the device memory as it is now
(what MPI and the copies see, read through its pointer), and `_log`, the
values the program would see if every queued operation had already run.
`_log` exists only to give results their shapes and dtypes at launch time,
as a real launch knows them; nothing is ever read from it. An operation is
computed at once on `_log` and queued, on the current stream, for `_phys`:
it runs when that stream (or an event recorded on it) is synchronized.
Fresh device memory holds NaN (floats) or a sentinel (ints), so reading it
before its initializing kernel has run shows up.

Contracts modelled are the weakest CuPy/CUDA give: get(stream=s, out=...)
and set(host, stream) are asynchronous and read/write the host array when
they run; a copy from pageable host memory (asarray) takes its snapshot at
the call (cudaMemcpy from pageable memory returns once the host buffer is
consumed); reading a value into Python (float(), .get() without a stream)
synchronizes the current stream, as CuPy does.
"""
import collections

import numpy as np


class Stream:
    def __init__(self, null=False):
        self._queue = collections.deque()
        self._issued = 0
        self._done = 0
        self.ptr = 0 if null else id(self)

    def _enqueue(self, op):
        self._queue.append(op)
        self._issued += 1

    def _run_until(self, position):
        while self._done < position:
            op = self._queue.popleft()
            self._done += 1
            op()

    def synchronize(self):
        self._run_until(self._issued)

    def record(self, event=None):
        event = event if event is not None else Event()
        event._stream, event._position = self, self._issued
        return event

    @property
    def done(self):
        return self._done == self._issued

    def __enter__(self):
        _state.stack.append(_state.current)
        _state.current = self
        return self

    def __exit__(self, *exc):
        _state.current = _state.stack.pop()

    def use(self):
        _state.current = self
        return self


class Event:
    def __init__(self, *args, **kwargs):
        self._stream, self._position = None, 0

    def record(self, stream=None):
        (stream or get_current_stream()).record(self)

    def synchronize(self):
        if self._stream is not None:
            self._stream._run_until(self._position)

    @property
    def done(self):
        return self._stream is None or self._stream._done >= self._position


class _State:
    def __init__(self):
        self.null = Stream(null=True)
        self.current = self.null
        self.stack = []
        self.streams = [self.null]
        self.pinned = []          # (start, end) of every page-locked allocation


_state = _State()
Stream.null = _state.null


def get_current_stream():
    return _state.current


def synchronize_all():
    for stream in _state.streams:
        stream.synchronize()


def pending():
    """Operations queued and not yet run, over all streams (for tests)."""
    return sum(s._issued - s._done for s in _state.streams)


def new_stream(non_blocking=False):
    stream = Stream()
    _state.streams.append(stream)
    return stream


def enqueue(op):
    _state.current._enqueue(op)


# memory -------------------------------------------------------------------------
def poisoned(like):
    """Fresh device memory: the shape and dtype of `like`, and garbage."""
    out = np.empty_like(like)            # the same layout as the logical result
    if out.dtype.kind in "fc":
        out.fill(np.nan)
    elif out.dtype.kind in "iu":
        out.fill(np.iinfo(out.dtype).max // 3)
    return out


def empty_pinned(shape, dtype=np.float32, order="C"):
    host = np.empty(shape, dtype=dtype, order=order)
    start = host.__array_interface__["data"][0]
    _state.pinned.append((start, start + host.nbytes, host))
    return host


def is_pinned(array):
    start = array.__array_interface__["data"][0]
    return any(lo <= start < hi for lo, hi, _ in _state.pinned)
