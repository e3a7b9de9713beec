"""Kaldi models in and out, whole jobs under mpirun: --out final.nnet writes
steps/nnet/train.sh's three files, --init reads them back, a psgd model
converted to nnet1 + feature transform gives psgd's own posteriors, and a
real Kaldi feature transform drives training."""
import os
import subprocess
import sys

import numpy as np
import pytest

from kaldi_corpus import train_and_cv
from launch_util import ROOT, assert_clean_failure, psgd_train

# what it checks (accuracy, numerics, files) does not depend on the MPI library
pytestmark = [pytest.mark.timeout(300), pytest.mark.one_mpi]

MLP = ["--model", "mlp", "--hidden", "32", "--splice", "2", "--minibatch-size", "16"]
# beside an nnet1 --init, whose layers fix the model: the model flags are refused
FROM_NNET1 = ["--splice", "2", "--minibatch-size", "16"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return train_and_cv(str(tmp_path_factory.mktemp("corpus")))


def python(*argv, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable] + list(argv), capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=120)


def held_out_loss(stdout):
    return float([l.split()[3] for l in stdout.splitlines() if "AvgLoss:" in l][-1])


def test_out_nnet_then_init_nnet_for_one_more_epoch(corpus, tmp_path):
    data, train, _ = corpus
    exp = tmp_path / "exp"
    r = psgd_train(3, "--algo", "bsp", "--epochs", "2", *MLP, *data,
                   "--out", str(exp / "final.nnet"))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(exp)) == ["ali_train_pdf.counts", "final.feature_transform",
                                       "final.nnet"]
    assert (exp / "final.nnet").read_bytes()[:2] == b"\x00B"       # binary by default
    assert (exp / "final.feature_transform").read_bytes().startswith(b"<Nnet> \n<Splice> 25 5")
    labels = np.concatenate([v for v in __import__("kaldiio").load_ark(train["ali.ark"])
                             for v in [v[1]]])
    want = "[ " + "".join("%d " % c for c in np.bincount(labels, minlength=4)) + "]\n"
    assert (exp / "ali_train_pdf.counts").read_text() == want

    # cross-validating the written model reproduces the trainer's last held-out loss
    cv = psgd_train(3, "--cross-validate", "--init", str(exp / "final.nnet"), *FROM_NNET1,
                    *data)
    assert cv.returncode == 0, cv.stderr
    assert held_out_loss(cv.stdout) == pytest.approx(held_out_loss(r.stdout), rel=1e-4)

    more = psgd_train(3, "--algo", "bsp", "--epochs", "1", *FROM_NNET1, *data,
                      "--init", str(exp / "final.nnet"), "--out", str(tmp_path / "b" /
                                                                      "final.nnet"),
                      "--binary", "false")
    assert more.returncode == 0, more.stderr
    assert (tmp_path / "b" / "final.nnet").read_bytes().startswith(b"<Nnet> \n")
    assert held_out_loss(more.stdout) < held_out_loss(cv.stdout)


def test_psgd_model_as_nnet1_gives_psgds_posteriors(corpus, tmp_path):
    data, train, cv = corpus
    model = str(tmp_path / "m.npz")
    r = psgd_train(3, "--algo", "bsp", "--epochs", "2", *MLP, *data, "--out", model)
    assert r.returncode == 0, r.stderr
    c = python("-m", "psgd.kaldi", "convert", model, str(tmp_path / "k" / "final.nnet"))
    assert c.returncode == 0, c.stderr
    k = tmp_path / "k"
    f = python("-m", "psgd.kaldi.forward", "--feature-transform",
               str(k / "final.feature_transform"), str(k / "final.nnet"),
               "scp:" + cv["feats.scp"], "ark:" + str(tmp_path / "logpost.ark"))
    assert f.returncode == 0, f.stderr

    # psgd's own forward: its data pipeline (global CMVN of the training set, then
    # splice) and the .npz network
    sys.path.insert(0, ROOT)
    import kaldiio
    from psgd.data import CmvnStats, apply_cmvn, load_kaldi
    from psgd.train.model_files import read_model
    net, _, _ = read_model(model)
    full, report = load_kaldi("scp:" + train["feats.scp"], "ark:" + train["ali.ark"],
                              splice=0, cmvn=False)
    ds, _ = load_kaldi("scp:" + cv["feats.scp"], "ark:" + cv["ali.ark"], splice=2, cmvn=False)
    ds.x_test = None   # the held-out utterances are this 'training' split
    ds = apply_cmvn(ds, CmvnStats.from_frames(full.x_train))
    psgd_logpost = np.log(net.predict(ds.x_train))
    kaldi_logpost = np.concatenate([m for _, m in kaldiio.load_ark(str(tmp_path /
                                                                       "logpost.ark"))])
    assert kaldi_logpost.shape == psgd_logpost.shape
    np.testing.assert_allclose(kaldi_logpost, psgd_logpost, atol=1e-5, rtol=0)

    # with the class frame counts: log posterior minus log prior
    f = python("-m", "psgd.kaldi.forward", "--class-frame-counts",
               str(k / "ali_train_pdf.counts"), model, "scp:" + cv["feats.scp"],
               "ark:" + str(tmp_path / "loglik.ark"))
    assert f.returncode == 0, f.stderr
    counts = np.bincount(np.concatenate([v for _, v in kaldiio.load_ark(train["ali.ark"])]))
    loglik = np.concatenate([m for _, m in kaldiio.load_ark(str(tmp_path / "loglik.ark"))])
    np.testing.assert_allclose(loglik, psgd_logpost - np.log(counts / counts.sum()),
                               atol=1e-5, rtol=0)


def test_npz_is_self_contained(corpus, tmp_path):
    """The .npz keeps its splice + CMVN: --init uses it whatever --splice says."""
    data, _, _ = corpus
    model = str(tmp_path / "m.npz")
    r = psgd_train(2, "--epochs", "1", *MLP, *data, "--out", model)
    assert r.returncode == 0, r.stderr
    cv = psgd_train(2, "--cross-validate", "--init", model, *data)   # no --splice 2
    assert cv.returncode == 0, cv.stderr
    assert held_out_loss(cv.stdout) == pytest.approx(held_out_loss(r.stdout), rel=1e-4)


def test_kaldi_feature_transform_drives_training(corpus, tmp_path):
    data, _, _ = corpus
    ft = tmp_path / "am.mvn"
    ft.write_text("<Nnet>\n<Splice> 15 5\n[ -1 0 1 ]\n<AddShift> 15 15\n<LearnRateCoef> 0 "
                  "[ %s ]\n<Rescale> 15 15\n<LearnRateCoef> 0 [ %s ]\n</Nnet>\n"
                  % (" ".join(["-0.5"] * 15), " ".join(["0.5"] * 15)))
    r = psgd_train(3, "--epochs", "1", "--model", "mlp", "--hidden", "16", *data,
                   "--feature-transform", str(ft), "--out", str(tmp_path / "o" / "final.nnet"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "final.feature_transform").read_text() == \
        __import__("psgd.kaldi", fromlist=["x"]).FeatureTransform.read(str(ft)) \
        .encode(binary=False).decode()


def test_bad_kaldi_inputs_are_one_line_on_every_rank(corpus, tmp_path):
    data, _, _ = corpus
    lstm = tmp_path / "lstm.nnet"
    lstm.write_text("<Nnet>\n<LstmProjected> 8 25\n<CellDim> 8\n</Nnet>\n")
    r = psgd_train(3, "--epochs", "1", *FROM_NNET1, *data, "--init", str(lstm))
    assert_clean_failure(r, "component 1 <LstmProjected> has no psgd form")
    good = tmp_path / "good.nnet"
    assert psgd_train(2, "--epochs", "0", *MLP, *data, "--out", str(good)).returncode == 0
    cut = tmp_path / "cut.nnet"
    cut.write_bytes(good.read_bytes()[:-40])
    r = psgd_train(3, "--epochs", "1", *FROM_NNET1, *data, "--init", str(cut))
    assert_clean_failure(r, "truncated")
    r = psgd_train(2, "--epochs", "1", "--model", "cnn", *data, "--out",
                   str(tmp_path / "cnn.nnet"))
    assert_clean_failure(r, "has no nnet1 form")
    r = psgd_train(2, "--epochs", "1", "--model", "mlp", *data, "--feature-transform",
                   str(tmp_path / "absent"))
    assert_clean_failure(r, "no such file")
