"""Flags that would change nothing (issue 25, finding 22) are refused in one
line on every rank before any training, naming the flag and why: those the
command line alone shows (--binary, --checkpoint-every), those this rank's
backend or --init file shows (psgd/train/idle_flags.py), and an --epochs a
resumed checkpoint has already passed."""
import os

import pytest

from kaldi_corpus import write_corpus
from launch_util import MPIRUN, assert_clean_failure, error_lines, psgd_train

# checks of flags, files and data, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.timeout(120), pytest.mark.one_mpi]

QUICK = ["--model", "mlp", "--hidden", "16", "--num-samples", "600"]


def refused_on_every_rank(result, needle, np_):
    assert_clean_failure(result, needle)
    assert result.returncode == 2 and len(error_lines(result.stderr)) == np_, result.stderr
    assert "epoch 1/" not in result.stdout, result.stdout


@pytest.mark.parametrize("flags, needle", [
    (["--binary", "false"], "--binary applies to a Kaldi nnet1 --out NAME.nnet; there is no --out"),
    (["--binary", "true", "--out", "{tmp}/m.npz"],
     "--binary applies to a Kaldi nnet1 --out NAME.nnet; --out {tmp}/m.npz writes a psgd .npz"),
    (["--checkpoint-every", "2"], "--checkpoint-every applies to --checkpoint-dir"),
    (["--cuda-aware", "yes"], "--cuda-aware yes applies to GPU buffers (the cupy backend); "
                              "this rank's backend is numpy"),
    (["--cuda-aware", "no", "--backend", "numpy"], "--cuda-aware no applies to GPU buffers"),
], ids=lambda v: str(v))
def test_a_flag_that_changes_nothing_is_refused(tmp_path, flags, needle):
    flags = [f.format(tmp=tmp_path) for f in flags]
    result = psgd_train(2, *QUICK, "--epochs", "1", *flags, env={"PSGD_BACKEND": "numpy"})
    refused_on_every_rank(result, needle.format(tmp=tmp_path), 2)
    assert os.listdir(tmp_path) == []


def test_cuda_aware_where_the_auto_backend_found_no_gpu_is_a_warning(tmp_path):
    """One launch script for CPU and GPU hosts: --backend auto falls back to
    numpy on a host without a GPU, and there --cuda-aware only warns."""
    result = psgd_train(2, *QUICK, "--epochs", "1", "--cuda-aware", "yes", "--quiet",
                        env={"PSGD_BACKEND": "auto"})
    assert result.returncode == 0, result.stderr
    assert "--cuda-aware yes applies to GPU buffers (the cupy backend); this rank's backend " \
           "is numpy (the auto backend found no GPU)" in result.stderr


def test_the_flags_where_they_act_are_accepted(tmp_path):
    ck = str(tmp_path / "ck")
    result = psgd_train(2, *QUICK, "--epochs", "2", "--checkpoint-dir", ck,
                        "--checkpoint-every", "2", "--cuda-aware", "auto", "--quiet")
    assert result.returncode == 0, result.stderr
    assert epochs(ck) == ["epoch-0001"]


def epochs(ck):
    return sorted(name for name in os.listdir(ck) if name.startswith("epoch-"))


@pytest.fixture(scope="module")
def kaldi(tmp_path_factory):
    """Kaldi data and an nnet1 model trained on it."""
    folder = tmp_path_factory.mktemp("kaldi")
    train = write_corpus(str(folder), num_utts=12, seed=0, prefix="train")
    data = ["--feats", "scp:" + train["feats.scp"], "--targets", "ark:" + train["ali.ark"]]
    nnet = str(folder / "exp" / "final.nnet")
    made = psgd_train(2, "--model", "mlp", "--hidden", "16", *data, "--epochs", "0",
                      "--out", nnet)
    assert made.returncode == 0, made.stderr
    return data, nnet


@pytest.mark.parametrize("flag", [["--hidden", "16"], ["--dropout", "0.1"], ["--batchnorm"]],
                         ids=lambda v: v[0])
def test_model_flags_beside_an_nnet1_init_are_refused(kaldi, flag):
    data, nnet = kaldi
    result = psgd_train(3, *data, "--epochs", "1", "--init", nnet, *flag)
    refused_on_every_rank(result, "%s changes nothing with --init %s: a Kaldi nnet1 model's "
                                  "layers fix the model" % (flag[0], nnet), 3)


def test_an_nnet1_init_without_model_flags_trains(kaldi):
    data, nnet = kaldi
    result = psgd_train(2, *data, "--epochs", "1", "--init", nnet, "--quiet")
    assert result.returncode == 0, result.stderr


@pytest.fixture
def two_epochs(tmp_path):
    ck, out = str(tmp_path / "ck"), tmp_path / "final.npz"
    first = psgd_train(2, *QUICK, "--epochs", "2", "--checkpoint-dir", ck, "--out", str(out),
                       "--quiet")
    assert first.returncode == 0, first.stderr
    return ck, out


def test_resume_with_epochs_below_the_checkpoints_is_refused(two_epochs):
    ck, out = two_epochs
    before = out.read_bytes()
    result = psgd_train(2, *QUICK, "--epochs", "1", "--checkpoint-dir", ck, "--resume",
                        "--out", str(out))
    refused_on_every_rank(result, "--resume: --epochs 1 is below the 2 epochs the checkpoint "
                                  "in %s has trained" % ck, 2)
    assert "takes effect" not in result.stdout
    assert out.read_bytes() == before and epochs(ck) == ["epoch-0000", "epoch-0001"]


def test_resume_with_the_checkpoints_epochs_writes_its_model(two_epochs, tmp_path):
    """A finished run resumed with its own --epochs trains nothing and writes
    the model (e.g. after a crash while writing --out): what the user meant."""
    ck, _ = two_epochs
    again = tmp_path / "again.npz"
    result = psgd_train(2, *QUICK, "--epochs", "2", "--checkpoint-dir", ck, "--resume",
                        "--out", str(again))
    assert result.returncode == 0 and again.exists(), result.stderr
