"""Whole jobs against a reader written from Kaldi's sources
(tests/kaldi_nnet1_reference.py), not psgd's: --out final.nnet of an MLP is
read by it and gives psgd's posteriors, and a model written as Kaldi's
WriteData writes it (ParametricRelu included) trains under --init."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kaldi_nnet1_reference as ref
from kaldi_corpus import train_and_cv
from launch_util import ROOT, psgd_train

# what it checks (file bytes, numerics) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]

MLP = ["--model", "mlp", "--hidden", "16", "--splice", "2", "--minibatch-size", "16"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    flags, _, cv = train_and_cv(str(tmp_path_factory.mktemp("corpus")), 16, 6)
    return flags, cv


def read_ref(path):
    with open(path, "rb") as f:
        data = f.read()
    model, _ = ref.read_nnet(data)
    return model, data


@pytest.mark.parametrize("binary", ["true", "false"])
def test_out_nnet_is_read_by_kaldis_rules_and_gives_psgds_posteriors(corpus, tmp_path, binary):
    import kaldiio
    data, cv = corpus
    exp = tmp_path / "exp"
    r = psgd_train(2, "--algo", "bsp", "--epochs", "1", *MLP, *data,
                   "--out", str(exp / "final.nnet"), "--binary", binary)
    assert r.returncode == 0, r.stderr
    model, raw = read_ref(exp / "final.nnet")
    transform, _ = read_ref(exp / "final.feature_transform")
    assert [c["type"] for c in model] == ["<AffineTransform>", "<ParametricRelu>",
                                          "<Dropout>", "<AffineTransform>", "<Softmax>"]
    # exactly the bytes Kaldi's own Nnet::Write makes of this model
    assert ref.write_nnet(model, binary=binary == "true") == raw

    out = tmp_path / "logpost.ark"
    f = subprocess.run([sys.executable, "-m", "psgd.kaldi.forward", "--feature-transform",
                        str(exp / "final.feature_transform"), str(exp / "final.nnet"),
                        "scp:" + cv["feats.scp"], "ark:" + str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"))
    assert f.returncode == 0, f.stderr
    psgd_logpost = dict(kaldiio.load_ark(str(out)))
    feats = dict(kaldiio.load_scp(cv["feats.scp"]))
    assert sorted(psgd_logpost) == sorted(feats)
    for utt, x in feats.items():
        np.testing.assert_allclose(psgd_logpost[utt], np.log(ref.forward(transform + model, x)),
                                   atol=1e-4, rtol=0, err_msg=utt)


def test_kaldi_written_parametric_relu_model_trains_under_init(corpus, tmp_path):
    data, _ = corpus
    rng = np.random.default_rng(7)

    def affine(n_in, n_out):
        return {"type": "<AffineTransform>", "in": n_in, "out": n_out,
                "<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0, "<MaxNorm>": 0.0,
                "linearity": rng.normal(scale=0.3, size=(n_out, n_in)).astype(np.float32),
                "bias": np.zeros(n_out, np.float32)}
    # what nnet-initialize makes of make_nnet_proto's ParametricRelu (coefficients 0)
    prelu = {"type": "<ParametricRelu>", "in": 12, "out": 12, "<AlphaLearnRateCoef>": 0.0,
             "<BetaLearnRateCoef>": 0.0, "alpha": np.ones(12, np.float32),
             "beta": np.zeros(12, np.float32)}
    kaldi_model = [affine(25, 12), prelu, affine(12, 4),
                   {"type": "<Softmax>", "in": 4, "out": 4}]
    init = tmp_path / "nnet.init"
    init.write_bytes(ref.write_nnet(kaldi_model, binary=True))

    # the model's layers fix the network: no model flags beside an nnet1 --init
    r = psgd_train(2, "--algo", "bsp", "--epochs", "2", *MLP[4:], *data, "--init", str(init),
                   "--out", str(tmp_path / "o" / "final.nnet"))
    assert r.returncode == 0, r.stderr
    trained, _ = read_ref(tmp_path / "o" / "final.nnet")
    assert [c["type"] for c in trained] == [c["type"] for c in kaldi_model]
    assert trained[1]["<AlphaLearnRateCoef>"] == 0 and trained[1]["<BetaLearnRateCoef>"] == 0
    np.testing.assert_array_equal(trained[1]["alpha"], prelu["alpha"])
    assert not np.allclose(trained[0]["linearity"], kaldi_model[0]["linearity"])
    losses = [float(l.split()[3]) for l in r.stdout.splitlines() if "AvgLoss:" in l]
    assert len(losses) >= 2 and losses[-1] < losses[0], r.stdout
