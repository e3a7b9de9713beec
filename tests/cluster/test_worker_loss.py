"""--survive-worker-loss across namespace hosts (Open MPI with ULFM): the
worker process of rank 3 on h1 is killed mid-run (SIGKILL, as the OOM
killer would; h1 and rank 2 stay up) and the job finishes on the other
three ranks without a restart. Losing h1 whole (its Open MPI daemon too)
is not survivable: PRRTE ends the job ("lost communication with a remote
daemon ... cannot recover"), which test_host_faults and bin/psgd-elastic
cover. Both ranks of h1 killed at once once took h1's daemon down with
them (one run in six): FINDINGS.md."""
import json
import os
import re
import subprocess
import time

import pytest

from cluster_util import server_pieces_job
from launch_util import PopenJob, _mpi_flavour
from psgd import pieces

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif("Open MPI" not in _mpi_flavour(),
                                 reason="ULFM: Open MPI's mpirun --with-ft ulfm (the mpich "
                                        "wheel has no fault tolerance)")]

EPOCHS = 16


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_and_kill(cluster, workdir, after_rows, rank=3):
    """The job on 2 hosts x 2 ranks (h0: ranks 0, 1; h1: 2, 3); `rank`'s
    process killed once the metrics hold `after_rows` epochs. Returns
    (returncode, stdout, stderr)."""
    cmd = cluster.mpirun_command(2, 4, ["-m", "psgd.worker", "--algo", "easgd",
                                        "--survive-worker-loss", "--epochs", str(EPOCHS),
                                        "--metrics", "m.jsonl", "--checkpoint-dir", "ck",
                                        "--out", "final.npz", "--stall-timeout", "20"])
    at = cmd.index("mpirun") + 1
    cmd[at:at] = ["--with-ft", "ulfm"]
    with open(workdir / "out.txt", "w") as out, open(workdir / "err.txt", "w") as err:
        job = PopenJob(cmd, stdout=out, stderr=err, env=cluster.job_env(), cwd=str(workdir),
                       stdin=subprocess.DEVNULL, start_new_session=True)
        metrics = workdir / "m.jsonl"
        deadline = time.time() + 120
        while not (metrics.exists() and len(rows(metrics)) >= after_rows):
            assert job.poll() is None and time.time() < deadline, \
                (workdir / "err.txt").read_text()[-3000:]
            time.sleep(0.02)
        host = "h%d" % (rank // 2)
        assert len(cluster.ranks(host)) == 2
        cluster.tool("exec", host, "sh", "-c", "for p in $(pgrep -f psgd.worker); do grep -qa "
                     "OMPI_COMM_WORLD_RANK=%d /proc/$p/environ && kill -9 $p; done; true" % rank)
        try:
            job.wait(120)
        except subprocess.TimeoutExpired:
            # seen once in CI (Open MPI), never in 18 runs alone: keep what
            # the job said, the work folder goes with the test
            pytest.fail("the job did not end within 120 s of rank %d's kill; ranks left: "
                        "h0 %s, h1 %s\n--- stdout:\n%s\n--- stderr:\n%s" % (
                            rank, cluster.ranks("h0"), cluster.ranks("h1"),
                            (workdir / "out.txt").read_text()[-3000:],
                            (workdir / "err.txt").read_text()[-3000:]))
        finally:
            if job.poll() is None:
                job.kill()
    return job.returncode, (workdir / "out.txt").read_text(), (workdir / "err.txt").read_text()


def test_a_worker_killed_on_the_other_host_and_the_job_goes_on(fresh_cluster, workdir):
    code, stdout, stderr = run_and_kill(fresh_cluster, workdir, 3)
    assert code == 0, stderr[:3000]
    assert "on 2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" in stdout, stdout[:3000]
    # the server names it when the death meets its round; an epoch's end
    # (evaluation, checkpoint) meets it otherwise
    assert "worker rank 2 lost" not in stderr, stderr
    assert "lost rank 3 on h1 in epoch" in stdout, stdout[-3000:]
    assert "going on with 3 ranks" in stdout, stdout[-3000:]
    assert [r["epoch"] for r in rows(workdir / "m.jsonl")] == list(range(1, EPOCHS + 1))
    assert (workdir / "final.npz").exists()
    assert fresh_cluster.ranks("h0") == [] and fresh_cluster.ranks("h1") == []



def test_a_job_that_survives_a_worker_sends_eagerly_across_hosts(fresh_cluster, workdir):
    """With survive_worker_loss, asgd's model messages across hosts go in
    32 KiB pieces (its 128 KiB piece otherwise), under Open MPI's TCP eager
    limit: a rendezvous receive from a worker killed mid-message deadlocked
    the server inside ob1 in 2 runs of 24 under load (psgd/pieces.py)."""
    cmd = fresh_cluster.mpirun_command(2, 4, ["-c", server_pieces_job(
        pieces.EAGER_PIECE_BYTES // 4, survive_worker_loss=True)])
    at = cmd.index("mpirun") + 1
    cmd[at:at] = ["--with-ft", "ulfm"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=fresh_cluster.job_env(),
                       cwd=str(workdir), stdin=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "PIECES-OK 3 syncs of 4 pieces" in r.stdout, r.stdout[-2000:]


def test_the_server_killed_and_every_worker_on_both_hosts_names_it(fresh_cluster, workdir):
    """No job survives its server: the workers (rank 1 beside it on h0,
    ranks 2 and 3 across the link) each say so in one line, and the job
    ends with status 1, its last checkpoint intact. (The schedule that hung,
    workers at an epoch's end while another meets the death in its sync, is
    tests/launch/test_worker_loss.py's: killed mid-epoch here, every worker
    meets it in a sync.)"""
    code, stdout, stderr = run_and_kill(fresh_cluster, workdir, 3, rank=0)
    assert code == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "MPI_ABORT was invoked" not in stderr, stderr[-3000:]
    for rank in (1, 2, 3):
        assert re.search(r"psgd: error: rank %d: the easgd server \(rank 0 on h0\) (died \("
                         r"MPI_ERR_PROC_FAILED|was lost in epoch \d+: )" % rank, stderr), \
            stderr[-3000:]
    assert fresh_cluster.ranks("h0") == [] and fresh_cluster.ranks("h1") == []
    latest = json.loads((workdir / "ck" / "LATEST").read_text())
    assert sorted(os.listdir(workdir / "ck" / latest["folder"])) == [
        "rank-%05d.npz" % r for r in range(4)]
