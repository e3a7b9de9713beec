"""The simulated device: several GPUs, each with its streams, and arrays
that live in their own memory and change only when their stream's work runs.

Every array has two NumPy arrays: `_phys`, the device memory as it is now
(what MPI and the copies see, read through its pointer), and `_log`, the
values the program would see if every queued operation had already run.
`_log` exists only to give results their shapes and dtypes at launch time,
as a real launch knows them; nothing is ever read from it. An operation is
computed at once on `_log` and queued, on the current stream of the current
device, for `_phys`: it runs when that stream (or an event recorded on it)
is synchronized. Fresh device memory holds NaN (floats) or a sentinel
(ints), so reading it before its initializing kernel has run shows up.

Contracts modelled are the weakest CuPy/CUDA give: get(stream=s, out=...)
and set(host, stream) are asynchronous and read/write the host array when
they run; a copy from pageable host memory (asarray) takes its snapshot at
the call (cudaMemcpy from pageable memory returns once the host buffer is
consumed); reading a value into Python (float(), .get() without a stream)
synchronizes the current stream, as CuPy does. The current-device rule
holds: an operation runs on the current device, and an array of another
device given to it is an error (peer access is never available here), as is
a stream of another device. The current device and stream are each
thread's own, as in CUDA and CuPy: a new thread (psgd's transfer thread)
starts on device 0 and its null stream. Device memory reaches MPI only through DLPack
or __cuda_array_interface__, and only when the simulated MPI library is
CUDA-aware (`set_mpi`): a host-only MPI given a device pointer fails at the
call, where a real one would crash or send garbage.
"""
import collections
import os
import threading

import numpy as np

DEVICE_COUNT = 2


class PeerAccessError(ValueError):
    pass


class Stream:
    def __init__(self, null=False, device_id=None):
        self._queue = collections.deque()
        self._issued = 0
        self._done = 0
        self.device_id = _state.device if device_id is None else device_id
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
        here = _state.here()
        here.stack.append(here.current)
        self.use()
        return self

    def __exit__(self, *exc):
        here = _state.here()
        here.current = here.stack.pop()

    def use(self):
        check_device(self.device_id, "the stream")
        _state.here().current = self
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
        """The query of a running device: each one lets the event's stream
        advance by one operation (the device works while the host polls)."""
        if self._stream is None or self._stream._done >= self._position:
            return True
        self._stream._run_until(self._stream._done + 1)
        return self._stream._done >= self._position


class _PerThread:
    """An attribute each thread has its own of (its class keeps a
    threading.local in `_threads`), `first(obj)` in a thread that has not
    set it yet."""

    def __init__(self, first):
        self.first = first

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if not hasattr(obj._threads, self.name):
            setattr(obj._threads, self.name, self.first(obj))
        return getattr(obj._threads, self.name)

    def __set__(self, obj, value):
        setattr(obj._threads, self.name, value)


class _Device:
    """One GPU: its null stream (one for every thread: the legacy default
    stream), the streams made on it, and each thread's current stream."""
    current = _PerThread(lambda device: device.null)
    stack = _PerThread(lambda device: [])

    def __init__(self, device_id):
        self.null = Stream(null=True, device_id=device_id)
        self.streams = [self.null]
        self._threads = threading.local()


class _State:
    """The GPUs, shared by the process's threads; each thread has its own
    current device (device 0 in a new thread, as cudaSetDevice's is)."""
    device = _PerThread(lambda state: 0)
    device_stack = _PerThread(lambda state: [])

    def __init__(self):
        self._threads = threading.local()
        self.devices = {}
        self.pinned = []          # (start, end) of every page-locked allocation
        self.mpi_cuda_aware = False
        self.toolkit = True       # CUDA headers present: kernels compile
        self.allocated = 0        # device arrays made (a per-sync allocation shows)
        self.shared_gpus = False  # share_gpus(): every process of a host on the same GPUs

    def here(self):
        return self.on(self.device)

    def on(self, device_id):
        if device_id not in self.devices:
            self.devices[device_id] = _Device(device_id)
        return self.devices[device_id]


_state = _State()


def reset(device_count=DEVICE_COUNT):
    """A fresh device (install does it): device 0 current, nothing queued."""
    global DEVICE_COUNT
    DEVICE_COUNT = device_count
    _state.__init__()


reset()


def get_current_stream():
    return _state.here().current


def pci_bus_id(device_id):
    """Each process's simulated GPUs are its own, unless share_gpus() made
    the processes of a host see the same ones (more ranks than GPUs)."""
    owner = "shared" if _state.shared_gpus else os.getpid()
    return "sim-%s:%02x:00.0" % (owner, device_id)


def share_gpus(shared=True):
    _state.shared_gpus = shared


def current_device():
    return _state.device


def use_device(device_id):
    if not 0 <= int(device_id) < DEVICE_COUNT:
        raise RuntimeError("cudaErrorInvalidDevice: invalid device ordinal %d" % device_id)
    _state.device = int(device_id)


def check_device(device_id, what="an array"):
    """The current-device rule of a launch."""
    if device_id != _state.device:
        raise PeerAccessError(
            "The device where %s resides (%d) is different from the current device (%d). "
            "Peer access is unavailable." % (what, device_id, _state.device))


def synchronize_all(device_id=None):
    devices = _state.devices.values() if device_id is None else [_state.on(device_id)]
    for dev in list(devices):
        for stream in dev.streams:
            stream.synchronize()


def pending():
    """Operations queued and not yet run, over all streams (for tests)."""
    return sum(s._issued - s._done for d in _state.devices.values() for s in d.streams)


def issued():
    """Operations ever queued, over all streams of all devices (for tests)."""
    return sum(s._issued for d in _state.devices.values() for s in d.streams)


def new_stream(non_blocking=False):
    stream = Stream()
    _state.here().streams.append(stream)
    return stream


def enqueue(op):
    _state.here().current._enqueue(op)


# MPI and the device ---------------------------------------------------------------
def set_mpi(cuda_aware):
    """Whether the simulated MPI library takes device pointers; returns the
    previous setting."""
    previous, _state.mpi_cuda_aware = _state.mpi_cuda_aware, bool(cuda_aware)
    return previous


def hand_to_mpi(what):
    """A device pointer leaves the array (DLPack, __cuda_array_interface__):
    only a CUDA-aware MPI may have it."""
    if not _state.mpi_cuda_aware:
        raise BufferError("simcupy: device memory (%s) handed to an MPI that is not "
                          "CUDA-aware: a real run crashes or sends garbage here" % what)


# memory -------------------------------------------------------------------------
def poisoned(like):
    """Fresh device memory: the shape and dtype of `like`, and garbage."""
    out = np.empty_like(like)            # the same layout as the logical result
    if out.dtype.kind in "fc":
        out.fill(np.nan)
    elif out.dtype.kind in "iu":
        out.fill(np.iinfo(out.dtype).max // 3)
    _state.allocated += 1
    return out


def empty_pinned(shape, dtype=np.float32, order="C"):
    host = np.empty(shape, dtype=dtype, order=order)
    start = host.__array_interface__["data"][0]
    _state.pinned.append((start, start + host.nbytes, host))
    return host


def is_pinned(array):
    start = array.__array_interface__["data"][0]
    return any(lo <= start < hi for lo, hi, _ in _state.pinned)


def pinned_allocations():
    return len(_state.pinned)
