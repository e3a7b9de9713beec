"""--compression from the command line: a compressed job checkpoints its
residuals and resumes from them; easgd refuses the flag in one line.
(bmuf with 1bit at the acceptance floor: test_acceptance.py.)"""
import json
import os

import numpy as np
import pytest

from launch_util import MPIRUN, assert_clean_failure, psgd_train

# psgd's own flags and state, whatever the MPI library
pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.one_mpi, pytest.mark.timeout(120)]

QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600", "--quiet"]


def test_a_compressed_job_checkpoints_and_resumes_its_residuals(tmp_path):
    ck = str(tmp_path / "ck")
    flags = [*QUICK, "--algo", "syncgrad", "--compression", "1bit", "--compression-block", "64",
             "--checkpoint-dir", ck]
    result = psgd_train(2, *flags, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    saved = np.load(os.path.join(ck, "epoch-0000", "rank-00001.npz"))
    residual = [k for k in saved.files if "residual_worker" in k]
    assert residual and np.abs(saved[residual[0]]).max() > 0
    metrics = str(tmp_path / "m.jsonl")
    result = psgd_train(2, *flags, "--epochs", "2", "--resume", "--metrics", metrics)
    assert result.returncode == 0, result.stderr
    # epoch 1 came from the checkpoint, not from training again
    assert [json.loads(line)["epoch"] for line in open(metrics)] == [2]


def test_easgd_refuses_compression_in_one_line():
    result = psgd_train(2, *QUICK, "--epochs", "1", "--algo", "easgd", "--compression", "fp16")
    assert_clean_failure(result, "--compression: easgd exchanges a model, not a delta")


def test_compressed_sod_shares_its_momentum_and_the_flag_is_checked():
    result = psgd_train(2, *QUICK[:-1], "--epochs", "1", "--algo", "sod", "--compression",
                        "1bit")
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert "compression_momentum local" in out and "outer_momentum 0.8" in out
    result = psgd_train(2, *QUICK, "--epochs", "1", "--algo", "bmuf",
                        "--compression-momentum", "local")
    assert_clean_failure(result, "bmuf: compression_momentum=local applies to compressed "
                                 "sums; compression is none")


def test_compressed_syncgrad_sums_each_ranks_optimizer_steps():
    """The trainer's default: each rank's Adam on its own gradient, the
    rate x sqrt(N); rank 2 runs out of data a minibatch early (its 66
    examples in 2 minibatches of 33, the others' 67 in 3: stop())."""
    result = psgd_train(3, *QUICK[:-3], "--num-samples", "250", "--minibatch-size", "33",
                        "--epochs", "2", "--algo", "syncgrad", "--compression", "1bit")
    assert result.returncode == 0, result.stderr
    out = result.stdout + result.stderr
    assert "compression_momentum local" in out and "local steps x min(sqrt(N), 2)" in out
