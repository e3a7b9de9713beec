"""What the benchmark scripts share: where things go, how MPI parts are
launched (the mpirun beside sys.executable, psgd importable from the repo),
machine facts, timing and memory probes, and Markdown/plot helpers.

Every benchmark is a driver (runs here, launches mpirun, writes JSON and
plots, returns a Markdown section) plus, for the MPI parts, a child mode of
the same file (`--child`) that does the measuring inside the job.
"""
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

# One BLAS thread per rank for the training runs (scaling, convergence), so
# that one worker means one core and the 1-worker baseline is not two.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# launching -------------------------------------------------------------------
def mpirun_path():
    """The mpirun of this interpreter's environment (the venv's MPICH/Open MPI
    wheel), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise RuntimeError("no mpirun beside %s nor on PATH" % sys.executable)
    return found


def child_env(extra=None, pin_blas=False):
    """The environment of a child job: psgd importable; with `pin_blas`, one
    BLAS thread per rank. Without it psgd's own per-rank thread limit applies
    (psgd/_threads.py), which is what a user's job gets."""
    env = dict(os.environ)
    if pin_blas:
        env.update(THREAD_ENV)
    env.setdefault("PSGD_BACKEND", "numpy")
    path = [ROOT, HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def bind_args(np_):
    """Each rank on a core of its own when they fit. Unbound, the scheduler
    sometimes put both ranks of an np 2 job on one core for a while: the
    same easgd sync took 0.6 ms in one job and 1.4 ms in the next (1e6
    parameters), and a 1e6 Allreduce's ratios scattered by 0.3 between
    identical jobs. Oversubscribed jobs (np 4 on 2 cores) stay unbound."""
    if np_ > (os.cpu_count() or 1):
        return []
    return ["--bind-to" if mpi_flavour() == "openmpi" else "-bind-to", "core"]


BIND_NOTE = ("Ranks are bound to cores (`-bind-to core`) where there are enough of them "
             "(np 2); np 4 shares 2 cores unbound.")


def mpi_run(np_, argv, timeout=900, env=None, module=False, pin_blas=False, launcher=None):
    """Run `python argv...` (or `python -m argv...`) on np_ ranks; returns
    stdout (run_job). `launcher`: the command that starts the ranks, in
    place of this host's mpirun bound to cores (e.g. psgd-local-cluster's
    mpirun across namespace hosts)."""
    # Open MPI refuses more ranks than cores unless told (np 4 on 2 cores).
    over = ["--oversubscribe"] if mpi_flavour() == "openmpi" else []
    cmd = (list(launcher) if launcher is not None else
           [mpirun_path()] + over + bind_args(np_)) + ["-np", str(np_), sys.executable, "-u"]
    cmd += (["-m"] if module else []) + [str(a) for a in argv]
    return run_job(cmd, child_env(env, pin_blas), timeout, " ".join(cmd[2:]))


def run_job(cmd, env, timeout, label):
    """Run a launcher's command line in a session of its own; returns stdout.
    A failure raises with the tail of the job's output; past `timeout`
    seconds the job's whole process group is killed (mpirun alone would
    leave its ranks behind)."""
    import signal
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise RuntimeError("%s timed out after %ds:\n%s\n%s" % (
            label, timeout, stdout[-2000:], stderr[-2000:]))
    if proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d) after %.0fs:\n%s\n%s" % (
            label, proc.returncode, time.perf_counter() - started,
            stdout[-3000:], stderr[-3000:]))
    return stdout


def error_line(exc):
    """The most telling line of a failed run's output: the last one that
    names an error, else the last one."""
    lines = [l.strip() for l in str(exc).strip().splitlines() if l.strip()]
    for line in reversed(lines):
        if "Error" in line or "error:" in line or "timed out" in line:
            return line[:300]
    return lines[-1][:300] if lines else type(exc).__name__


def run_child(script, np_, out, args=(), timeout=900, env=None, pin_blas=False, launcher=None):
    """Launch `script --child --out OUT args` on np_ ranks; returns OUT's JSON."""
    if os.path.exists(out):
        os.unlink(out)
    mpi_run(np_, [os.path.join(HERE, script), "--child", "--out", out] + list(args),
            timeout=timeout, env=env, pin_blas=pin_blas, launcher=launcher)
    with open(out) as f:
        return json.load(f)


def mpi_flavour():
    from mpi4py import MPI
    return "openmpi" if MPI.Get_library_version().startswith("Open MPI") else "mpich"


# results -----------------------------------------------------------------------
def results_dir():
    os.makedirs(RESULTS, exist_ok=True)
    return RESULTS


def result_path(name):
    return os.path.join(results_dir(), name)


def save_json(name, data):
    path = result_path(name)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    return path


def load_json(name):
    with open(result_path(name)) as f:
        return json.load(f)


def image(alt, name):
    """A Markdown image of results/NAME when the plot was drawn, else a note
    (plots need matplotlib, which psgd itself does not)."""
    path = result_path(name)
    if os.path.exists(path):
        return "![%s](%s)" % (alt, rel(path))
    return "_(no plot: matplotlib is not installed; `pip install matplotlib` draws them)_"


def rel(path):
    """A path relative to the repo root (how BENCHMARKS.md links it)."""
    return os.path.relpath(path, ROOT)


# machine -----------------------------------------------------------------------
def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    return float("nan")


def load_average():
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def machine_info():
    import numpy
    from mpi4py import MPI
    import mpi4py
    try:
        import numexpr
        numexpr_version = "%s (%d threads)" % (numexpr.__version__, numexpr.nthreads)
    except ImportError:
        numexpr_version = "not installed"
    mpi_lib = MPI.Get_library_version().strip().splitlines()
    return {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": round(_memory_gib(), 1),
        "os": "%s %s" % (platform.system(), platform.release()),
        "python": platform.python_version(), "numpy": numpy.__version__,
        "mpi4py": mpi4py.__version__,
        "mpi_library": " ".join(mpi_lib[0].split()) if mpi_lib else "?",
        "mpi_standard": "%d.%d" % MPI.Get_version(), "numexpr": numexpr_version,
        "mpirun": mpirun_path(),
    }


# timing ------------------------------------------------------------------------
def median(values):
    return statistics.median(values) if values else float("nan")


def timed_collective(comm, fn):
    """Seconds `fn()` took, ranks aligned by a barrier before; the slowest
    rank's time (a collective ends when its last rank does)."""
    from mpi4py import MPI
    comm.Barrier()
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    return comm.allreduce(took, op=MPI.MAX)


def repeats_for(nbytes, quick=False):
    """Enough repeats for a stable median without letting the 400 MB cases
    dominate the run."""
    if nbytes >= 2e8:
        n = 7
    elif nbytes >= 2e7:
        n = 11
    elif nbytes >= 2e6:
        n = 21
    else:
        n = 41
    return max(3, n // 3) if quick else n


# memory ------------------------------------------------------------------------
def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_bytes():
    return _status_kib("VmRSS") * 1024


def peak_rss_bytes():
    return _status_kib("VmHWM") * 1024


def reset_peak_rss():
    """Set the peak (VmHWM) back to the current RSS (Linux >= 4.0); returns
    whether it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# formatting --------------------------------------------------------------------
def table(headers, rows):
    """A Markdown table; cells are str()-ed."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


def fmt_time(seconds):
    if seconds != seconds:
        return "n/a"
    if seconds < 1e-3:
        return "%.0f us" % (seconds * 1e6)
    if seconds < 1:
        return "%.2f ms" % (seconds * 1e3)
    return "%.2f s" % seconds


def fmt_size(n):
    exp = len(str(int(n))) - 1
    return "1e%d" % exp if n == 10 ** exp else "%g" % n


def fmt_bytes(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return "%.3g %s" % (n / scale, unit)
    return "%d B" % n


def pyplot():
    """matplotlib's pyplot on a file-only backend, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def child_args(argv=None):
    """The common flags of a child run: --child --out PATH, then the rest."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true")
    p.add_argument("--out")
    p.add_argument("--quick", action="store_true")
    return p


def child_main(fn, argv):
    """Run a child's measuring function so that an exception on any rank
    ends the whole job (MPI_Abort) instead of leaving the others waiting."""
    from psgd import agreement
    agreement.abort_on_error()
    fn(argv)


def script_main(run, child=None, add_arguments=None):
    """A benchmark run as a script: `--child ...` is one MPI rank of its
    measurement (launched by run()), anything else runs it and prints the
    Markdown (`--quick` for small sizes). add_arguments(parser) adds the
    benchmark's own flags (e.g. mpi_regimes.add_regime_arg); run() gets
    each of them by its name."""
    if child is not None and "--child" in sys.argv:
        child_main(child, sys.argv[1:])
        return
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    if add_arguments is not None:
        add_arguments(p)
    print(run(**vars(p.parse_args())).markdown)


class Section:
    """What a benchmark hands run_all: its Markdown and the headline lines."""

    def __init__(self, title, markdown, headlines=(), data=None):
        self.title, self.markdown = title, markdown
        self.headlines = list(headlines)
        self.data = data
