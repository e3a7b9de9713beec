"""bin/psgd-slurm.sbatch on a real SLURM over the namespace hosts: slurmctld
on a host of its own, a slurmd per host, SLURM's own defaults
(MpiDefault=none), no PSGD_VENV. SLURM's daemons come from apt where they
are missing; the cluster's `down` stops every one of them."""
import glob
import os
import subprocess
import sys
import time

import pytest

from cluster_util import TOOL, cluster_fixture

pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


@pytest.fixture(scope="module")
def slurm_cluster():
    yield from cluster_fixture(2, "1gbit", slurm=True)


def slurm(cluster, workdir, *args, env=None, timeout=240):
    job_env = cluster.job_env()
    job_env.pop("PSGD_VENV", None)
    job_env.update(env or {})
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                          env=job_env, cwd=str(workdir), timeout=timeout,
                          stdin=subprocess.DEVNULL)


def log_of(workdir):
    logs = glob.glob(str(workdir / "slurm-*.log"))
    assert len(logs) == 1, logs
    with open(logs[0]) as f:
        return f.read()


def test_the_sbatch_script_trains_on_two_nodes(slurm_cluster, workdir):
    """The script runs from slurmd's spooled copy and finds the repository's
    .venv all the same; srun --mpi=pmi2 makes one 4-rank job of the tasks
    whatever the site's MpiDefault."""
    script = os.path.join(os.path.dirname(TOOL), "psgd-slurm.sbatch")
    r = slurm(slurm_cluster, workdir, "sbatch", "-N", "2", "--ntasks-per-node=2", "--wait",
              "-o", "slurm-%j.log", script, "--algo", "bmuf", "--model", "mlp", "--epochs", "2")
    log = log_of(workdir)
    assert r.returncode == 0, r.stdout + r.stderr + log[-3000:]
    assert "bmuf on 4 ranks" in log and "on 2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" in log, log
    assert glob.glob(str(workdir / "runs" / "slurm-*" / "final.npz")), log


def test_the_sbatch_script_names_a_missing_virtualenv(slurm_cluster, workdir):
    script = os.path.join(os.path.dirname(TOOL), "psgd-slurm.sbatch")
    r = slurm(slurm_cluster, workdir, "sbatch", "-N", "1", "--wait", "-o", "slurm-%j.log",
              script, env={"PSGD_VENV": str(workdir / "no-venv")})
    assert r.returncode != 0
    assert "psgd-slurm.sbatch: error: no virtualenv at %s" % (workdir / "no-venv") in \
        log_of(workdir)


def test_a_trainer_alone_in_a_slurm_step_of_four_says_so(slurm_cluster, workdir):
    """srun without --mpi under MpiDefault=none: four 1-rank trainers, each
    of which says what happened instead of fighting over the outputs."""
    r = slurm(slurm_cluster, workdir, "srun", "-N", "2", "--ntasks-per-node=2",
              sys.executable, "-m", "psgd.worker", "--epochs", "1", "--checkpoint-dir", "ck")
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if l.startswith("psgd-train: error:")]
    assert len(lines) == 4, r.stderr
    assert all("a job of 1 rank, but its SLURM step has 4 tasks" in l for l in lines), lines
    assert "Traceback" not in r.stderr and "in use by another job" not in r.stderr


@pytest.fixture
def own_slurm_cluster():
    """For a test that kills a host: not the module's cluster."""
    yield from cluster_fixture(2, "1gbit", slurm=True)


def test_psgd_elastic_in_an_allocation_goes_on_without_a_lost_node(own_slurm_cluster,
                                                                   workdir):
    """No --hosts: the allocation's nodes and tasks per node (SLURM_JOB_NODELIST
    through scontrol, SLURM_TASKS_PER_NODE), one rank per task; h1 killed
    after the first checkpoint, the job (sbatch --no-kill) ends on h0."""
    elastic = os.path.join(os.path.dirname(TOOL), "psgd-elastic")
    job = subprocess.Popen(
        [sys.executable, TOOL, "sbatch", "-N", "2", "--ntasks-per-node=2", "--no-kill",
         "--wait", "-o", "slurm-%j.log", "--wrap", "%s %s --probe-timeout 5 --checkpoint-dir "
         "ck --algo bmuf --model mlp --hidden 16 --epochs 8" % (sys.executable, elastic)],
        env=own_slurm_cluster.job_env(), cwd=str(workdir), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (workdir / "ck" / "LATEST").exists():
        assert job.poll() is None and time.time() < deadline, job.stdout.read()
        time.sleep(0.05)
    own_slurm_cluster.kill("h1")
    out = job.communicate(timeout=180)[0]
    log = log_of(workdir)
    assert job.returncode == 0, out + log[-3000:]
    assert "on 2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" in log, log[-3000:]
    assert "psgd-elastic: restart 1/3: lost host h1 at epoch " in log, log[-3000:]
    assert '"folder": "epoch-0007", "size": 2' in (workdir / "ck" / "LATEST").read_text(), log
