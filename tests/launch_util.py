"""Run a whole MPI job from a plain pytest test: mpirun beside the test's
Python, the repository on PYTHONPATH, a hard timeout, output captured."""
import os
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


# Open MPI's launcher now and then fails to start its PMIx listener (a bind()
# on loopback; seen once in some 600 launches of `make test`) and exits 213
# before any rank has run: the job never started, so it is started again.
LAUNCHER_DID_NOT_START = "The PMIx server's listener thread failed to start"


def mpirun(np, argv, timeout=120, env=None, cwd=None):
    """CompletedProcess of `mpirun -np NP python ARGV...` (argv after python)."""
    return run_job(mpirun_command(np) + [sys.executable] + list(argv), timeout, job_env(env),
                   cwd or ROOT)


def run_job(cmd, timeout, env, cwd):
    """CompletedProcess of the MPI job `cmd`, started once more where the
    launcher did not start it (LAUNCHER_DID_NOT_START)."""
    for attempt in range(2):
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        if LAUNCHER_DID_NOT_START not in result.stderr:
            break
    return result


def start_mpirun(np, argv, stdout, stderr, env=None, cwd=None):
    """The running job (PopenJob) of `mpirun -np NP python ARGV...`, for
    tests that signal ranks while the job runs (output to the given open
    files)."""
    cmd = mpirun_command(np) + [sys.executable] + list(argv)
    return PopenJob(cmd, stdout=stdout, stderr=stderr, env=job_env(env), cwd=cwd or ROOT,
                     stdin=subprocess.DEVNULL)


class PopenJob:
    """subprocess.Popen(cmd, stderr=FILE, **kwargs) of an MPI job that the
    test polls or waits on while it runs: where the first launch ends with
    LAUNCHER_DID_NOT_START in FILE, poll() and wait() start it once more
    (no rank ran) and answer for that one. Everything else is the Popen's."""

    def __init__(self, cmd, stderr, **kwargs):
        self._start = lambda: subprocess.Popen(cmd, stderr=stderr, **kwargs)
        self._stderr = stderr.name
        self._again = True
        self._proc = self._start()

    def _relaunched(self):
        if not self._again or self._proc.poll() is None:
            return False
        self._again = False
        with open(self._stderr) as f:
            if LAUNCHER_DID_NOT_START not in f.read():
                return False
        self._proc = self._start()
        return True

    def poll(self):
        self._relaunched()
        return self._proc.poll()

    def wait(self, timeout=None):
        end = None if timeout is None else time.time() + timeout
        while True:
            code = self._proc.wait(None if end is None else max(0.0, end - time.time()))
            if not self._relaunched():
                return code

    def __getattr__(self, name):        # pid, returncode, kill, terminate, ...
        return getattr(self._proc, name)


def job_env(env=None):
    """The environment of a test job: the repository on PYTHONPATH, numpy,
    the shared data cache, what this MPI needs, then `env`."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.setdefault("PSGD_BACKEND", "numpy")
    full_env.setdefault("PSGD_CACHE_DIR", os.path.join(ROOT, ".cache"))
    full_env.update(env or {})
    for key, value in mpi_env().items():
        full_env.setdefault(key, value)
    return full_env


def mpirun_command(np):
    """`mpirun -np NP`, plus what this MPI needs for more ranks than cores."""
    cmd = [MPIRUN, "-np", str(np)]
    if "Open MPI" in _mpi_flavour():
        cmd += ["--oversubscribe"]
    return cmd


def mpi_env():
    """Environment a test job needs with this MPI: Open MPI refuses root
    without two variables, and more ranks than cores unless told (the
    variables reach mpirun calls in scripts too: bin/)."""
    if "Open MPI" not in _mpi_flavour():
        return {}
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",   # Open MPI 5
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}                    # Open MPI 4


# What a python_job's body can use without importing it.
PYTHON_JOB_PRELUDE = ("import sys, time\nimport numpy as np\nfrom mpi4py import MPI\nimport psgd\n"
                      "from psgd import agreement, mpi, protocol\nfrom psgd.errors import ProtocolError\n")


def python_job(np, body, hook=True, timeout=90):
    """CompletedProcess of `python -c BODY` (dedented, after PYTHON_JOB_PRELUDE)
    on NP ranks; hook: agreement.abort_on_error() first, as the worker CLI
    does. PSGD_TRACEBACK is cleared: a failure must be its one line."""
    code = (PYTHON_JOB_PRELUDE + ("agreement.abort_on_error()\n" if hook else "")
            + textwrap.dedent(body))
    return mpirun(np, ["-c", code], timeout=timeout, env={"PSGD_TRACEBACK": ""})


def psgd_train(np, *flags, timeout=120, env=None, cwd=None):
    return mpirun(np, ["-m", "psgd.worker"] + list(flags), timeout=timeout, env=env, cwd=cwd)


_flavour = None


def _mpi_flavour():
    global _flavour
    if _flavour is None:
        out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True)
        _flavour = out.stdout + out.stderr
    return _flavour


def error_lines(stderr):
    """The psgd error lines of a failed job (one per rank at most)."""
    return [line for line in stderr.splitlines() if "error:" in line]


def assert_clean_failure(result, needle):
    """Non-zero exit, a psgd line naming the problem, no Python traceback."""
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = error_lines(result.stderr)
    assert lines, result.stderr
    assert any(needle in line for line in lines), (needle, result.stderr)
