"""`mpirun -np 2 python -m psgd.worker --model-parallel`: the run reports its
bytes per step, saves a model a single process loads and scores exactly as
reported, resumes from a checkpoint to the same model, and refuses a
minibatch the ranks cannot split."""
import json

import numpy as np
import pytest

from launch_util import assert_clean_failure, psgd_train
from psgd.data import load_mnist1d
from psgd.nnet import build_model
from psgd.train import model_io
from psgd.train.data_setup import MNIST1D_SEED

pytestmark = pytest.mark.timeout(300)

SAMPLES = 1000
QUICK = ["--model-parallel", "--num-samples", str(SAMPLES), "--hidden", "64",
         "--channels", "8,8"]


def single_process(path):
    arrays, header = model_io.load(path)
    m = header["model"]
    net = build_model(m["name"], tuple(m["input_shape"]), m["num_classes"], **m["sizes"])
    net.load_state_dict(arrays)
    return net, arrays


# numerics and files, the same under either MPI library
@pytest.mark.one_mpi
def test_saved_model_loads_in_one_process_with_the_reported_accuracy(tmp_path):
    out, metrics = str(tmp_path / "m.npz"), str(tmp_path / "m.jsonl")
    r = psgd_train(2, *QUICK, "--epochs", "1", "--out", out, "--metrics", metrics)
    assert r.returncode == 0, r.stderr
    assert "hybrid data/model parallel on 2 ranks" in r.stdout
    assert "(output layer sliced)" in r.stdout  # 10 classes split over 2 ranks
    verdict = [line for line in r.stdout.splitlines() if "bytes moved per step" in line]
    assert len(verdict) == 1 and "activations" in verdict[0] and "gradients" in verdict[0]
    row = json.loads(open(metrics).read().splitlines()[-1])
    net, arrays = single_process(out)
    data = load_mnist1d(SAMPLES, seed=MNIST1D_SEED)
    reference = build_model("cnn", data.input_shape, 10, hidden="64", channels="8,8")
    assert sorted(arrays) == sorted(reference.param_names)
    assert all(arrays[n].shape == p.shape for n, p in zip(reference.param_names,
                                                           reference.params))
    loss, acc = net.evaluate(data.x_test, data.y_test)
    # float32 sums in another order may flip at most a near tie
    assert abs(acc - row["test_accuracy"]) <= 1.0 / len(data.y_test) + 1e-12
    assert loss == pytest.approx(row["test_loss"], rel=1e-4)


def test_resume_gives_the_uninterrupted_model(tmp_path):
    whole, resumed = str(tmp_path / "whole.npz"), str(tmp_path / "resumed.npz")
    flags = QUICK + ["--dropout", "0.3"]
    r = psgd_train(2, *flags, "--epochs", "2", "--out", whole)
    assert r.returncode == 0, r.stderr
    ckpt = str(tmp_path / "ckpt")
    r = psgd_train(2, *flags, "--epochs", "1", "--checkpoint-dir", ckpt)
    assert r.returncode == 0, r.stderr
    r = psgd_train(2, *flags, "--epochs", "2", "--checkpoint-dir", ckpt, "--resume",
                   "--out", resumed)
    assert r.returncode == 0, r.stderr
    assert "resumed from epoch 1" in r.stdout
    a, b = model_io.load(whole)[0], model_io.load(resumed)[0]
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# a check before any message, the same under either MPI library (one_mpi)
@pytest.mark.one_mpi
def test_a_minibatch_the_ranks_cannot_split_is_one_line_naming_the_largest_n():
    r = psgd_train(2, *QUICK, "--epochs", "1", "--minibatch-size", "33")
    assert_clean_failure(r, "the global minibatch (33) to be multiples of 2: at most 1 rank")
