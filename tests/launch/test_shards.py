"""--servers S (sharded parameter servers) as whole jobs under mpirun: the
per-shard replay oracles at 7 ranks (S = 1, 2, 3 and 6; barrier_period at
S = 2, 3 and 6), the failure paths
with S = 2 (a worker's exception, a server's, an unknown control message:
one line, no hang), and the CLI with --servers 2."""
import json
import os
import textwrap
import time

import numpy as np
import pytest

from launch_util import MPIRUN, assert_clean_failure, mpirun, psgd_train, python_job

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1000"]


@pytest.mark.timeout(300)
def test_shard_replays_at_seven_ranks():
    selected = ("test_easgd_shards_match_replay or "
                "(test_asgd_and_masgd_shards_match_replay and masgd-worker) or "
                "(test_barrier_per_shard_in_one_service_order and True)")
    r = mpirun(7, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
                   "tests/mpi/algorithms/test_shards.py", "-k", selected], timeout=280)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "14 passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]


# failure paths -----------------------------------------------------------------------
def job(body, hook=True, np_=4):
    start = time.time()
    r = python_job(np_, body, hook)
    assert time.time() - start < 60
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r, [line for line in r.stderr.splitlines() if line.startswith("psgd:")]


# rank 3 (the second worker of two servers and two workers) sends server 1 a
# message type the protocol lacks
BAD_MESSAGE = """
obj = psgd.create("easgd", [np.zeros(1000)], servers=2)
if obj.role == "server":
    obj.run()
elif obj.node.rank == 3:
    obj.comm.Send([np.array([7, 0], dtype=np.int64), MPI.INT64_T], dest=1, tag=protocol.TAG_MSG)
    obj.stop(0)
else:
    for _ in range(100000):
        obj.synchronize(1)
        time.sleep(1e-3)
    obj.stop(0)
"""


@pytest.mark.timeout(120)
def test_an_unknown_message_to_one_shard_ends_the_job():
    _, lines = job(BAD_MESSAGE)
    assert lines and all("unknown control message 7 from rank 3" in line for line in lines), lines


@pytest.mark.timeout(120)
def test_an_unknown_message_to_one_shard_reaches_every_rank_without_abort():
    body = "try:\n" + textwrap.indent(BAD_MESSAGE, "    ") + """
except ProtocolError as exc:
    sys.stderr.write("psgd: error: %s\\n" % exc)
    sys.exit(3)
"""
    r, lines = job(body, hook=False)
    assert r.returncode == 3 and "Abort" not in r.stderr, r.stderr
    assert len(lines) == 4, r.stderr
    assert all("unknown control message 7 from rank 3" in line for line in lines), lines
    assert any("easgd server rank 0: server rank 1 stopped" in line for line in lines), lines


@pytest.mark.timeout(120)
def test_a_second_server_that_never_runs_ends_the_job():
    _, lines = job("""
obj = psgd.create("asgd", [np.zeros(100)], servers=2)
if obj.node.rank == 0:
    obj.run()
elif obj.role == "worker":
    obj.synchronize(1)
    obj.stop(0)
""")
    assert any(line.startswith("psgd: rank 1: rank 1, one of the asgd servers, exits without "
                               "ever calling run() while its workers wait for it: ending the job")
               for line in lines), lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rank", [3, 1], ids=["worker", "second-server"])
def test_a_raise_with_two_servers_ends_the_job_with_one_line(driver, rank):
    fault = {"what": "raise", "rank": rank, "epoch": 1, "step": 2, "sync": 3}
    start = time.time()
    r = mpirun(4, [driver, json.dumps(fault), "--algo", "easgd", "--servers", "2", *QUICK,
                   "--epochs", "3", "--quiet"], timeout=90, env={"PSGD_TRACEBACK": ""})
    assert r.returncode != 0 and time.time() - start < 20, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    named = [line for line in r.stderr.splitlines() if "injected fault" in line]
    assert named == ["psgd: rank %d failed: RuntimeError: injected fault" % rank], r.stderr


# the CLI ---------------------------------------------------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo,flags", [("asgd", []), ("masgd", ["--barrier-period", "2"])])
def test_cli_with_two_servers(tmp_path, algo, flags):
    out = str(tmp_path / "m.npz")
    r = psgd_train(4, "--algo", algo, "--servers", "2", "--epochs", "2", *flags, *QUICK,
                   "--out", out)
    assert r.returncode == 0, r.stderr
    assert "%s on 4 ranks (2 workers, ranks 0-1 serve)" % algo in r.stdout, r.stdout
    shards = [line for line in r.stdout.splitlines() if "syncs served" in line]
    assert len(shards) == 2, r.stdout
    for s, line in enumerate(shards):
        assert "server rank %d (shard %d of 2): " % (s, s + 1) in line, line
    syncs = {line.split("): ")[1].split(" syncs")[0] for line in shards}
    assert len(syncs) == 1 and int(syncs.pop()) > 0     # every shard served every sync
    with np.load(out, allow_pickle=False) as z:
        weights = [z[k] for k in z.files if k != "__header__"]
    assert weights and all(np.isfinite(w).all() for w in weights)


# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags,np_,needle", [
    (["--algo", "bsp", "--servers", "2"], 3, "--servers applies to --algo easgd, asgd and masgd"),
    (["--algo", "masgd", "--servers", "3"], 3, "--servers 3 leaves no worker"),
])
def test_bad_server_flags_are_one_clear_line(flags, np_, needle):
    r = psgd_train(np_, *flags, *QUICK, "--epochs", "1")
    assert_clean_failure(r, needle)
