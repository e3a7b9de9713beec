"""Whether MPI may be handed device pointers (CUDA-aware MPI): decided once
per process, from `--cuda-aware auto|yes|no` or PSGD_CUDA_AWARE, and said
once at start-up (`describe()`).

auto asks the libmpi that mpi4py actually loaded. mpi4py loads MPICH with
RTLD_LOCAL (only Open MPI goes in RTLD_GLOBAL), so dlsym on the global
namespace (CDLL(None)) misses MPICH's symbols: the library is found among the
process's mapped files and reopened with RTLD_NOLOAD, which returns the very
handle mpi4py holds and never loads a second copy.

How the answer is read:
- MPIX_Query_cuda_support() exists (Open MPI's mpi-ext, MPICH >= 4): its
  answer decides. A 1 means yes. A 0 means no even when an environment hint
  says otherwise: the library knows whether it was built with CUDA and has it
  switched on, a hint only says someone asked for it, and a wrong yes
  crashes on the first device pointer while a wrong no only costs two PCIe
  copies. The hint is then named in the reason, so the log shows the
  contradiction and --cuda-aware yes can overrule it knowingly.
- No such symbol (MVAPICH2, older builds), or a library where calling it
  is not safe (MPICH before 4.0 and Cray MPICH, whose builds may abort in
  it at start-up): the family's own switch decides (MV2_USE_CUDA=1,
  Cray's MPICH_GPU_SUPPORT_ENABLED=1, MPICH's MPIR_CVAR_ENABLE_GPU=1,
  OMPI_MCA_opal_cuda_support=true); a hint of another family is ignored.
- Open MPI 5 may answer 0 when MPI started before CUDA was initialized in
  the process (mpi4py starts MPI at import): psgd.worker initializes CUDA
  first under Open MPI's launcher (_cuda_first.py), and a 0 says when CUDA
  came too late for the answer to mean anything.
"""
import ctypes
import os
import re

from mpi4py import MPI

from . import _cuda_first, settings
from .errors import UsageError

SETTINGS = ("auto", "yes", "no")
ENV = "PSGD_CUDA_AWARE"
_WORDS = {"auto": "auto", "": "auto", "yes": "yes", "1": "yes", "true": "yes", "on": "yes",
          "no": "no", "0": "no", "false": "no", "off": "no"}
# family (as MPI_Get_library_version names it) -> the switch that turns CUDA on
_HINTS = (("MVAPICH", "MV2_USE_CUDA", "1"),
          ("CRAY MPICH", "MPICH_GPU_SUPPORT_ENABLED", "1"),
          ("Open MPI", "OMPI_MCA_opal_cuda_support", "true"),
          ("MPICH", "MPIR_CVAR_ENABLE_GPU", "1"))  # after the MPICH derivatives
QUERY_SINCE = {"MPICH": (4, 0)}      # MPICH's own version that has a safe query
NO_QUERY = ("CRAY MPICH", "MVAPICH")

_decision = None      # (aware, reason), once decided


def parse(text, what="--cuda-aware"):
    word = _WORDS.get(str(text).strip().lower())
    if word is None:
        raise UsageError("%s must be auto, yes or no, got %r" % (what, text))
    return word


def configure(setting=None):
    """Decide for this process: `setting` (the flag) wins over PSGD_CUDA_AWARE,
    which wins over auto. Returns (aware, reason)."""
    global _decision
    if setting is None or parse(setting) == "auto":
        env = settings.get(ENV)
        setting = parse(env, ENV) if env is not None else "auto"
        source = "%s=%s" % (ENV, env)
    else:
        source = "--cuda-aware %s" % setting
    setting = parse(setting)
    if setting == "yes":
        _decision = (True, "forced by %s" % source)
    elif setting == "no":
        _decision = (False, "forced by %s" % source)
    else:
        _decision = detect()
    return _decision


def decision():
    return _decision if _decision is not None else configure()


def cuda_aware():
    return decision()[0]


def describe():
    """The start-up log line naming the path device buffers take."""
    aware, reason = decision()
    if aware:
        return "exchange: device buffers go to MPI directly (MPI is CUDA-aware: %s)" % reason
    return "exchange: staged through pinned host memory (MPI is not CUDA-aware: %s)" % reason


def library_family():
    text = MPI.Get_library_version().strip()
    for family, _, _ in _HINTS:
        if family.upper() in text[:200].upper():
            return family
    return text.split("\n")[0][:40] or "unknown MPI"


def libmpi():
    """(path, ctypes handle) of the libmpi this process runs, or (None, None)."""
    for path in _mapped_libmpi():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        if hasattr(lib, "MPI_Init"):
            return path, lib
    try:
        lib = ctypes.CDLL(None)
        if hasattr(lib, "MPI_Init"):
            return "the global symbol table", lib
    except OSError:
        pass
    return None, None


def _mapped_libmpi(maps_path="/proc/self/maps"):
    """The MPI libraries mapped into this process: libmpi.so.* (MPICH,
    Open MPI) first, then the vendors' libmpi_<flavour>.so.* (Cray's
    libmpi_cray, libmpi_gnu_123, libmpi_nvidia ...)."""
    try:
        with open(maps_path) as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi" in line}
    except OSError:
        return []
    names = {p: os.path.basename(p) for p in paths}
    plain = sorted(p for p, n in names.items() if n.startswith("libmpi."))
    flavoured = sorted(p for p, n in names.items() if n.startswith("libmpi_") and ".so" in n
                       and not n.startswith(("libmpi_cxx", "libmpi_mpifh", "libmpi_usempi")))
    return plain + flavoured


def query_is_safe(family, version_text):
    """Whether MPIX_Query_cuda_support may be called in this library."""
    if family in NO_QUERY:
        return False
    since = QUERY_SINCE.get(family)
    if since is None:
        return True
    match = re.search(r"MPICH Version:\s*(\d+)\.(\d+)", version_text)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= since


def detect():
    family = library_family()
    hint = next(((k, v) for f, k, v in _HINTS if f == family), None)
    hinted = hint is not None and os.environ.get(hint[0], "").lower() == hint[1]
    path, lib = libmpi()
    query = getattr(lib, "MPIX_Query_cuda_support", None) if lib is not None else None
    where = "%s (%s)" % (family, os.path.basename(path) if path else "libmpi not found")
    if query is not None and not query_is_safe(family, MPI.Get_library_version()):
        where += ", whose MPIX_Query_cuda_support is not safe to call"
        query = None
    if query is not None:
        query.restype = ctypes.c_int
        if query():
            return True, "MPIX_Query_cuda_support() = 1 in %s" % where
        reason = "MPIX_Query_cuda_support() = 0 in %s" % where
        if family == "Open MPI" and not _cuda_first.initialized():
            reason += " (MPI started before CUDA was initialized: Open MPI 5 may answer 0 " \
                      "then; python -m psgd.worker initializes CUDA first)"
        if hinted:
            reason += "; %s=%s is set, but the library's answer wins (--cuda-aware yes " \
                      "overrules it)" % hint
        return False, reason
    if hinted:
        return True, "%s=%s; %s has no usable MPIX_Query_cuda_support" % (
            hint[0], hint[1], where)
    return False, "%s has no usable MPIX_Query_cuda_support%s" % (
        where, " and %s is not %s" % hint if hint else "")
