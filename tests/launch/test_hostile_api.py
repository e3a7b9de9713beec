"""The Python API misused under mpirun (issue 13, findings 16 and 17): bad
counts fail on every rank, synchronize after stop fails on the rank that
calls it, a rank that exits without stop() is stopped for it, an uncaught
exception or a server that never runs ends the job, and what cannot be
detected (a live server that never calls run()) is caught by the watchdog.
Every job here used to hang or end with wrong parameters."""
import os
import time

import pytest

from launch_util import MPIRUN, mpirun

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

SCRIPT = '''import sys, time
import numpy as np
from mpi4py import MPI
import psgd
from psgd.errors import UsageError
from psgd.train.faults import Watchdog

mode, algo = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
w = [np.ones(4, dtype=np.float32) * (1 + rank)]
if mode == "server-never-runs-alive":
    dog = Watchdog(comm, 2.0, abort=True)
sync = psgd.create(algo, w, comm=comm)

def say(text):
    print("rank %d: %s" % (rank, text), flush=True)

if mode == "count-2**63":
    try:
        sync.synchronize(2 ** 63 if rank == 1 else 5)
    except UsageError as exc:
        say("caught: %s" % exc)
elif mode == "count-2**62":
    try:
        sync.synchronize(2 ** 62)
    except UsageError as exc:
        say("caught: %s" % exc)
    say("w %s" % w[0][0])
elif mode == "after-stop":
    sync.synchronize(3)
    sync.stop()
    if rank == 1:
        try:
            sync.synchronize(5)
        except UsageError as exc:
            say("caught: %s" % exc)
elif mode == "exit-without-stop":
    if rank == 0 and algo == "easgd":
        sync.run()
    else:
        for i in range(2 if rank == comm.Get_size() - 1 else 6):
            sync.synchronize(4)
        if rank != comm.Get_size() - 1:
            sync.stop()
    say("done")
elif mode == "uncaught" and rank == 0 and algo == "easgd":
    sync.run()
elif mode == "uncaught":
    sync.synchronize(3)
    if rank == 1:
        raise RuntimeError("user code failed")
    for i in range(100):
        sync.synchronize(3)
    sync.stop()
elif mode == "server-never-runs":
    if rank != 0:
        sync.synchronize(3)
        sync.stop()
elif mode == "server-never-runs-alive":
    if rank == 0:
        time.sleep(60)
    else:
        dog.enter(0, 0)
        sync.synchronize(3)
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "api.py"
    path.write_text(SCRIPT)
    return str(path)


def run(script, np_, mode, algo="bsp", timeout=30):
    start = time.time()
    result = mpirun(np_, [script, mode, algo], timeout=timeout)
    return result, time.time() - start


def said(result, text):
    return [line for line in result.stdout.splitlines() if text in line]


# 16 ---------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_a_count_beyond_int64_on_one_rank_fails_on_every_rank(script):
    result, _ = run(script, 3, "count-2**63")
    assert result.returncode == 0, result.stderr
    # Output forwarding may join the ranks' lines: count, do not split.
    assert result.stdout.count("caught:") == 3, result.stdout + result.stderr
    assert "rank 1: caught: synchronize(n_k): n_k = 9223372036854775808 is too large" in \
        result.stdout, result.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("algo", ["bsp", "easgd"])
def test_counts_whose_sum_would_wrap_are_refused(script, algo):
    result, _ = run(script, 2 if algo == "bsp" else 3, "count-2**62", algo)
    if algo == "bsp":
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("the sum over 2 ranks must fit in int64") == 2, \
            result.stdout
        assert said(result, "w 1.0") and said(result, "w 2.0")    # parameters untouched
    else:
        # the easgd server is rank 0: a worker's own count is checked on that worker
        assert said(result, "rank 1: caught: synchronize(n_k): n_k = 4611686018427387904 "
                            "is too large"), result.stdout + result.stderr


# 17 ---------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_synchronize_after_stop_fails_on_that_rank(script):
    result, _ = run(script, 3, "after-stop")
    assert result.returncode == 0, result.stderr
    assert said(result, "rank 1: caught: bsp rank 1: synchronize after stop"), result.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("algo", ["bsp", "easgd", "sod"])
def test_a_rank_that_exits_without_stop_is_stopped_for_the_others(script, algo):
    result, seconds = run(script, 3, "exit-without-stop", algo)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("done") == 3, result.stdout
    assert "psgd: warning: rank 2: exits without stop() on its %s" % algo in result.stderr
    assert seconds < 40


@pytest.mark.timeout(90)
@pytest.mark.parametrize("algo", ["bsp", "easgd"])
def test_an_uncaught_exception_ends_the_job_instead_of_hanging_it(script, algo):
    result, seconds = run(script, 3, "uncaught", algo)
    assert result.returncode != 0
    assert "psgd: rank 1: an uncaught exception ended this rank with its %s algorithm not " \
           "stopped: ending the job" % algo in result.stderr, result.stderr
    assert seconds < 40


@pytest.mark.timeout(90)
def test_a_server_that_exits_without_running_ends_the_job(script):
    result, seconds = run(script, 3, "server-never-runs", "easgd")
    assert result.returncode != 0
    assert "psgd: rank 0: rank 0, the easgd server, exits without ever calling run() while " \
           "its workers wait for it: ending the job" in result.stderr, result.stderr
    assert seconds < 40


@pytest.mark.timeout(90)
def test_a_live_server_that_never_runs_is_caught_by_the_watchdog(script):
    result, seconds = run(script, 3, "server-never-runs-alive", "easgd")
    assert result.returncode != 0
    assert "psgd: stall: not arrived after 2s: rank 0 (computing for" in result.stderr, \
        result.stderr
    assert "--stall-abort ends the job" in result.stderr
    assert seconds < 40
