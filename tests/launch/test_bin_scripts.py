"""The cluster scripts in bin/: the Kaldi-style scheduler and the comparison table."""
import os
import subprocess
import sys

import pytest

from kaldi_corpus import write_corpus
from launch_util import MPIRUN, ROOT, mpi_env

# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]


def run_script(name, *args, timeout=240):
    env = dict(os.environ, **mpi_env())
    env.update(PSGD_PYTHON=sys.executable, PSGD_MPIRUN=MPIRUN,
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
