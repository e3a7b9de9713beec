"""Array backend: NumPy on the host, CuPy on a GPU.

`get_backend("auto")` picks CuPy when it imports, sees a device and can
compile a kernel there (a CuPy wheel without its [ctk] extra on a host with
only the driver cannot: it has no CUDA headers), NumPy otherwise; without a
name, `PSGD_BACKEND` (default auto) names it. The GPU is chosen by the
rank's local (per-node) rank, or from an explicit device-id list; more
ranks on a host than GPUs share them, and say so.
"""
import warnings

import numpy as np

from . import settings
from .errors import UsageError

BACKENDS = ("auto", "numpy", "cupy")


class Backend:
    """The array module (`xp`) a rank computes with, and its device."""

    def __init__(self, xp, device_id=None):
        self.xp = xp
        self.device_id = device_id

    @property
    def name(self):
        return "cupy" if self.is_gpu else "numpy"

    @property
    def is_gpu(self):
        return self.xp is not np

    def to_host(self, array):
        """A NumPy copy (or the array itself on the host backend)."""
        return to_numpy(array)

    def asarray(self, array, dtype=None):
        return self.xp.asarray(array, dtype=dtype)

    def __repr__(self):
        dev = "" if self.device_id is None else " device %d" % self.device_id
        return "<Backend %s%s>" % (self.name, dev)


NUMPY = Backend(np)


# The device modules: CuPy and cupyx, or stand-ins with their interface (the
# test suite's simulated device, tests/simcupy) given to use_device_modules.
_device_modules = None


def use_device_modules(cupy_like=None, cupyx_like=None):
    """Run the cupy backend on these modules instead of CuPy (None: CuPy
    again); returns the previous pair."""
    global _device_modules
    previous = _device_modules
    _device_modules = None if cupy_like is None else (cupy_like, cupyx_like)
    return previous


def cupy_module():
    if _device_modules is not None:
        return _device_modules[0]
    import cupy
    return cupy


def empty_pinned(shape, dtype):
    """A page-locked host array (the mirror staged MPI goes through)."""
    if _device_modules is not None:
        return _device_modules[1].empty_pinned(shape, dtype=dtype)
    import cupyx
    return cupyx.empty_pinned(shape, dtype=dtype)


def array_module(array):
    """numpy or cupy, whichever owns `array` (no CuPy import for NumPy arrays)."""
    if isinstance(array, np.ndarray) or np.isscalar(array):
        return np
    return cupy_module().get_array_module(array)


def to_numpy(array, copy=False):
    """`array`'s values in a NumPy array, the one way psgd brings a device
    (CuPy) array to the host: a device array is copied (CuPy waits for the
    current stream); a host one is returned as it is, or copied (`copy`)."""
    if hasattr(array, "get") and not isinstance(array, np.ndarray):
        return array.get()
    return np.array(array) if copy else np.asarray(array)


def off_device(array):
    """A line when `array` lives on a GPU other than the current one (psgd's
    kernels, copies and streams are the current device's: CuPy would fail
    later, deep inside a sync, with "peer access is unavailable"), else None."""
    if isinstance(array, np.ndarray):
        return None
    here, there = cupy_module().cuda.Device().id, array.device.id
    if here == there:
        return None
    return ("on GPU %d while GPU %d is current: make GPU %d current first "
            "(cupy.cuda.Device(%d).use(), or `with cupy.cuda.Device(%d):`)"
            % (there, here, there, there, there))


def _cupy_with_devices():
    try:
        cupy = cupy_module()
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # no CuPy, no driver, or no device: all mean "no GPU"
        pass
    return None


def parse_device_ids(text):
    """'0,1,3' -> [0, 1, 3]; None or '' -> None."""
    if text is None or text == "":
        return None
    if isinstance(text, (list, tuple)):
        return [int(d) for d in text]
    try:
        return [int(d) for d in str(text).split(",") if d.strip() != ""]
    except ValueError:
        raise ValueError("--gpu-ids must be a comma-separated list of integers, got %r" % (text,))


def kernel_problem(cupy):
    """None if CuPy compiles and runs a kernel on the current device, else
    one line naming what is missing."""
    try:
        probe = cupy.ElementwiseKernel("T x", "T y", "y = x + (T)1", "probe")
        out = probe(cupy.zeros(1, dtype="float32"), cupy.empty(1, dtype="float32"))
        cupy.cuda.get_current_stream().synchronize()
        if float(out[0]) == 1.0:
            return None
        return "a test kernel computed a wrong value"
    except Exception as exc:   # CompileException, NVRTC or driver errors: all say "no"
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return "CuPy cannot compile kernels (%s: %s); install CuPy with its CUDA headers " \
               "(pip install 'cupy-cuda12x[ctk]', as psgd's [gpu] extra does) or the " \
               "CUDA toolkit" % (type(exc).__name__, first)


def shared_gpus(local_size, usable):
    """The warning for more ranks on a host than GPUs, or None."""
    if local_size is None or local_size <= usable:
        return None
    return ("%d ranks on this host share %d GPU%s (rank i uses GPU i mod %d): they compete "
            "for each GPU's memory and time; start at most %d ranks per host, or pass "
            "--gpu-ids to say the sharing is meant" % (
                local_size, usable, "" if usable == 1 else "s", usable, usable))


def get_backend(name=None, local_rank=0, device_ids=None, local_size=None):
    """The backend for this rank. `name` is auto | numpy | cupy (env
    PSGD_BACKEND); `local_size`: ranks on this host (warns when they
    outnumber the GPUs)."""
    name = name or settings.get("PSGD_BACKEND")
    if name not in BACKENDS:
        raise ValueError("unknown backend %r; valid: %s" % (name, ", ".join(BACKENDS)))
    if name == "numpy":
        return NUMPY
    cupy = _cupy_with_devices()
    if cupy is None:
        if name == "cupy":
            raise UsageError("--backend cupy: CuPy or a CUDA device is not available on this "
                             "host (pip install -e '.[gpu]' on a machine with a GPU)")
        return NUMPY
    ids = parse_device_ids(device_ids)
    count = cupy.cuda.runtime.getDeviceCount()
    if ids:
        device = ids[local_rank % len(ids)]
    else:
        device = local_rank % count
    if not 0 <= device < count:
        raise ValueError("GPU id %d does not exist (this node has %d)" % (device, count))
    cupy.cuda.Device(device).use()
    problem = kernel_problem(cupy)
    if problem is not None:
        if name == "cupy":
            raise UsageError("--backend cupy: " + problem)
        warnings.warn("--backend auto: running on the host: " + problem)
        return NUMPY
    if not ids:
        sharing = shared_gpus(local_size, count)
        if sharing:
            warnings.warn(sharing)
    return Backend(cupy, device)
