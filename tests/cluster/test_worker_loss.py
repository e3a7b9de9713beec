"""--survive-worker-loss across namespace hosts (Open MPI with ULFM): the
worker process of rank 3 on h1 is killed mid-run (SIGKILL, as the OOM
killer would; h1 and rank 2 stay up) and the job finishes on the other
three ranks without a restart. Losing h1 whole (its Open MPI daemon too)
is not survivable: PRRTE ends the job ("lost communication with a remote
daemon ... cannot recover"), which test_host_faults and bin/psgd-elastic
cover. Both ranks of h1 killed at once once took h1's daemon down with
them (one run in six): FINDINGS.md."""
import json
import subprocess
import time

import pytest

from launch_util import _mpi_flavour

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif("Open MPI" not in _mpi_flavour(),
                                 reason="ULFM: Open MPI's mpirun --with-ft ulfm (the mpich "
                                        "wheel has no fault tolerance)")]

EPOCHS = 12


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_a_worker_killed_on_the_other_host_and_the_job_goes_on(fresh_cluster, workdir):
    cluster = fresh_cluster
    cmd = cluster.mpirun_command(2, 4, ["-m", "psgd.worker", "--algo", "easgd",
                                        "--survive-worker-loss", "--epochs", str(EPOCHS),
                                        "--metrics", "m.jsonl", "--checkpoint-dir", "ck",
                                        "--out", "final.npz", "--stall-timeout", "20"])
    at = cmd.index("mpirun") + 1
    cmd[at:at] = ["--with-ft", "ulfm"]
    with open(workdir / "out.txt", "w") as out, open(workdir / "err.txt", "w") as err:
        job = subprocess.Popen(cmd, stdout=out, stderr=err, env=cluster.job_env(),
                               cwd=str(workdir), stdin=subprocess.DEVNULL,
                               start_new_session=True)
        metrics = workdir / "m.jsonl"
        deadline = time.time() + 120
        while not (metrics.exists() and len(rows(metrics)) >= 3):
            assert job.poll() is None and time.time() < deadline, \
                (workdir / "err.txt").read_text()[-3000:]
            time.sleep(0.05)
        assert len(cluster.ranks("h1")) == 2
        cluster.tool("exec", "h1", "sh", "-c", "for p in $(pgrep -f psgd.worker); do grep -qa "
                     "OMPI_COMM_WORLD_RANK=3 /proc/$p/environ && kill -9 $p; done; true")
        try:
            job.wait(120)
        finally:
            if job.poll() is None:
                job.kill()
    stdout, stderr = (workdir / "out.txt").read_text(), (workdir / "err.txt").read_text()
    assert job.returncode == 0, stderr[:3000]
    assert "on 2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" in stdout, stdout[:3000]
    assert "psgd: easgd server: worker rank 3 lost at sync" in stderr, stderr
    assert "worker rank 2 lost" not in stderr, stderr
    assert "lost rank 3 on h1 in epoch" in stdout, stdout[-3000:]
    assert "going on with 3 ranks" in stdout, stdout[-3000:]
    assert [r["epoch"] for r in rows(metrics)] == list(range(1, EPOCHS + 1))
    assert (workdir / "final.npz").exists()
    assert cluster.ranks("h0") == [] and cluster.ranks("h1") == []
