"""Bad input, table-driven: each case is a whole `mpirun ... python -m
psgd.worker` job that must exit non-zero within seconds with one clear line
naming the problem on every rank, and no traceback."""
import os

import numpy as np
import pytest

from kaldi_corpus import write_corpus
from launch_util import assert_clean_failure, error_lines, psgd_train

# checks of flags, files and data, whatever the MPI library: under one MPI (one_mpi)
pytestmark = [pytest.mark.timeout(120), pytest.mark.one_mpi]


@pytest.fixture(scope="module")
def kaldi(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kaldi")
    paths = write_corpus(str(folder), num_utts=6)
    paths["folder"] = str(folder)
    truncated = os.path.join(str(folder), "truncated.ark")
    with open(paths["feats.ark"], "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[:len(data) - 37])
    paths["truncated"] = truncated
    empty = os.path.join(str(folder), "empty.scp")
    open(empty, "w").close()
    paths["empty"] = empty
    bad_ali = os.path.join(str(folder), "bad_ali.txt")
    with open(bad_ali, "w") as f:
        f.write("train_utt000 1 2 x 3\n")
    paths["bad_ali"] = bad_ali
    corrupt = os.path.join(str(folder), "ckpt")
    os.makedirs(os.path.join(corrupt, "epoch-0000"))
    with open(os.path.join(corrupt, "LATEST"), "w") as f:
        f.write('{"folder": "epoch-0000", "size": 2}')
    for r in range(2):
        with open(os.path.join(corrupt, "epoch-0000", "rank-%05d.npz" % r), "wb") as f:
            f.write(b"PK\x03\x04 torn")
    paths["corrupt_ckpt"] = corrupt
    return paths


def kaldi_flags(k, feats="feats.scp", targets="ali.ark"):
    return ["--feats", "scp:" + k[feats] if feats.endswith("scp") else "ark:" + k[feats],
            "--targets", k[targets], "--model", "mlp", "--epochs", "1"]


CASES = [
    # (id, np, flags or callable(kaldi) -> flags, text the error line must contain)
    ("unknown-algorithm", 2, ["--algo", "nope"], "valid: bsp, bmuf, sod, syncgrad"),
    ("unknown-flag", 2, ["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ("bad-block-momentum", 2, ["--algo", "bmuf", "--block-momentum", "1.5"], "block_momentum"),
    ("flag-for-other-algo", 2, ["--algo", "bsp", "--block-lr", "2"],
     "--block-lr does not apply to --algo bsp"),
    ("bad-outer", 2, ["--algo", "sod", "--outer", "lbfgs"], "invalid choice"),
    ("negative-epochs", 2, ["--epochs", "-1"], "--epochs must be >= 0"),
    ("zero-minibatch", 2, ["--minibatch-size", "0"], "--minibatch-size must be > 0"),
    ("negative-lr", 2, ["--lr", "-1"], "--lr must be > 0"),
    ("unknown-model", 2, ["--model", "resnet"], "unknown model 'resnet'"),
    ("unknown-optimizer", 2, ["--optimizer", "lbfgs", "--epochs", "1"], "unknown optimizer"),
    ("bad-hidden", 2, ["--model", "mlp", "--hidden", "abc", "--epochs", "1"], "hidden"),
    ("resume-without-dir", 2, ["--resume"], "--resume needs --checkpoint-dir"),
    ("missing-init", 2, ["--init", "/nonexistent/model.npz", "--epochs", "1"],
     "/nonexistent/model.npz: no such file"),
    ("missing-feats", 2, lambda k: ["--feats", "scp:/nonexistent/feats.scp", "--targets",
                                    k["ali.ark"], "--epochs", "1"], "/nonexistent/feats.scp"),
    ("truncated-ark", 2, lambda k: kaldi_flags(k, "truncated"), "truncated"),
    ("empty-scp", 2, lambda k: kaldi_flags(k, "empty"), "empty"),
    ("labels-out-of-range", 2, lambda k: kaldi_flags(k) + ["--num-classes", "2"], "is outside 0..1"),
    ("bad-alignment", 2, lambda k: kaldi_flags(k, targets="bad_ali"), "bad_ali.txt"),
    ("feats-without-targets", 2, lambda k: ["--feats", "scp:" + k["feats.scp"]],
     "--feats and --targets go together"),
    ("corrupt-checkpoint", 2, lambda k: ["--checkpoint-dir", k["corrupt_ckpt"], "--resume",
                                         "--epochs", "1"], "rank-0000"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_cleanly_on_every_rank(case, kaldi):
    _, np_, flags, needle = case
    if callable(flags):
        flags = flags(kaldi)
    result = psgd_train(np_, *flags, timeout=90)
    assert_clean_failure(result, needle)
    assert len(error_lines(result.stderr)) == np_, result.stderr


def test_feature_dimension_different_from_the_model(kaldi, tmp_path):
    model = str(tmp_path / "model.npz")
    ok = psgd_train(2, *kaldi_flags(kaldi), "--out", model, timeout=90)
    assert ok.returncode == 0, ok.stderr
    other = write_corpus(str(tmp_path / "wide"), num_utts=4, dim=7)
    result = psgd_train(2, "--feats", "scp:" + other["feats.scp"], "--targets",
                        other["ali.ark"], "--init", model, "--epochs", "1", timeout=90)
    assert_clean_failure(result, "expects inputs of shape (5,)")
    assert np.load(model, allow_pickle=False)  # the user's model is untouched
