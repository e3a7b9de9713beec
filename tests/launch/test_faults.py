"""Faults under mpirun: a rank that raises, stalls, sends NaN or is killed,
corrupt checkpoints, workers without data, pickled input. Each job is the
real CLI (psgd.worker.main) started by tests/fault_driver.py, copied into
tmp_path, which monkeypatches the trainer to misbehave on one rank; nothing
in psgd knows about these tests."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from kaldi_corpus import write_corpus
from launch_util import (MPIRUN, ROOT, PopenJob, assert_clean_failure, error_lines, mpi_env,
                         mpirun, mpirun_command, psgd_train)

pytestmark = pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python")

QUICK = ["--model", "mlp", "--hidden", "32", "--num-samples", "1000", "--quiet"]
ALGORITHMS = ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"]
SERVER_BASED = {"easgd", "asgd", "masgd"}


def faulty(driver, np_, fault, *flags, timeout=90, env=None):
    """(CompletedProcess, seconds) of the CLI under `fault`."""
    start = time.time()
    result = mpirun(np_, [driver, json.dumps(fault)] + list(flags), timeout=timeout,
                    env=dict({"PSGD_TRACEBACK": ""}, **(env or {})))
    return result, time.time() - start


def lines(text, needle):
    # Open MPI's output forwarding may put a NUL before a line that follows its banner.
    return [line.strip("\x00") for line in text.splitlines() if needle in line]


def model_arrays(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "__header__"}


# A rank raises --------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("np_,algo,rank", [
    (3, "bsp", 1), (5, "bsp", 4), (3, "easgd", 2), (5, "easgd", 3),
    (3, "easgd", 0), (5, "easgd", 0)], ids=lambda v: str(v))
def test_a_raise_on_one_rank_ends_the_job_with_one_line(driver, np_, algo, rank):
    fault = {"what": "raise", "rank": rank, "epoch": 1, "step": 2}
    if rank == 0:
        fault["sync"] = 3          # the server raises in its update
    result, seconds = faulty(driver, np_, fault, "--algo", algo, *QUICK, "--epochs", "3")
    assert result.returncode != 0, result.stderr
    assert seconds < 20, seconds
    assert "Traceback" not in result.stderr, result.stderr
    named = lines(result.stderr, "injected fault")
    assert named == ["psgd: rank %d failed: RuntimeError: injected fault" % rank], result.stderr


@pytest.mark.timeout(60)
def test_psgd_traceback_shows_the_traceback(driver):
    result, _ = faulty(driver, 3, {"what": "raise", "rank": 2, "epoch": 0, "step": 2},
                       "--algo", "bsp", *QUICK, "--epochs", "2", env={"PSGD_TRACEBACK": "1"})
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "faulty_loss_and_grad" in result.stderr
    assert lines(result.stderr, "psgd: rank 2 failed: RuntimeError: injected fault")


# A rank stalls ----------------------------------------------------------------------
STALL = ["--stall-timeout", "2", "--epochs", "2"]


@pytest.mark.timeout(60)
def test_a_stall_in_a_collective_is_reported_and_the_job_goes_on(driver):
    result, _ = faulty(driver, 3, {"what": "sleep", "seconds": 5, "rank": 1, "epoch": 0,
                                   "step": 2}, "--algo", "bsp", *QUICK, *STALL)
    assert result.returncode == 0, result.stderr
    report = lines(result.stderr, "psgd: stall:")
    assert len(report) == 1, result.stderr
    assert re.search(r"not arrived after 2s: rank 1 \(computing for [\d.]+s in epoch 1, "
                     r"after sync 0\); waiting: rank 0 \(in sync 1 of epoch 1 for [\d.]+s\), "
                     r"rank 2 \(in sync 1 of epoch 1", report[0]), report


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ["bsp", "easgd"])
def test_stall_abort_ends_the_job(driver, algo):
    result, seconds = faulty(driver, 3, {"what": "sleep", "rank": 1, "epoch": 0, "step": 2},
                             "--algo", algo, *QUICK, *STALL, "--stall-abort")
    assert result.returncode != 0, result.stderr
    assert seconds < 20, seconds
    report = lines(result.stderr, "psgd: stall: not arrived")
    assert report and "rank 1 (computing for" in report[0], result.stderr
    if algo == "easgd":
        # The server waits for rank 1; rank 2 has finished its epoch.
        assert "waiting: rank 0 (the server, serving epoch 1), rank 2 (" in report[0], report
    assert lines(result.stderr, "psgd: stall: --stall-abort ends the job")


@pytest.mark.timeout(60)
def test_a_stalled_server_is_the_one_named(driver):
    fault = {"what": "sleep", "seconds": 5, "rank": 0, "sync": 4}
    result, _ = faulty(driver, 3, fault, "--algo", "easgd", *QUICK, *STALL)
    assert result.returncode == 0, result.stderr
    report = lines(result.stderr, "psgd: stall:")
    assert report, result.stderr
    # Rank 1 waits in a sync, or, when its last sync went through before the
    # server slept (a loaded machine), at the end of the epoch: both are waits.
    assert re.search(r"not arrived after 2s: rank 0 \(the server, epoch 1: no answer for "
                     r"[\d.]+s\); waiting: rank 1 \((in sync \d+ of|at the end of) epoch 1",
                     report[0]), report
    # On a loaded machine a late heartbeat can make the stall read as a new
    # one: a second line is allowed, naming the server again, never a worker.
    assert all(line.startswith("psgd: stall: not arrived after 2s: rank 0 (the server")
               for line in report), report


# A worker produces NaN ------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo,what", [("bsp", "model"), ("syncgrad", "gradient"),
                                       ("easgd", "model")])
def test_nan_stops_the_job_naming_the_rank_and_the_sync(driver, algo, what):
    result, seconds = faulty(driver, 3, {"what": "nan", "rank": 2, "epoch": 1, "step": 2},
                             "--algo", algo, *QUICK, "--epochs", "3")
    assert_clean_failure(result, "rank 2: non-finite %s before sync" % what)
    assert seconds < 20
    assert re.search(r"psgd-train: error: rank 2: non-finite %s before sync \d+ \(epoch 2\); "
                     r"stopping \(--skip-nonfinite" % what, result.stderr), result.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("algo", ["bsp", "syncgrad", "easgd", "asgd"])
def test_skip_nonfinite_drops_counts_and_ends_finite(driver, tmp_path, algo):
    out = str(tmp_path / "model.npz")
    # NaN from the first sync on (before any good one) to the end of epoch 1.
    fault = {"what": "nan", "rank": 1, "epoch": 0, "step": 1, "every": True,
             "dump": str(tmp_path)}
    result, _ = faulty(driver, 3, fault, "--algo", algo, *QUICK, "--epochs", "2",
                       "--skip-nonfinite", "--out", out)
    assert result.returncode == 0, result.stderr
    warned = lines(result.stderr, "contribution dropped")
    assert warned and all(w.startswith("psgd-train: warning: rank 1: non-finite") for w in warned)
    assert lines(result.stdout, "dropped %d non-finite contribution(s)" % len(warned)), \
        result.stdout
    final = model_arrays(out)
    assert all(np.isfinite(a).all() for a in final.values())
    if algo == "syncgrad":
        # Every replica computes every gradient at the same parameters: the
        # dropping rank's optimizer state did not go its own way.
        steps = [json.load(open(str(tmp_path / ("rank-%d.json" % r)))) for r in range(3)]
        assert len(steps[0]) > 10 and steps[0] == steps[1] == steps[2]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ["bsp", "syncgrad"])
def test_the_last_worker_training_drops_its_last_contribution(driver, tmp_path, algo):
    """16 examples over 3 workers: 6, 5, 5 minibatches of one. Rank 0's sixth
    is alone in its sync and dropped: a sum of zero samples must not read as
    "all done" to rank 0 while the others have left the epoch (it hung)."""
    out = str(tmp_path / "m.npz")
    result, _ = faulty(driver, 3, {"what": "nan", "rank": 0, "epoch": 0, "step": 6},
                       "--algo", algo, "--model", "mlp", "--hidden", "8", "--num-samples", "20",
                       "--minibatch-size", "1", "--epochs", "2", "--skip-nonfinite", "--out",
                       out, *([] if algo == "syncgrad" else ["--sync-period", "1"]), timeout=40)
    assert result.returncode == 0, result.stderr
    assert lines(result.stderr, "rank 0: epoch 1 ends early: every worker still training "
                                "dropped its contribution to the same sync"), result.stderr
    assert all(np.isfinite(a).all() for a in model_arrays(out).values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ["easgd", "asgd"])
def test_a_dropped_contribution_leaves_the_center_alone(driver, tmp_path, algo):
    """One worker, NaN at every step: every sync is dropped, and the center
    the server keeps is exactly the initial model."""
    initial, final = str(tmp_path / "initial.npz"), str(tmp_path / "final.npz")
    assert psgd_train(2, "--algo", algo, *QUICK, "--epochs", "0", "--out", initial
                      ).returncode == 0
    result, _ = faulty(driver, 2, {"what": "nan", "rank": 1, "epoch": 0, "step": 1,
                                   "every": True}, "--algo", algo, *QUICK, "--epochs", "1",
                       "--skip-nonfinite", "--out", final)
    assert result.returncode == 0, result.stderr
    assert len(lines(result.stderr, "contribution dropped")) >= 2
    start, end = model_arrays(initial), model_arrays(final)
    for name in start:
        np.testing.assert_array_equal(start[name], end[name], err_msg=name)


# Killed, then resumed --------------------------------------------------------------
RESUMABLE = ["--algo", "bsp", *QUICK, "--seed", "5", "--epochs", "5"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("whole") / "whole.npz")
    result = psgd_train(3, *RESUMABLE, "--out", out)
    assert result.returncode == 0, result.stderr
    return model_arrays(out)


def assert_complete(ckpt, size=3):
    """LATEST names a folder in which every rank's file loads and checks out."""
    from psgd.train import model_io
    with open(os.path.join(ckpt, "LATEST")) as f:
        folder = os.path.join(ckpt, json.load(f)["folder"])
    for r in range(size):
        model_io.load(os.path.join(folder, "rank-%05d.npz" % r))
    return folder


def resume_and_compare(ckpt, tmp_path, uninterrupted):
    out = str(tmp_path / "resumed.npz")
    result = psgd_train(3, *RESUMABLE, "--checkpoint-dir", ckpt, "--resume", "--out", out,
                        "--quiet")
    assert result.returncode == 0, result.stderr
    resumed = model_arrays(out)
    assert set(resumed) == set(uninterrupted)
    for name in uninterrupted:
        np.testing.assert_array_equal(resumed[name], uninterrupted[name], err_msg=name)


@pytest.mark.timeout(120)
def test_killed_while_writing_a_checkpoint(driver, tmp_path, uninterrupted):
    ckpt = str(tmp_path / "ckpt")
    result, _ = faulty(driver, 3, {"what": "kill-in-save", "rank": 1, "epoch": 3},
                       *RESUMABLE, "--checkpoint-dir", ckpt)
    assert result.returncode != 0
    torn = os.path.join(ckpt, "epoch-0003")
    assert os.path.exists(os.path.join(torn, "rank-00000.npz"))
    assert not os.path.exists(os.path.join(torn, "rank-00001.npz"))
    assert [n for n in os.listdir(torn) if n.startswith(".tmp-")], "the half-written file"
    assert assert_complete(ckpt) == os.path.join(ckpt, "epoch-0002")
    resume_and_compare(ckpt, tmp_path, uninterrupted)
    # The resumed run rewrote epoch 3 (kept: the last two) without the leftover.
    assert sorted(os.listdir(torn)) == ["rank-%05d.npz" % r for r in range(3)]
    assert assert_complete(ckpt) == os.path.join(ckpt, "epoch-0004")


def kill_every_process_of(marker, timeout=30):
    """SIGKILL every process whose command line holds `marker`, and wait until
    they are gone: Open MPI's ranks hang off its daemon, not mpirun's process
    group, and outlived the killpg above for a moment (the resumed job then
    found the checkpoint directory still locked by the old rank 0)."""
    def job_pids():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if marker.encode() in f.read() and int(pid) != os.getpid():
                        pids.append(int(pid))
            except OSError:
                pass
        return pids
    deadline = time.time() + timeout
    while job_pids() and time.time() < deadline:
        for pid in job_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    assert not job_pids(), "processes of the killed job outlived SIGKILL"


@pytest.mark.timeout(120)
def test_kill_9_of_the_whole_job_then_resume(driver, tmp_path, uninterrupted):
    ckpt = str(tmp_path / "ckpt")
    env = dict(os.environ, PYTHONPATH=ROOT, PSGD_BACKEND="numpy", **mpi_env())
    cmd = mpirun_command(3) + [sys.executable, driver, json.dumps({"pace": 0.7}),
                               *RESUMABLE, "--checkpoint-dir", ckpt]
    err = open(str(tmp_path / "err.txt"), "w")
    job = PopenJob(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                   stderr=err)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(ckpt, "LATEST")) and time.time() < deadline:
            job.poll()          # a launch the launcher never started is made again
            time.sleep(0.05)
        assert job.poll() is None, "the job ended before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        err.close()
        kill_every_process_of(ckpt)
    assert job.returncode == -signal.SIGKILL
    assert assert_complete(ckpt) != os.path.join(ckpt, "epoch-0004")
    resume_and_compare(ckpt, tmp_path, uninterrupted)


@pytest.fixture
def checkpointed(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    result = psgd_train(3, "--algo", "bsp", *QUICK, "--epochs", "2", "--checkpoint-dir", ckpt)
    assert result.returncode == 0, result.stderr
    return ckpt, assert_complete(ckpt)


@pytest.mark.timeout(60)
def test_a_corrupt_rank_file_is_named_on_every_rank(checkpointed):
    ckpt, folder = checkpointed
    victim = os.path.join(folder, "rank-00001.npz")
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 2)
        chunk = f.read(64)
        f.seek(-len(chunk), 1)
        f.write(bytes(b ^ 0x5A for b in chunk))
    result = psgd_train(3, "--algo", "bsp", *QUICK, "--epochs", "3", "--checkpoint-dir", ckpt,
                        "--resume")
    assert_clean_failure(result, "rank 1: %s: " % victim)
    assert result.returncode == 2
    assert len(error_lines(result.stderr)) == 3, result.stderr


@pytest.mark.timeout(60)
def test_a_missing_checkpoint_folder_is_a_clear_error(checkpointed):
    ckpt, folder = checkpointed
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)
    result = psgd_train(3, "--algo", "bsp", *QUICK, "--epochs", "3", "--checkpoint-dir", ckpt,
                        "--resume")
    assert_clean_failure(result, "%s points at %s, which is missing" % (
        os.path.join(ckpt, "LATEST"), folder))
    assert len(error_lines(result.stderr)) == 3, result.stderr


# Uneven and empty shards ----------------------------------------------------------
@pytest.fixture(scope="module")
def three_utterances(tmp_path_factory):
    return write_corpus(str(tmp_path_factory.mktemp("tiny")), num_utts=3)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ALGORITHMS)
def test_workers_without_utterances_take_part(three_utterances, tmp_path, algo):
    k, out = three_utterances, str(tmp_path / "m.npz")
    result = psgd_train(5, "--algo", algo, "--feats", "scp:" + k["feats.scp"], "--targets",
                        k["ali.ark"], "--model", "mlp", "--hidden", "16", "--epochs", "2",
                        "--minibatch-size", "8", "--quiet", "--out", out)
    assert result.returncode == 0, result.stderr
    # 3 utterances: collective workers 3 and 4 (ranks 3, 4) have none; under a
    # server algorithm worker 3 is rank 4.
    empty = [4] if algo in SERVER_BASED else [3, 4]
    warned = lines(result.stderr, "has no training utterances")
    assert sorted(int(re.search(r"rank (\d+):", w).group(1)) for w in warned) == empty, warned
    assert all(np.isfinite(a).all() for a in model_arrays(out).values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ALGORITHMS)
def test_uneven_mnist1d_shards(tmp_path, algo):
    # 104 training examples: 21,21,21,21,20 over 5 workers, 35,35,34 over 3;
    # minibatches of 8 leave a partial batch on every worker.
    metrics = str(tmp_path / "m.jsonl")
    np_ = 4 if algo in SERVER_BASED else 5
    result = psgd_train(np_, "--algo", algo, "--model", "mlp", "--hidden", "16",
                        "--num-samples", "130", "--minibatch-size", "8", "--epochs", "2",
                        "--quiet", "--metrics", metrics)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in open(metrics)]
    assert [row["samples"] for row in rows] == [104, 208]
    assert all(np.isfinite(row["test_loss"]) for row in rows)


# Files are only read ------------------------------------------------------------
# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
@pytest.mark.timeout(60)
def test_a_pickled_init_model_is_refused(tmp_path):
    evil = str(tmp_path / "evil.npz")
    header = json.dumps({"model": {"name": "mlp", "input_shape": [1, 40]}}).encode()
    np.savez(evil, **{"0.affine.W": np.array([{"run": "code"}], dtype=object),
                      "__header__": np.frombuffer(header, dtype=np.uint8)})
    result = psgd_train(2, *QUICK, "--init", evil, "--epochs", "1")
    assert_clean_failure(result, "%s: not a readable psgd model/checkpoint (it holds pickled "
                                 "Python objects, which psgd never loads)" % evil)
