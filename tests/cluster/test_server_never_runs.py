"""A server that exits without ever calling run() ends the job across hosts
too (tests/launch/test_hostile_api.py has it on one host): its exit reads a
waiting worker's control message, which across hosts MPICH's UCX never
matched to a receive from MPI_ANY_SOURCE, and the job hung."""
import time

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = '''import numpy as np
from mpi4py import MPI
import psgd
comm = MPI.COMM_WORLD
w = [np.ones(4, dtype=np.float32)]
sync = psgd.create("easgd", w, comm=comm)
if comm.Get_rank() != 0:
    sync.synchronize(3)
    sync.stop()
'''


def test_a_server_on_one_host_that_never_runs_ends_the_job(cluster, workdir):
    script = workdir / "never_runs.py"
    script.write_text(SCRIPT)
    began = time.time()
    # the server alone on h0, its worker on h1: the control message crosses the link
    r = cluster.mpirun(1, 2, [str(script)], timeout=60, cwd=str(workdir))
    assert r.returncode != 0
    assert "psgd: rank 0: rank 0, the easgd server, exits without ever calling run() while " \
           "its workers wait for it: ending the job" in r.stderr, r.stderr[-3000:]
    assert time.time() - began < 40
