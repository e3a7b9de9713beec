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
- No such symbol (MVAPICH2, Cray MPICH without it, older builds): the
  family's own switch decides (MV2_USE_CUDA=1, MPICH_GPU_SUPPORT_ENABLED=1,
  OMPI_MCA_opal_cuda_support=true); a hint of another family is ignored.
"""
import ctypes
import os

from mpi4py import MPI

from .errors import UsageError

SETTINGS = ("auto", "yes", "no")
ENV = "PSGD_CUDA_AWARE"
_WORDS = {"auto": "auto", "": "auto", "yes": "yes", "1": "yes", "true": "yes", "on": "yes",
          "no": "no", "0": "no", "false": "no", "off": "no"}
# family (as MPI_Get_library_version names it) -> the switch that turns CUDA on
_HINTS = (("MVAPICH", "MV2_USE_CUDA", "1"),
          ("CRAY MPICH", "MPICH_GPU_SUPPORT_ENABLED", "1"),
          ("Open MPI", "OMPI_MCA_opal_cuda_support", "true"),
          ("MPICH", "MPICH_GPU_SUPPORT_ENABLED", "1"))  # after the MPICH derivatives

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
        env = os.environ.get(ENV)
        setting = parse(env, ENV) if env not in (None, "") else "auto"
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


def _mapped_libmpi():
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith("libmpi."))


def detect():
    family = library_family()
    hint = next(((k, v) for f, k, v in _HINTS if f == family), None)
    hinted = hint is not None and os.environ.get(hint[0], "").lower() == hint[1]
    path, lib = libmpi()
    query = getattr(lib, "MPIX_Query_cuda_support", None) if lib is not None else None
    where = "%s (%s)" % (family, os.path.basename(path) if path else "libmpi not found")
    if query is not None:
        query.restype = ctypes.c_int
        if query():
            return True, "MPIX_Query_cuda_support() = 1 in %s" % where
        reason = "MPIX_Query_cuda_support() = 0 in %s" % where
        if hinted:
            reason += "; %s=%s is set, but the library's answer wins (--cuda-aware yes " \
                      "overrules it)" % hint
        return False, reason
    if hinted:
        return True, "%s=%s; %s has no MPIX_Query_cuda_support" % (hint[0], hint[1], where)
    return False, "%s has no MPIX_Query_cuda_support%s" % (
        where, " and %s is not %s" % hint if hint else "")
