"""The cluster scripts in bin/: the Kaldi-style scheduler and the comparison table."""
import os
import shlex
import subprocess
import sys

import pytest

from kaldi_corpus import write_corpus
from launch_util import MPIRUN, ROOT, mpi_env

# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


def run_script(name, *args, timeout=240, mpirun=MPIRUN):
    env = dict(os.environ, **mpi_env())
    env.update(PSGD_PYTHON=sys.executable, PSGD_MPIRUN=str(mpirun),
               PYTHONPATH=ROOT, PSGD_BACKEND="numpy",
               PSGD_CACHE_DIR=os.path.join(ROOT, ".cache"))
    return subprocess.run(["bash", os.path.join(ROOT, "bin", name)] + list(args),
                          capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def test_kaldi_scheduler_trains_per_epoch_with_newbob(tmp_path):
    train = write_corpus(str(tmp_path), num_utts=30, prefix="train")
    cv = write_corpus(str(tmp_path), num_utts=8, prefix="cv", seed=3)
    r = run_script("train_scheduler.sh", "--np", "2", "--algo", "bsp", "--max-iters", "3",
                   "--lr", "0.01", str(tmp_path / "exp"),
                   "--feats", "scp:" + train["feats.scp"], "--targets", train["ali.ark"],
                   "--cv-feats", "scp:" + cv["feats.scp"], "--cv-targets", cv["ali.txt"],
                   "--model", "mlp", "--hidden", "32", "--splice", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""       # finding 20 of issue 25: no RuntimeWarning in its lines
    lines = r.stdout.splitlines()
    assert lines[0].startswith("CROSSVAL PRERUN AVG.LOSS")
    iterations = [l for l in lines if l.startswith("ITERATION")]
    assert len(iterations) >= 2 and "nnet accepted" in iterations[0]
    assert os.path.exists(tmp_path / "exp" / "final.npz")
    # steps/nnet/train.sh's layout for nnet-forward and decode.sh
    for name in ("final.nnet", "final.feature_transform", "ali_train_pdf.counts"):
        assert os.path.getsize(tmp_path / "exp" / name) > 0, name
    assert (tmp_path / "exp" / "final.nnet").read_bytes()[:2] == b"\x00B"
    assert (tmp_path / "exp" / "final.feature_transform").read_text().startswith(
        "<Nnet> \n<Splice> 15 5 \n[ -1 0 1 ]")


def test_compare_algorithms_prints_one_table(tmp_path):
    r = run_script("compare_algorithms.sh", "3", "--model", "mlp", "--hidden", "32",
                   "--num-samples", "600", "--epochs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [l.split() for l in r.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd",
                                        "masgd"]
    assert all(row[1] != "failed" for row in rows), r.stdout + r.stderr


def fake_mpirun(tmp_path, output, status):
    """An mpirun that prints `output`, exits `status` and notes its
    arguments in calls.txt: the scripts' handling of a trainer call, fast."""
    path = tmp_path / "mpirun"
    path.write_text("#!/bin/bash\necho \"$@\" >> %s\nprintf '%%s' %s\nexit %d\n" % (
        tmp_path / "calls.txt", shlex.quote(output), status))
    path.chmod(0o755)
    return path


def calls(tmp_path):
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def one_error_line(r, *culprits):
    lines = r.stderr.splitlines()
    assert r.returncode != 0 and len(lines) == 1 and ": error: " in lines[0], r.stderr
    assert all(c in lines[0] for c in culprits), r.stderr
    return lines[0]


@pytest.mark.parametrize("options, culprit", [
    (["--np", "abc"], "--np"), (["--np", "0"], "--np"), (["--np", "2x"], "--np"),
    (["--max-iters", "abc"], "--max-iters"), (["--max-iters", "0"], "--max-iters"),
    (["--min-iters", "-1"], "--min-iters"),
    (["--lr", "abc"], "--lr"), (["--lr", "-0.1"], "--lr"),
    (["--halving-factor", "2"], "--halving-factor"),
    (["--start-halving-impr", "x"], "--start-halving-impr"),
])
def test_train_scheduler_refuses_a_bad_number_before_any_training(tmp_path, options, culprit):
    """Finding 18 of issue 25: --max-iters abc exited 0 with the untrained
    model as final, --np abc ran 1 rank."""
    mpirun = fake_mpirun(tmp_path, "", 0)
    r = run_script("train_scheduler.sh", *options, str(tmp_path / "exp"), mpirun=mpirun)
    one_error_line(r, culprit, options[1])
    assert calls(tmp_path) == [] and not os.path.exists(tmp_path / "exp" / "final.npz")


@pytest.mark.parametrize("script", ["train_scheduler.sh", "compare_algorithms.sh"])
def test_a_flag_without_its_value_is_named(tmp_path, script):
    """Finding 18 of issue 25: `--np` without a value: "unbound variable"."""
    args = ["--np"] if script == "train_scheduler.sh" else ["abc"]
    r = run_script(script, *args, mpirun=fake_mpirun(tmp_path, "", 0))
    one_error_line(r, "--np" if script == "train_scheduler.sh" else "NP")
    assert calls(tmp_path) == []


def test_train_scheduler_prints_the_trainers_error_line(tmp_path):
    """Finding 17 of issue 25: a failed trainer call printed nothing; its
    reason was only in DIR/log."""
    mpirun = fake_mpirun(tmp_path, "psgd-train: error: --feats x: no such file\n" * 3, 2)
    r = run_script("train_scheduler.sh", "--np", "3", str(tmp_path / "exp"), mpirun=mpirun)
    line = one_error_line(r, "the initial model", "--feats x: no such file",
                          str(tmp_path / "exp" / "log" / "init.log"))
    assert line.count("no such file") == 1 and r.returncode == 2
    assert len(calls(tmp_path)) == 1 and calls(tmp_path)[0].startswith("-np 3 ")


def test_train_scheduler_prints_a_real_trainers_error(tmp_path):
    r = run_script("train_scheduler.sh", "--np", "2", str(tmp_path / "exp"),
                   "--feats", "scp:" + str(tmp_path / "absent.scp"), "--targets", "ali.ark")
    one_error_line(r, "the initial model failed", "psgd-train: error: ", "absent.scp")
    assert r.returncode == 2


def test_train_scheduler_shows_the_end_of_a_log_without_an_error_line(tmp_path):
    mpirun = fake_mpirun(tmp_path, "".join("line %d\n" % i for i in range(20)) + "Killed\n", 137)
    r = run_script("train_scheduler.sh", str(tmp_path / "exp"), mpirun=mpirun)
    assert r.returncode == 137 and "the initial model failed" in r.stderr
    assert r.stderr.rstrip().endswith("Killed") and "line 5\n" not in r.stderr, r.stderr


def test_train_scheduler_refuses_a_cross_validation_without_a_loss(tmp_path):
    mpirun = fake_mpirun(tmp_path, "LOG (psgd-train) nothing to report\n", 0)
    r = run_script("train_scheduler.sh", str(tmp_path / "exp"), mpirun=mpirun)
    one_error_line(r, "no AvgLoss", "prerun.cv.log")
    assert not os.path.exists(tmp_path / "exp" / "final.npz")


@pytest.mark.parametrize("np_", ["abc", "0", "1", "-3x"])
def test_compare_algorithms_checks_np(tmp_path, np_):
    """Finding 19 of issue 25: NP was not checked (and 1 cannot run the
    server algorithms)."""
    r = run_script("compare_algorithms.sh", np_, "--epochs", "1",
                   mpirun=fake_mpirun(tmp_path, "", 0))
    if np_.startswith("-"):     # not an NP: the trainer's options, NP 5
        assert r.returncode != 0 and calls(tmp_path)[0].startswith("-np 5 ")
        return
    one_error_line(r, "NP", np_)
    assert calls(tmp_path) == []


def test_compare_algorithms_fails_when_the_algorithms_fail(tmp_path):
    """Finding 19 of issue 25: exit 0 when every algorithm failed."""
    mpirun = fake_mpirun(tmp_path, "psgd-train: error: --epochs must be >= 0\n", 2)
    r = run_script("compare_algorithms.sh", "2", "--epochs", "-1", mpirun=mpirun)
    assert r.returncode != 0 and len(calls(tmp_path)) == 7
    errors = r.stderr.splitlines()
    assert len(errors) == 8 and all("--epochs must be >= 0" in l for l in errors[:7]), r.stderr
    assert "7 of 7 algorithms failed" in errors[7]
    assert [l.split()[1] for l in r.stdout.splitlines()[1:]] == ["failed"] * 7


def test_a_requeued_sbatch_job_resumes_from_its_checkpoint(tmp_path):
    """SLURM reruns a requeued job under its job id with SLURM_RESTART_COUNT
    set: the script says so and the trainer resumes in the same run folder
    (srun faked: mpirun of 2 ranks, without SLURM here)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\nshift 2\nexec "%s" -n 2 "$@"\n' % MPIRUN)
    (fake / "srun").chmod(0o755)
    (fake / "scontrol").write_text("#!/bin/sh\n")    # where the script was submitted: here
    (fake / "scontrol").chmod(0o755)
    env = dict(os.environ, **mpi_env())
    env.update(PATH="%s:%s" % (fake, env["PATH"]), PYTHONPATH=ROOT, PSGD_BACKEND="numpy",
               PSGD_CACHE_DIR=os.path.join(ROOT, ".cache"), SLURM_JOB_ID="77",
               PSGD_VENV=os.path.dirname(os.path.dirname(sys.executable)))
    env.pop("SLURM_RESTART_COUNT", None)
    script = os.path.join(ROOT, "bin", "psgd-slurm.sbatch")
    flags = ["--algo", "bsp", "--model", "mlp", "--hidden", "16"]
    if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpichversion")):
        fake.joinpath("srun").unlink()     # Open MPI's venv: the script runs mpirun itself

    def run(epochs, **extra):
        return subprocess.run(["bash", script] + flags + ["--epochs", str(epochs)],
                              capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                              env=dict(env, **extra), stdin=subprocess.DEVNULL)
    first = run(2)
    assert first.returncode == 0, first.stderr
    assert "requeued" not in first.stderr
    again = run(3, SLURM_RESTART_COUNT="1")
    assert again.returncode == 0, again.stderr
    assert "psgd-slurm.sbatch: requeued (restart 1 of job 77): resuming from the last " \
        "complete checkpoint in runs/slurm-77/checkpoints" in again.stderr
    assert "resumed from epoch 2 of runs/slurm-77/checkpoints" in again.stdout
