"""Hostile Kaldi data under mpirun (issue 13, findings 9-14): every problem
is one line naming the file and the utterance, before any training."""
import os

import numpy as np
import pytest

from kaldi_corpus import write_corpus
from launch_util import MPIRUN, assert_clean_failure, psgd_train

# checks of flags, files and data, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.skipif(not os.path.exists(MPIRUN), reason="no mpirun beside python"),
              pytest.mark.one_mpi]
kaldiio = pytest.importorskip("kaldiio")

QUICK = ["--model", "mlp", "--hidden", "16", "--quiet", "--epochs", "2"]


@pytest.fixture
def corpus(tmp_path):
    train = write_corpus(str(tmp_path), num_utts=24, prefix="train")
    cv = write_corpus(str(tmp_path), num_utts=6, prefix="cv", seed=1)
    return train, cv


def _kaldi(corpus, cv=True):
    train, held = corpus
    flags = ["--feats", "scp:" + train["feats.scp"], "--targets", train["ali.txt"]]
    if cv:
        flags += ["--cv-feats", "scp:" + held["feats.scp"], "--cv-targets", held["ali.txt"]]
    return flags


def _rewrite_feats(paths, change):
    feats = dict(kaldiio.load_scp(paths["feats.scp"]).items())
    feats = {k: np.array(v) for k, v in feats.items()}
    change(feats)
    kaldiio.save_ark(paths["feats.ark"], feats, scp=paths["feats.scp"])


def _rewrite_ali(paths, change):
    with open(paths["ali.txt"]) as f:
        ali = [line.split() for line in f if line.strip()]
    change(ali)
    with open(paths["ali.txt"], "w") as f:
        f.writelines(" ".join(a) + "\n" for a in ali)


# 9: non-finite features -------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_feature_names_the_file_and_utterance(corpus, value):
    _rewrite_feats(corpus[0], lambda f: f["train_utt017"].__setitem__((3, 1), value))
    result = psgd_train(3, "--algo", "bsp", *QUICK, *_kaldi(corpus))
    assert_clean_failure(result, "train_feats.scp: utterance train_utt017: non-finite feature "
                                 "value (%s) at frame 3" % value)
    assert "non-finite model" not in result.stderr


@pytest.mark.timeout(60)
def test_skip_nonfinite_leaves_the_utterance_out_and_trains(corpus, tmp_path):
    _rewrite_feats(corpus[0], lambda f: f["train_utt017"].__setitem__((3, 1), np.nan))
    out = str(tmp_path / "m.npz")
    result = psgd_train(3, "--algo", "bsp", *QUICK, *_kaldi(corpus), "--skip-nonfinite",
                        "--out", out, "--metrics", str(tmp_path / "m.jsonl"))
    assert result.returncode == 0, result.stderr
    assert "utterance train_utt017: non-finite feature value (nan) at frame 3: utterance " \
           "skipped" in result.stderr
    with np.load(out) as z:
        assert all(np.isfinite(z[k]).all() for k in z.files if k != "__header__")
    assert "NaN" not in open(str(tmp_path / "m.jsonl")).read()
    assert "null" not in open(str(tmp_path / "m.jsonl")).read()


# 10: stray labels ---------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("label", [100000, 2 ** 31 - 1])
def test_a_stray_label_names_the_utterance(corpus, label):
    def stray(ali):
        ali[20][5] = str(label)
    _rewrite_ali(corpus[0], stray)
    utt = open(corpus[0]["ali.txt"]).read().splitlines()[20].split()[0]
    result = psgd_train(3, "--algo", "bsp", *QUICK, *_kaldi(corpus))
    assert_clean_failure(result, "train_ali.txt: utterance %s: label %d is far beyond the "
                                 "others (the next largest is 3)" % (utt, label))
    with_count = psgd_train(3, "--algo", "bsp", *QUICK, *_kaldi(corpus), "--num-classes", "4")
    assert_clean_failure(with_count, "utterance %s: target %d is outside 0..3" % (utt, label))


# 11: zero columns --------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_zero_column_matrices_name_the_file(corpus):
    _rewrite_feats(corpus[0], lambda f: f.update({k: v[:, :0] for k, v in f.items()}))
    result = psgd_train(2, "--algo", "bsp", *QUICK, *_kaldi(corpus))
    assert_clean_failure(result, "train_feats.scp: utterance train_utt000: a feature matrix "
                                 "with 0 columns")
    assert "ZeroDivision" not in result.stderr


# 12: duplicate ids in an scp ----------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_duplicate_scp_id_is_refused(corpus):
    scp = corpus[0]["feats.scp"]
    lines = open(scp).read().splitlines()
    with open(scp, "a") as f:
        f.write(lines[4].split()[0] + " " + lines[9].split()[1] + "\n")
    result = psgd_train(2, "--algo", "bsp", *QUICK, *_kaldi(corpus))
    assert_clean_failure(result, "train_feats.scp:%d: utterance id train_utt004 appears twice "
                                 "(first on line 5)" % (len(lines) + 1))


# 13: a held-out set is needed ---------------------------------------------------------------
@pytest.mark.timeout(60)
def test_newbob_and_cross_validate_need_a_held_out_set(corpus, tmp_path):
    result = psgd_train(2, "--algo", "bsp", *QUICK, *_kaldi(corpus, cv=False),
                        "--lr-schedule", "newbob")
    assert_clean_failure(result, "--lr-schedule newbob needs a held-out set with Kaldi data")
    model = str(tmp_path / "m.npz")
    assert psgd_train(2, "--algo", "bsp", *QUICK, *_kaldi(corpus), "--out", model
                      ).returncode == 0
    result = psgd_train(2, "--algo", "bsp", "--quiet", *_kaldi(corpus, cv=False),
                        "--cross-validate", "--init", model)
    assert_clean_failure(result, "--cross-validate needs a held-out set with Kaldi data")


# 14: utterances without targets are dropped before sharding ---------------------------------
@pytest.mark.timeout(60)
def test_utterances_without_targets_do_not_idle_a_worker(corpus):
    # the first two thirds of the sorted ids have no targets: before, ranks
    # 0 and 1 of 3 read only target-less utterances and sat idle
    _rewrite_ali(corpus[0], lambda ali: ali.__delitem__(slice(0, 16)))
    result = psgd_train(3, "--algo", "bsp", "--model", "mlp", "--hidden", "16", "--epochs", "1",
                        *_kaldi(corpus))
    assert result.returncode == 0, result.stderr
    assert "has no training utterances" not in result.stderr, result.stderr
    assert "16 without targets" in result.stdout
    warned = [line for line in result.stderr.splitlines() if "have no targets" in line]
    assert len(warned) == 1 and "16 of 24 utterances" in warned[0], result.stderr
