"""bin/psgd-elastic on namespace hosts: a host killed at a random moment of
the run (which host and when are printed on failure) and the job still ends
with a trained model on the survivor, resumed from the last complete
checkpoint, none lost; every host killed: one clear error and the last
checkpoint intact; a bad flag: not restarted. The loop of many such runs
with the numbers is benchmarks/elastic.py."""
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster_util import TOOL

pytestmark = pytest.mark.timeout(240)

ELASTIC = os.path.join(os.path.dirname(TOOL), "psgd-elastic")
EPOCHS = 12
TRAIN = ["--algo", "bmuf", "--model", "mlp", "--hidden", "64", "--epochs", str(EPOCHS),
         "--checkpoint-dir", "ck", "--out", "final.npz", "--metrics", "metrics.jsonl"]


@pytest.fixture
def cluster(fresh_cluster):
    """Two hosts of each test's own: the tests kill them."""
    return fresh_cluster


def start(cluster, workdir, hosts, *flags):
    cmd = [sys.executable, ELASTIC, "--hosts", hosts, "--launcher",
           "%s %s mpirun" % (sys.executable, TOOL)] + TRAIN + list(flags)
    with open(workdir / "out.txt", "w") as out, open(workdir / "err.txt", "w") as err:
        return subprocess.Popen(cmd, stdout=out, stderr=err, env=cluster.job_env(),
                                cwd=str(workdir), stdin=subprocess.DEVNULL,
                                start_new_session=True)


def latest(workdir):
    """Epochs the last complete checkpoint holds, 0 before the first."""
    try:
        with open(workdir / "ck" / "LATEST") as f:
            return int(json.load(f)["folder"].split("-")[1]) + 1
    except (OSError, ValueError):
        return 0


def wait_for(job, workdir, epochs, timeout=90):
    deadline = time.time() + timeout
    while latest(workdir) < epochs:
        assert job.poll() is None and time.time() < deadline, (
            workdir / "err.txt").read_text()[-3000:]
        time.sleep(0.05)


def finish(job, timeout=150):
    try:
        return job.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, 9)
        job.wait()
        raise


def assert_complete(workdir):
    """LATEST names a folder whose every rank file loads."""
    with open(workdir / "ck" / "LATEST") as f:
        pointer = json.load(f)
    folder = workdir / "ck" / pointer["folder"]
    files = sorted(os.listdir(folder))
    assert files == ["rank-%05d.npz" % k for k in range(pointer["size"])], files
    for name in files:
        with np.load(folder / name, allow_pickle=False) as z:
            assert z.files


def own_lines(workdir):
    return [l for l in (workdir / "err.txt").read_text().splitlines()
            if l.startswith("psgd-elastic:")]


def test_a_host_killed_at_a_random_moment_and_the_job_ends_trained(cluster, workdir):
    victim = random.choice(cluster.names)      # h0 holds rank 0 and the launcher
    # a random epoch and a random moment within it, never past the run: a
    # delay drawn in seconds once outlasted a quiet machine's whole run
    at = random.randint(2, EPOCHS - 4)
    job = start(cluster, workdir, "h0:2,h1:2")
    wait_for(job, workdir, 1)
    first = time.time()
    wait_for(job, workdir, at)
    delay = random.uniform(0, (time.time() - first) / (at - 1))
    why = "killed %s %.2fs after the checkpoint of epoch %d" % (victim, delay, at)
    time.sleep(delay)
    saved = latest(workdir)
    cluster.kill(victim)
    code = finish(job)
    err = (workdir / "err.txt").read_text()
    assert code == 0, (why, err[-3000:])
    lines = own_lines(workdir)
    assert lines[0].startswith("psgd-elastic: restart 1/3: lost host %s at epoch " % victim), (
        why, lines)
    survivor = [h for h in cluster.names if h != victim][0]
    assert "on %s:2, 2 ranks" % survivor in lines[0], (why, lines)
    # resumed from a checkpoint no older than the one complete at the kill
    resumed = [l for l in (workdir / "out.txt").read_text().splitlines()
               if "resumed from epoch" in l]
    assert len(resumed) == 1 and int(resumed[0].split("resumed from epoch ")[1].split()[0]) \
        >= saved, (why, resumed)
    rows = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["epoch"] == EPOCHS and rows[-1]["test_accuracy"] > 0.4, (why, rows[-1])
    assert latest(workdir) == EPOCHS
    assert_complete(workdir)
    with np.load(workdir / "final.npz", allow_pickle=False) as z:
        assert z.files


@pytest.mark.one_mpi
def test_every_host_killed_is_one_error_and_the_checkpoint_stays(cluster, workdir):
    job = start(cluster, workdir, "h0:1,h1:1")
    wait_for(job, workdir, 2)
    kills = [subprocess.Popen([sys.executable, TOOL, "kill", h], env=cluster.job_env(),
                              stdin=subprocess.DEVNULL) for h in cluster.names]
    assert [k.wait(60) for k in kills] == [0, 0]
    saved = latest(workdir)
    assert finish(job) == 1
    lines = [l for l in own_lines(workdir) if "error" in l]
    assert len(lines) == 1 and lines[0].startswith("psgd-elastic: error: lost hosts h0, h1 "), \
        own_lines(workdir)
    assert "0 hosts left, fewer than --min-hosts 1; the last checkpoint (epoch %d) is in ck" % (
        latest(workdir)) in lines[0]
    assert latest(workdir) >= saved
    assert_complete(workdir)


@pytest.mark.one_mpi
def test_a_bad_flag_is_not_restarted(cluster, workdir):
    job = start(cluster, workdir, "h0:1,h1:1", "--lr", "-1")
    assert finish(job) == 2
    assert own_lines(workdir) == [
        "psgd-elastic: error: the job failed (exit status 2) with every host answering: not a "
        "lost host, not restarted"]
    assert not (workdir / "ck" / "LATEST").exists()
