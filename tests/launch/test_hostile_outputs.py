"""Output paths under hostile use (issue 13, findings 4-8): checked before
the first epoch, written atomically (a full disk never tears --metrics),
--metrics consistent with what --resume resumes, --checkpoint-dir locked
against a second job (and a SIGKILLed job's lock not in the way), debris
of a writer killed mid-write removed at the next start, umask honoured."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from launch_util import MPIRUN, assert_clean_failure, mpirun, psgd_train, start_mpirun

# checks of files and locks, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.one_mpi]

QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600", "--quiet"]


def _trained_nothing(result):
    return "epoch 1/" not in result.stdout


# 7: every output path is checked at start-up -----------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("flag,where,needle", [
    ("--out", "DIR", "is a directory"),
    ("--out", "/proc/psgd-no/model.npz", "cannot write in /proc"),
    ("--out", "FILE/model.npz", "is not a directory"),
    ("--plot", "DIR/curves.xyz", "unknown format 'xyz'"),
    ("--plot", "DIR", "is a directory"),
    ("--plot", "/proc/curves.png", "cannot write in /proc"),
    ("--metrics", "FILE/m.jsonl", "is not a directory"),
    ("--checkpoint-dir", "FILE", "is not a directory"),
], ids=lambda v: str(v).replace("/", "_"))
def test_a_bad_output_path_fails_before_training(tmp_path, flag, where, needle):
    (tmp_path / "DIR").mkdir()
    (tmp_path / "FILE").write_text("x")
    path = where.replace("DIR", str(tmp_path / "DIR")).replace("FILE", str(tmp_path / "FILE"))
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "2", flag, path)
    assert_clean_failure(result, needle)
    assert flag in result.stderr
    assert not os.path.exists(str(tmp_path / "DIR") + ".png")


# 8: debris of a killed writer; umask ---------------------------------------------
KILLER = '''import os, signal, sys
real = os.replace
def dying_replace(src, dst):
    if dst.endswith("model.npz"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.replace = dying_replace
import psgd.worker
sys.exit(psgd.worker.main(sys.argv[1:]))
'''


@pytest.mark.timeout(90)
def test_a_writer_killed_mid_write_leaves_debris_the_next_start_removes(tmp_path):
    driver = tmp_path / "killer.py"
    driver.write_text(KILLER)
    out = str(tmp_path / "models" / "model.npz")
    killed = mpirun(2, [str(driver), "--algo", "bsp", *QUICK, "--epochs", "1", "--out", out])
    assert killed.returncode != 0
    debris = [n for n in os.listdir(str(tmp_path / "models")) if n.startswith(".tmp-")]
    assert debris, "the SIGKILL left no temporary file: the test tests nothing"
    # a live writer's temporary file (this test process) is not debris
    live = ".tmp-%d@%s-live.npz" % (os.getpid(), socket.gethostname())
    (tmp_path / "models" / live).write_text("being written")
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "1", "--out", out)
    assert result.returncode == 0, result.stderr
    left = sorted(n for n in os.listdir(str(tmp_path / "models")) if n.startswith(".tmp-"))
    assert left == [live], left


@pytest.mark.timeout(60)
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        result = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "1",
                            "--out", str(tmp_path / "m.npz"), "--metrics",
                            str(tmp_path / "m.jsonl"), "--checkpoint-dir", str(tmp_path / "ck"))
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    for name in ("m.npz", "m.jsonl", "ck/LATEST", "ck/epoch-0000/rank-00000.npz"):
        assert os.stat(str(tmp_path / name)).st_mode & 0o777 == mode, name


# 6: one job per checkpoint directory -----------------------------------------------
@pytest.mark.timeout(120)
def test_a_second_job_on_a_locked_checkpoint_dir_is_refused_and_a_killed_ones_lock_is_not(
        tmp_path):
    ck = str(tmp_path / "ck")
    with open(str(tmp_path / "a.out"), "w") as out, open(str(tmp_path / "a.err"), "w") as err:
        first = start_mpirun(2, ["-m", "psgd.worker", "--algo", "bsp", "--model", "mlp",
                                 "--hidden", "16", "--num-samples", "2000", "--epochs", "100000",
                                 "--checkpoint-dir", ck], out, err)
        try:
            end = time.time() + 60
            while not os.path.exists(os.path.join(ck, "LATEST")) and time.time() < end:
                first.poll()        # a launch the launcher never started is made again
                time.sleep(0.2)
            assert os.path.exists(os.path.join(ck, "LATEST"))
            second = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "1",
                                "--checkpoint-dir", ck)
            assert_clean_failure(second, "--checkpoint-dir %s is in use by another job (pid " % ck)
            assert _trained_nothing(second)
            holder = open(os.path.join(ck, ".lock")).read().split()[1]
            os.kill(int(holder), signal.SIGKILL)        # the job dies holding the lock
            first.wait(30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    # one epoch more than the killed job checkpointed (fewer is refused)
    with open(os.path.join(ck, "LATEST")) as f:
        epochs = int(json.load(f)["folder"][len("epoch-"):]) + 2
    again = psgd_train(2, "--algo", "bsp", "--model", "mlp", "--hidden", "16",
                       "--num-samples", "2000", "--quiet", "--epochs", str(epochs), "--resume",
                       "--checkpoint-dir", ck)
    assert again.returncode == 0, again.stderr


# 4, 5: --metrics ------------------------------------------------------------------------
def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.timeout(90)
def test_metrics_keep_exactly_the_epochs_up_to_the_checkpoint(tmp_path):
    metrics, ck = str(tmp_path / "m.jsonl"), str(tmp_path / "ck")
    with open(metrics, "w") as f:       # an earlier, unrelated run's lines
        f.write('{"epoch": 3, "train_loss": 9}\n{"epoch": 4, "train_loss": 9}\n')
    common = ["--algo", "bsp", *QUICK, "--metrics", metrics, "--checkpoint-dir", ck, "--resume"]
    fresh = psgd_train(2, *common, "--epochs", "2")   # no checkpoint yet: a fresh start
    assert fresh.returncode == 0, fresh.stderr
    assert [r["epoch"] for r in _rows(metrics)] == [1, 2]
    # epoch 3 was logged, then the job died before its checkpoint; a torn line follows
    with open(metrics, "a") as f:
        f.write('{"epoch": 3, "train_loss": 9}\n{"epoch":')
    resumed = psgd_train(2, *common, "--epochs", "4")
    assert resumed.returncode == 0, resumed.stderr
    assert "m.jsonl:4: torn last line dropped" in resumed.stderr
    rows = _rows(metrics)
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["train_loss"] != 9


@pytest.fixture
def small_fs(tmp_path):
    """A 16 KiB tmpfs (root only; skipped where it cannot be mounted)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    yield str(mount)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.timeout(120)
def test_a_full_disk_never_tears_the_metrics_file(tmp_path, small_fs):
    with open(os.path.join(small_fs, "filler"), "wb") as f:
        f.write(b"\0" * 8192)
    metrics = os.path.join(small_fs, "m.jsonl")
    result = psgd_train(2, "--algo", "bsp", *QUICK, "--epochs", "60", "--metrics", metrics)
    assert result.returncode != 0, "the disk never filled: the test tests nothing"
    assert "No space left on device" in result.stderr, result.stderr
    rows = _rows(metrics)                       # every line whole
    assert rows and [r["epoch"] for r in rows] == list(range(1, len(rows) + 1))
    assert not [n for n in os.listdir(small_fs) if n.startswith(".tmp-")]
