"""Whole jobs that must fail: a server algorithm on one process, a bad option,
an unknown control message. Each is launched with mpirun in a subprocess
(plain pytest, not under MPI) and must end quickly with a non-zero exit, one
clear line naming the problem on stderr, and no Python traceback."""
import os
import re
import subprocess
import textwrap

import pytest

from launch_util import MPIRUN, python_job


pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")]


# rank 2 (the last worker at -np 3) sends a message type the protocol lacks
BAD_MESSAGE = """
obj = psgd.create("easgd", [np.zeros(8)])
if obj.role == "server":
    obj.run()
elif obj.node.rank == 2:
    obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=0, tag=protocol.TAG_MSG)
    obj.stop(0)
else:
    for _ in range(100000):
        obj.synchronize(1)
        time.sleep(1e-3)
    obj.stop(0)
"""


def launch(np_, body, hook=True):
    try:
        proc = python_job(np_, body, hook)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the job hung: %s" % (exc.stderr or b"")[-2000:])
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def psgd_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("psgd:")]


def test_server_algorithm_on_one_process():
    proc = launch(1, 'psgd.create("asgd", [np.zeros(3)])\n')
    lines = psgd_lines(proc.stderr)
    assert lines == ["psgd: error: asgd needs a server and at least one worker: run with "
                     "mpirun -np 2 or more (got 1 process)"], proc.stderr


# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
@pytest.mark.parametrize("name,option,match", [
    ("easgd", "alpha=1.5", "option alpha=1.5: must satisfy 0 < alpha <= 1"),
    ("masgd", "momentum=1.0", "option momentum=1.0: must satisfy 0 <= momentum < 1"),
])
def test_out_of_range_option(name, option, match):
    proc = launch(3, 'psgd.create("%s", [np.zeros(3)], %s)\n' % (name, option))
    lines = psgd_lines(proc.stderr)
    assert lines and all(line == "psgd: error: " + match for line in lines), proc.stderr


def test_unknown_control_message_ends_the_job():
    """With the CLI's abort hook: the first rank to raise ends the job."""
    proc = launch(3, BAD_MESSAGE)
    lines = psgd_lines(proc.stderr)
    assert lines, proc.stderr
    assert all("unknown control message 7 from rank 2" in line for line in lines), proc.stderr


def test_unknown_control_message_reaches_every_rank_without_abort():
    """Without the hook: the server's notice makes every rank raise the error,
    so each can report it and exit on its own (no MPI_Abort, no hang)."""
    body = "try:\n" + textwrap.indent(BAD_MESSAGE, "    ") + """
except ProtocolError as exc:
    sys.stderr.write("psgd: error: %s\\n" % exc)
    sys.exit(3)
"""
    proc = launch(3, body, hook=False)
    assert proc.returncode == 3, proc.stderr
    lines = psgd_lines(proc.stderr)
    assert len(lines) == 3, proc.stderr
    assert all("unknown control message 7 from rank 2" in line for line in lines)
    assert any(re.match(r"psgd: error: easgd server: unknown control message 7 from rank 2 "
                        r"\(expected 0 = SYNC, 1 = FINISHED or 2 = SYNC_WHEN_READY\)$", line) for line in lines)
    assert "Abort" not in proc.stderr
