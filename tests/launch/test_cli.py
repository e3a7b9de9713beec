"""The trainer end to end under mpirun: outputs, Kaldi input with an LSTM,
cross-validation, checkpoint/resume."""
import json
import os
import re

import numpy as np
import pytest

from kaldi_corpus import write_corpus
from launch_util import psgd_train

pytestmark = pytest.mark.timeout(300)

QUICK = ["--model", "mlp", "--hidden", "64", "--num-samples", "1000"]


@pytest.mark.one_mpi
def test_outputs_metrics_model_and_kaldi_log_lines(tmp_path):
    out, metrics, plot = (str(tmp_path / n) for n in ("m.npz", "m.jsonl", "c.png"))
    r = psgd_train(3, "--algo", "bsp", "--epochs", "2", *QUICK, "--out", out,
                   "--metrics", metrics, "--plot", plot)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in open(metrics)]
    assert [row["epoch"] for row in rows] == [1, 2]
    for key in ("train_loss", "test_loss", "test_accuracy", "samples", "wall_seconds"):
        assert all(row[key] is not None for row in rows), key
    assert rows[-1]["samples"] == 2 * 800
    with np.load(out, allow_pickle=False) as z:
        header = json.loads(z["__header__"].tobytes())
        assert header["model"]["name"] == "mlp" and header["config"]["algo"] == "bsp"
        assert z["1.affine.W"].shape == (64, 40)     # (out, in), as Kaldi and PyTorch store it
    assert os.path.getsize(plot) > 1000
    # what Kaldi's train_scheduler.sh greps: AvgLoss is field 4, accuracy field 3
    loss = [l.split()[3] for l in r.stdout.splitlines() if "AvgLoss:" in l][-1]
    acc = [l.split()[2] for l in r.stdout.splitlines() if l.startswith("FRAME_ACCURACY")][-1]
    assert float(loss) == pytest.approx(rows[-1]["test_loss"], rel=1e-4)
    assert float(acc.rstrip("%")) == pytest.approx(100 * rows[-1]["test_accuracy"], abs=1e-3)
    # every LOG line names the real file and line it was written from
    logs = [l for l in r.stdout.splitlines() if l.startswith("LOG (")]
    assert logs and all(re.match(r"LOG \(psgd-train\[[^]]+\]:\w+\(\):\w+\.py:[1-9]\d*\) ", l)
                        for l in logs), logs


# the epoch line's words, the same under either MPI library
@pytest.mark.one_mpi
def test_without_a_held_out_set_the_epoch_line_says_so(tmp_path):
    train = write_corpus(str(tmp_path), num_utts=12, prefix="train")
    r = psgd_train(2, "--algo", "bsp", "--epochs", "1", "--model", "mlp", "--hidden", "16",
                   "--feats", "scp:" + train["feats.scp"], "--targets", train["ali.ark"])
    assert r.returncode == 0, r.stderr
    epoch = [l for l in r.stdout.splitlines() if "epoch 1/1" in l]
    assert len(epoch) == 1 and "no held-out set" in epoch[0] and "nan" not in epoch[0], epoch


@pytest.mark.one_mpi
def test_cross_validate_a_saved_model(tmp_path):
    out = str(tmp_path / "m.npz")
    assert psgd_train(2, "--epochs", "1", *QUICK, "--out", out).returncode == 0
    r = psgd_train(2, "--cross-validate", "--init", out, "--num-samples", "1000")
    assert r.returncode == 0, r.stderr
    assert sum(l.startswith("FRAME_ACCURACY >> ") for l in r.stdout.splitlines()) == 1


# numerics and files, the same under either MPI library
@pytest.mark.one_mpi
def test_lstm_learns_kaldi_frames_from_scp_and_text_alignment(tmp_path):
    train = write_corpus(str(tmp_path), num_utts=40, prefix="train")
    cv = write_corpus(str(tmp_path), num_utts=10, prefix="cv", seed=1)
    metrics = str(tmp_path / "m.jsonl")
    r = psgd_train(2, "--algo", "bmuf", "--model", "lstm", "--lstm-cells", "24",
                   "--feats", "scp:" + train["feats.scp"], "--targets", train["ali.txt"],
                   "--cv-feats", "ark:" + cv["feats.ark"], "--cv-targets", "ark:" + cv["ali.ark"],
                   "--bptt", "8", "--minibatch-size", "8", "--epochs", "6", "--lr", "0.01",
                   "--metrics", metrics)
    assert r.returncode == 0, r.stderr
    final = [json.loads(line) for line in open(metrics)][-1]
    assert final["test_accuracy"] > 0.7  # 4 classes: chance is 0.25


@pytest.mark.parametrize("algo", ["bsp", "syncgrad"])
def test_resumed_run_ends_with_the_uninterrupted_model(tmp_path, algo):
    common = ["--algo", algo, *QUICK, "--seed", "5"]
    whole = str(tmp_path / "whole.npz")
    assert psgd_train(3, *common, "--epochs", "3", "--out", whole).returncode == 0
    ckpt, resumed = str(tmp_path / "ckpt"), str(tmp_path / "resumed.npz")
    first = psgd_train(3, *common, "--epochs", "2", "--checkpoint-dir", ckpt)
    assert first.returncode == 0, first.stderr
    second = psgd_train(3, *common, "--epochs", "3", "--checkpoint-dir", ckpt, "--resume",
                        "--out", resumed)
    assert second.returncode == 0, second.stderr
    assert "resumed from epoch 2" in second.stdout
    with np.load(whole, allow_pickle=False) as a, np.load(resumed, allow_pickle=False) as b:
        names = [n for n in a.files if n != "__header__"]
        for n in names:
            np.testing.assert_array_equal(a[n], b[n], err_msg=n)
