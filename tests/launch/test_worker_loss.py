"""--survive-worker-loss (issue 30, item 3): a server algorithm's job goes on
when a worker's process dies, without a restart, where the MPI has ULFM
(Open MPI started with `mpirun --with-ft ulfm`); everywhere else the flag
is refused with one line. The worker is killed (SIGKILL, at once, as a lost
host would end it) by tests/fault_driver.py in the middle of an epoch."""
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from launch_util import (MPIRUN, PopenJob, _mpi_flavour, assert_clean_failure, error_lines,
                         job_env, mpirun_command, psgd_train, run_job)

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1000", "--quiet"]
OPEN_MPI = "Open MPI" in _mpi_flavour() if os.path.exists(MPIRUN) else False
needs_ulfm = pytest.mark.skipif(not OPEN_MPI, reason="ULFM: Open MPI's mpirun --with-ft ulfm "
                                "(the mpich wheel has no fault tolerance)")


def with_ft(np_, argv, tmp_path, timeout=120):
    """The job under `mpirun --with-ft ulfm`."""
    cmd = mpirun_command(np_)
    cmd = cmd[:1] + ["--with-ft", "ulfm"] + cmd[1:] + [sys.executable] + list(argv)
    return run_job(cmd, timeout, job_env({"PSGD_TRACEBACK": ""}), tmp_path)


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@needs_ulfm
@pytest.mark.timeout(150)
@pytest.mark.parametrize("algo,extra", [("easgd", []), ("asgd", ["--barrier-period", "4"]),
                                        ("masgd", [])], ids=["easgd", "asgd-barrier", "masgd"])
def test_a_dead_worker_is_dropped_and_the_job_goes_on(driver, tmp_path, algo, extra):
    """4 ranks, worker rank 2 killed in epoch 2 of 4: the server names it and
    serves the other two to the end of the epoch, the survivors go on at 3
    ranks from the server's center, every epoch has its metrics row and the
    checkpoints after the loss are the 3 ranks'. The watchdog, with
    --stall-abort, does not take the dead rank for a stalled one."""
    fault = {"what": "die", "rank": 2, "epoch": 1, "step": 4}
    result = with_ft(4, [driver, json.dumps(fault), "--algo", algo, *extra, *QUICK,
                         "--survive-worker-loss", "--epochs", "4", "--metrics", "m.jsonl",
                         "--out", "final.npz", "--checkpoint-dir", "ck",
                         "--stall-timeout", "20", "--stall-abort"], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "psgd: %s server: worker rank 2 lost at sync" % algo in result.stderr, out
    assert re.search(r"; [012] other workers? still in this round", result.stderr), out
    assert "lost rank 2 on " in out and "going on with 3 ranks" in out, out
    assert "stall" not in result.stderr, out
    metrics = rows(tmp_path / "m.jsonl")
    assert [r["epoch"] for r in metrics] == [1, 2, 3, 4], metrics
    assert metrics[-1]["train_loss"] < metrics[1]["train_loss"], metrics   # trained on
    assert all(r["syncs"] > 0 for r in metrics), metrics
    assert (tmp_path / "final.npz").exists()
    latest = json.loads((tmp_path / "ck" / "LATEST").read_text())["folder"]
    assert latest == "epoch-0003", latest
    files = sorted(os.listdir(tmp_path / "ck" / latest))
    assert files == ["rank-%05d.npz" % r for r in range(3)], files


def _ended_by_itself(driver, fault, tmp_path):
    """An easgd job of 4 ranks under --with-ft ulfm with `fault`: its stderr
    and status. A job still running after 60 s is a hang (it ends in 3 s):
    the test kills it and fails, with the ranks' lines."""
    cmd = mpirun_command(4)
    cmd = cmd[:1] + ["--with-ft", "ulfm"] + cmd[1:] + [sys.executable, driver, json.dumps(fault),
                                                      "--algo", "easgd", *QUICK,
                                                      "--survive-worker-loss", "--epochs", "3"]
    with open(tmp_path / "err.txt", "w") as err:
        job = PopenJob(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path,
                       env=job_env({"PSGD_TRACEBACK": ""}), stdin=subprocess.DEVNULL,
                       start_new_session=True)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            pytest.fail("the job did not end: %s" % (tmp_path / "err.txt").read_text())
    return (tmp_path / "err.txt").read_text(), job.returncode


@needs_ulfm
@pytest.mark.timeout(90)
def test_a_dead_server_is_named_by_its_workers(driver, tmp_path):
    """No job survives its server: the workers say so, without a traceback,
    and each ends itself with status 1, not with MPI_Abort (whose kill can
    end every worker before its own exit, and the launcher then reported 0:
    errors.ServerDiedError). The worker whose sync met the dead server
    still meets the others where they check: it used to end at once, and
    the others then waited for the MPI's notice of its exit in the check's
    Agree (1 run in 4: 60 s, then a misleading line)."""
    fault = {"what": "die", "rank": 0, "epoch": 1, "sync": 15}
    stderr, returncode = _ended_by_itself(driver, fault, tmp_path)
    assert returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    host = socket.gethostname()
    assert re.search(r"psgd: error: rank [123]: the easgd server \(rank 0 on %s\) died "
                     r"\(MPI_ERR_PROC_FAILED" % re.escape(host), stderr), stderr
    assert "MPI_ABORT was invoked" not in stderr, stderr


@needs_ulfm
@pytest.mark.timeout(90)
def test_a_server_dead_in_one_workers_sync_while_the_others_end_the_epoch(driver, tmp_path):
    """The schedule that hung: rank 3 starts epoch 2 late, ranks 1 and 2
    finish it and wait in its end's collectives, and the server dies at
    rank 3's first sync. Rank 3 meets the death in its sync, the others in
    their collectives; all three agree on it in the check and each ends
    with its line (rank 3 ending at once left the other two in the check's
    Agree until its deadline)."""
    fault = {"what": "die", "rank": 0, "epoch": 1, "from": 3, "lagging": 3, "lag": 2.0}
    stderr, returncode = _ended_by_itself(driver, fault, tmp_path)
    assert returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    server = r"the easgd server \(rank 0 on %s\) " % re.escape(socket.gethostname())
    assert re.search(r"psgd: error: rank 3: %sdied \(MPI_ERR_PROC_FAILED" % server, stderr), stderr
    for rank in (1, 2):
        assert re.search(r"psgd: error: rank %d: %swas lost in epoch 2: " % (rank, server),
                         stderr), stderr
    assert "MPI_ABORT was invoked" not in stderr, stderr


@needs_ulfm
@pytest.mark.timeout(90)
def test_a_server_lost_at_an_epochs_end_is_named_by_its_workers(driver, tmp_path):
    """The server dies as the end of epoch 1 begins: the workers meet it in
    that end's collectives, not in a sync, and the survival check names it
    (the same error, the same exit without MPI_Abort)."""
    fault = {"what": "die", "rank": 0, "epoch": 0, "at_epoch_end": True}
    stderr, returncode = _ended_by_itself(driver, fault, tmp_path)
    assert returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    assert re.search(r"psgd: error: rank [123]: the easgd server \(rank 0 on %s\) was lost "
                     r"in epoch 1: " % re.escape(socket.gethostname()), stderr), stderr
    assert "MPI_ABORT was invoked" not in stderr, stderr


@needs_ulfm
@pytest.mark.timeout(90)
def test_the_last_worker_lost_ends_the_job_with_its_checkpoint_intact(driver, tmp_path):
    fault = {"what": "die", "rank": 1, "epoch": 1, "step": 4}
    result = with_ft(2, [driver, json.dumps(fault), "--algo", "asgd", *QUICK,
                         "--survive-worker-loss", "--epochs", "3", "--checkpoint-dir", "ck"],
                     tmp_path, timeout=60)
    assert_clean_failure(result, "every worker was lost (rank 1, in epoch 2): no worker is "
                                 "left to train; the last checkpoint in ck is as it was")
    latest = json.loads((tmp_path / "ck" / "LATEST").read_text())["folder"]
    assert latest == "epoch-0000"
    assert sorted(os.listdir(tmp_path / "ck" / latest)) == ["rank-00000.npz", "rank-00001.npz"]


@pytest.mark.timeout(60)
def test_survival_is_refused_where_the_mpi_cannot(tmp_path):
    """The mpich wheel has no ULFM; Open MPI has it only when started with it."""
    result = psgd_train(3, "--algo", "easgd", *QUICK, "--survive-worker-loss",
                        "--epochs", "1", cwd=str(tmp_path))
    assert_clean_failure(result, "survive_worker_loss=True: this ")
    needle = ("this job was not started with fault tolerance" if OPEN_MPI
              else "has no fault tolerance")
    assert all(needle in line and "--with-ft ulfm" in line
               for line in error_lines(result.stderr)), result.stderr
    assert len(error_lines(result.stderr)) == 3, result.stderr


@pytest.mark.one_mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags,needle", [
    (["--algo", "bmuf"], "--survive-worker-loss does not apply to --algo bmuf"),
    (["--algo", "asgd", "--servers", "2"], "--survive-worker-loss needs one server")],
    ids=["collective", "sharded"])
def test_survival_needs_one_server(tmp_path, flags, needle):
    result = psgd_train(4, *flags, *QUICK, "--survive-worker-loss", "--epochs", "1",
                        cwd=str(tmp_path), env={"OMPI_MCA_mpi_ft_enable": "1"})
    assert_clean_failure(result, needle)
    assert len(error_lines(result.stderr)) == 4, result.stderr
