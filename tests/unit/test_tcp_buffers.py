"""psgd/_tcp_buffers.py: MPI's TCP socket buffers set before MPI starts,
where the job sets none (what the sockets then get across hosts:
tests/cluster/test_across_hosts.py)."""
import os
import subprocess
import sys

import pytest

from psgd import settings
from psgd._tcp_buffers import VARIABLES, forget, limit_tcp_buffers, too_late


def test_every_variable_the_job_left_unset_gets_the_setting(setting):
    setting("PSGD_TCP_BUFFER", 2 ** 18)
    size = settings.get("PSGD_TCP_BUFFER")
    env = {"UCX_TCP_SNDBUF": "1m"}
    assert limit_tcp_buffers(env) == [v for v in VARIABLES if v != "UCX_TCP_SNDBUF"]
    assert env == dict({v: str(size) for v in VARIABLES}, UCX_TCP_SNDBUF="1m")


@pytest.mark.parametrize("value", [None, 0])
def test_unset_or_zero_leaves_the_kernel_its_autotuning(setting, value):
    setting("PSGD_TCP_BUFFER", value)
    env = {}
    assert limit_tcp_buffers(env) == [] and env == {}


def run(code, **env):
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return subprocess.run([sys.executable, "-c", code], env=dict(clean, **env),
                          capture_output=True, text=True, timeout=120, check=True)


def test_forget_takes_back_only_what_was_set(setting):
    setting("PSGD_TCP_BUFFER", 2 ** 18)
    env = {"UCX_TCP_SNDBUF": "1m"}
    forget(limit_tcp_buffers(env), env)
    assert env == {"UCX_TCP_SNDBUF": "1m"}


def test_importing_psgd_leaves_no_variable_to_the_jobs_it_launches():
    """MPI read them while it started (the sockets across hosts:
    tests/cluster/test_across_hosts.py)."""
    r = run("import os, psgd; from mpi4py import MPI; assert MPI.Is_initialized(); "
            "print([os.environ.get(v) for v in %r])" % (VARIABLES,), PSGD_TCP_BUFFER="65536")
    assert r.stdout.strip() == str([None] * len(VARIABLES)), r.stdout + r.stderr
    assert r.stderr == ""


def test_a_setting_that_comes_after_mpi_started_is_named_once():
    r = run("from mpi4py import MPI; import os, psgd; "
            "print(os.environ.get('UCX_TCP_SNDBUF'))", PSGD_TCP_BUFFER="65536")
    assert r.stdout.strip() == "None"
    assert r.stderr.strip() == too_late({"PSGD_TCP_BUFFER": "65536"}), r.stderr
    quiet = run("from mpi4py import MPI; import psgd")   # unset: the job's own choice
    assert quiet.stderr == ""
