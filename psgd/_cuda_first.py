"""CUDA before MPI: under Open MPI's launcher, the rank's GPU is made
current (its context created) before mpi4py starts MPI.

Open MPI 5 sets up its CUDA support when MPI starts, and only if the
process already has a CUDA context then: otherwise MPIX_Query_cuda_support
may answer 0 and its shared-memory transport stages device buffers through
the host. mpi4py starts MPI at import, so this runs first (psgd/__init__).
It picks the GPU the backend will pick (local rank modulo the device count,
or the --gpu-ids list), so no rank makes a context on a GPU it does not use;
it does nothing for the host backend, without CuPy, or outside Open MPI's
launcher (MPICH and the others decide without a context).
"""
import os
import sys

from . import settings

LOCAL_RANK = "OMPI_COMM_WORLD_LOCAL_RANK"
_state = {"device": None}


def _option(argv, name):
    """The value of `--name value` or `--name=value` in argv, or None."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    return None


def device_for(environ, argv, count):
    """The GPU this rank will use, or None (nothing to do before MPI)."""
    local = environ.get(LOCAL_RANK, "")
    backend = _option(argv, "--backend") or settings.read("PSGD_BACKEND", environ)
    if not local.isdigit() or backend == "numpy" or count < 1:
        return None
    ids = [d for d in (_option(argv, "--gpu-ids") or "").split(",") if d.strip().isdigit()]
    device = int(ids[int(local) % len(ids)]) if ids else int(local) % count
    return device if device < count else None


def initialize(environ=None, argv=None, cupy=None):
    """Make this rank's GPU current before MPI starts; returns its id or None.
    Never raises: anything wrong here is the backend's to report later."""
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    if not environ.get(LOCAL_RANK, "").isdigit():
        return None                      # not Open MPI's launcher: import nothing
    try:
        if cupy is None:
            import cupy
        device = device_for(environ, argv, cupy.cuda.runtime.getDeviceCount())
        if device is not None:
            cupy.cuda.Device(device).use()
            cupy.cuda.runtime.free(0)    # a context exists once something is done on it
            _state["device"] = device
        return device
    except Exception:   # no CuPy, no driver, no device: the backend says so later
        return None


def initialized():
    """Whether CUDA was initialized here before MPI started."""
    return _state["device"] is not None
