"""simcupy: a CuPy stand-in over NumPy for the test suite (no GPU needed).

Arrays live in their own memory and copies and kernels take effect only
when the stream they were issued on (or an event recorded on it) is
synchronized (device.py explains the model); MPI sees host memory, and
device memory handed to it through DLPack or __cuda_array_interface__
(CUDA-aware MPI only: set_mpi), exactly as it is at the call. So a missing
synchronization on psgd's sync path sends a stale or NaN model, a device
pointer given to a host-only MPI fails, and so does an array used while
another device is current: a test fails.

    import simcupy; simcupy.install()   # psgd's cupy backend now runs here
    ...; simcupy.uninstall()
"""
import numpy as _np

from . import cupyx as _cupyx
from . import device as _device
from .array import Device, launch, ndarray
from .device import set_mpi, share_gpus  # noqa: F401
from .kernel import CompileException, ElementwiseKernel

__version__ = "0.sim"


def get_array_module(*args):
    return _self if any(isinstance(a, ndarray) for a in args) else _np


def _from_host(obj, dtype=None, copy=True):
    host = _np.array(obj, dtype=dtype, copy=True)       # pageable: consumed at the call
    out = ndarray(host.copy(), _device.poisoned(host))
    _device.enqueue(lambda: out._phys.__setitem__(Ellipsis, host))
    return out


def asarray(obj, dtype=None, order=None):
    if isinstance(obj, ndarray):
        return obj if dtype is None or _np.dtype(dtype) == obj.dtype else obj.astype(dtype)
    return _from_host(obj, dtype)


def array(obj, dtype=None, copy=True, order="K", ndmin=0):
    if isinstance(obj, ndarray):
        return obj.astype(dtype or obj.dtype, copy=True)
    return _from_host(obj, dtype)


def _creator(name):
    fn = getattr(_np, name)

    def create(*args, **kwargs):
        host = fn(*args, **kwargs)                      # the value the kernel writes
        out = ndarray(host, _device.poisoned(host))
        if name != "empty":                             # empty launches nothing
            value = host.copy()
            _device.enqueue(lambda: out._phys.__setitem__(Ellipsis, value))
        return out
    return create


for _name in ("zeros", "ones", "empty", "full", "arange", "linspace", "eye"):
    globals()[_name] = _creator(_name)


def _like(name):
    create = _creator(name[:-len("_like")])

    def create_like(a, *args, dtype=None, **kwargs):
        return create(a.shape, *args, dtype=dtype or a.dtype, **kwargs)
    return create_like


for _name in ("zeros_like", "ones_like", "empty_like", "full_like"):
    globals()[_name] = _like(_name)


class _Namespace:
    def __init__(self, **items):
        self.__dict__.update(items)


class CUDARuntimeError(RuntimeError):
    pass


class _StreamType:
    """cupy.cuda.Stream: a new stream on the current device; `.null` is the
    current device's null stream."""

    def __call__(self, null=False, non_blocking=False):
        return _device._state.here().null if null else _device.new_stream(non_blocking)

    null = property(lambda self: _device._state.here().null)


cuda = _Namespace(
    Stream=_StreamType(),
    Event=_device.Event, get_current_stream=_device.get_current_stream, Device=Device,
    runtime=_Namespace(getDeviceCount=lambda: _device.DEVICE_COUNT, free=lambda ptr: None,
                       CUDARuntimeError=CUDARuntimeError,
                       deviceSynchronize=lambda: _device.synchronize_all(
                           _device.current_device())),
    compiler=_Namespace(CompileException=CompileException),
    alloc_pinned_memory=None)


class _Generator:
    """NumPy's generator, its draws landing on the device like a kernel's."""

    def __init__(self, seed=None):
        self._rng = _np.random.default_rng(seed)

    def __getattr__(self, name):
        draw = getattr(self._rng, name)

        def device_draw(*args, **kwargs):
            return asarray(draw(*args, **kwargs))
        return device_draw


random = _Namespace(default_rng=_Generator)


def _as_strided(x, shape=None, strides=None):
    st = _np.lib.stride_tricks
    return ndarray(st.as_strided(x._log, shape, strides), st.as_strided(x._phys, shape, strides),
                   base=x)


lib = _Namespace(stride_tricks=_Namespace(as_strided=_as_strided))


def __getattr__(name):
    """Every other NumPy function or constant, launched on the device."""
    value = getattr(_np, name)
    if callable(value) and not isinstance(value, type):
        def launched(*args, **kwargs):
            return launch(value, *args, **kwargs)
        launched.__name__ = name
        return launched
    return value


def install(device_count=_device.DEVICE_COUNT, toolkit=True, nccl=False):
    """Make psgd's cupy backend run on a fresh stand-in: `device_count`
    GPUs, device 0 current, a host-only MPI (set_mpi), kernels that compile
    unless `toolkit` is False (a CuPy without the CUDA headers), and
    cupy.cuda.nccl only with `nccl` (a CuPy without libnccl otherwise)."""
    from psgd import backend
    _device.reset(device_count)
    _device._state.toolkit = toolkit
    # As in CuPy 14, cupy.cuda.nccl is there only once imported by its name.
    cuda.__dict__.pop("nccl", None)
    if nccl:
        from . import nccl as _nccl
        _sys.modules[__name__ + ".cuda.nccl"] = _nccl
    else:
        _sys.modules.pop(__name__ + ".cuda.nccl", None)
    return backend.use_device_modules(_self, _cupyx)


def uninstall(previous=None):
    from psgd import backend
    backend.use_device_modules(*(previous or (None, None)))


import sys as _sys  # noqa: E402

_self = _sys.modules[__name__]
