"""Every PSGD_* environment variable psgd reads, declared once: its name,
what it decides, its default. Each is read from the environment once, the
first time it is asked for (get), and kept; set() changes it for this
process from then on (tests, benchmarks). A flag that says the same thing
(--backend, --cuda-aware, --exchange) wins over its variable where the
flag's owner decides.

A count that is not a whole number at or above its minimum keeps its
default and is reported by problem() as one line naming the variable:
psgd.create raises it on every rank, so the job fails before any exchange
rather than at import with a traceback. The other values are checked by
the module that uses them (backend, cuda_aware, nccl), naming the variable.
The bin/ scripts read their own (PSGD_VENV, PSGD_OUT, PSGD_PYTHON,
PSGD_MPIRUN, PSGD_LOCAL_CLUSTER).
"""
import os
from dataclasses import dataclass

COUNT, TEXT, FLAG = "count", "text", "flag"


@dataclass(frozen=True)
class Setting:
    what: str            # how an error about it names it
    kind: str            # COUNT: a whole number >= minimum; TEXT: as given; FLAG: set or not
    default: object
    meaning: str
    minimum: int = 0


SETTINGS = {
    # How a sync is cut into MPI messages: every rank must use the same
    # (psgd.create compares them across ranks).
    "PSGD_MPI_CHUNK": Setting(
        "MPI chunk", COUNT, 2 ** 30, minimum=1,
        meaning="the most elements of one MPI call (MPI counts are C ints: stay below 2**31)"),
    "PSGD_MPI_PIPELINE_CHUNK": Setting(
        "pipeline chunk", COUNT, None, minimum=1,
        meaning="elements per Iallreduce of the pipelined allreduce; unset: by the path of "
                "the bytes (psgd/pipeline.py: 512k within a host, 256k across hosts)"),
    "PSGD_MPI_PIPELINE_THRESHOLD": Setting(
        "pipeline threshold", COUNT, None,
        meaning="the smallest buffer the collective algorithms pipeline; unset: by the path "
                "of the bytes (psgd/pipeline.py)"),
    "PSGD_MPI_SERVER_PIECE": Setting(
        "server piece", COUNT, None,
        meaning="elements per model message of the server algorithms, 0: one message; "
                "unset: by the path of the bytes (psgd/pieces.py: 256k within a host, 32k "
                "across hosts; 32 KiB across hosts for easgd and under survive_worker_loss)"),
    "PSGD_COMPRESSION_HIERARCHY": Setting(
        "compression hierarchy", TEXT, "auto",
        meaning="auto | on | leader | off: the compressed sums in two levels (inside each "
                "host, then across hosts: sliced among every local rank where hosts have as "
                "many ranks each, else through one leader per host; leader: always so); auto: "
                "when the ranks span hosts and some host has several "
                "(psgd/algorithms/two_level.py)"),
    "PSGD_TORCH_FACTORS_SAVING": Setting(
        "factors' saving", COUNT, 2 ** 20, minimum=1,
        meaning="bytes a step a psgd.torch Linear layer's rows must spare each host's link "
                "for syncgrad to sum it through them where the ranks span hosts (factors "
                "unset; psgd/torch_factors.py); factors=True: any saving"),
    "PSGD_TCP_BUFFER": Setting(
        "TCP socket buffer", COUNT, 0,
        meaning="bytes of each TCP socket buffer (send and receive) of MPI's connections "
                "between hosts, set before MPI starts where the job sets none "
                "(psgd/_tcp_buffers.py: about 2 ms of the link, 65536 at 250 Mb/s); "
                "0: the kernel's autotuning"),
    # Where the arrays live and what carries them.
    "PSGD_BACKEND": Setting(
        "backend", TEXT, "auto", meaning="auto | numpy | cupy, when --backend is not given"),
    "PSGD_CUDA_AWARE": Setting(
        "CUDA-aware MPI", TEXT, None,
        meaning="auto | yes | no (or 1 | 0): hand device buffers to MPI, when --cuda-aware "
                "is not given; unset: auto"),
    "PSGD_EXCHANGE": Setting(
        "exchange", TEXT, None,
        meaning="auto | mpi | nccl: what carries the collective algorithms' sums, when "
                "--exchange is not given; unset: auto"),
    "PSGD_ACCEL": Setting(
        "host kernels", TEXT, "auto",
        meaning="auto | numpy | numexpr: auto compiles the host's updates and quantizers "
                "with Numba where installed, for buffers of jit.MIN_SIZE elements or more; "
                "numpy keeps NumPy's blocked passes; numexpr runs the updates through "
                "numexpr where installed"),
    "PSGD_NO_FUSED": Setting(
        "no fused kernels", FLAG, False,
        meaning="set: the local optimizer's GPU step uses plain CuPy, not its fused kernel"),
    # Files and errors.
    "PSGD_CACHE_DIR": Setting(
        "cache folder", TEXT, None,
        meaning="where generated data sets are cached; unset: ~/.cache/psgd"),
    "PSGD_TRACEBACK": Setting(
        "tracebacks", FLAG, False,
        meaning="set: an unexpected error prints its traceback before its one line"),
}

_values = {}
_problems = {}


def _parse(name, text):
    """(value, problem or None) of `text` (None: unset) for setting `name`."""
    setting = SETTINGS[name]
    if setting.kind == FLAG:
        return bool(text), None
    text = None if text is None else text.strip()
    if not text:
        return setting.default, None
    if setting.kind == TEXT:
        return text, None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < setting.minimum:
        return setting.default, "%s=%r: must be a whole number >= %d" % (
            name, text, setting.minimum)
    return value, None


def read(name, environ):
    """Setting `name` as `environ` (a mapping) gives it, not kept: for the
    CUDA-first start-up, which runs before anything else."""
    return _parse(name, environ.get(name))[0]


def get(name):
    """This process's value of setting `name`."""
    if name not in _values:
        value, problem = _parse(name, os.environ.get(name))
        if problem is not None:
            _problems[name] = problem
        _values[name] = value
    return _values[name]


def set(name, value):
    """Use `value` for setting `name` from now on (None: its default);
    returns the previous value. A count below its minimum is a ValueError."""
    setting = SETTINGS[name]
    old = get(name)
    if value is None:
        value = setting.default
    elif setting.kind == COUNT:
        if int(value) < setting.minimum:
            raise ValueError("%s must be >= %d, got %r" % (setting.what, setting.minimum, value))
        value = int(value)
    elif setting.kind == FLAG:
        value = bool(value)
    _values[name] = value
    _problems.pop(name, None)
    return old


def label(name):
    """How a comparison across ranks names the setting: 'MPI chunk (PSGD_MPI_CHUNK)'."""
    return "%s (%s)" % (SETTINGS[name].what, name)


def problem():
    """One line naming the first count variable whose value is not valid
    (its default is used meanwhile), or None."""
    for name, setting in SETTINGS.items():
        if setting.kind == COUNT:
            get(name)
            if name in _problems:
                return _problems[name]
    return None
