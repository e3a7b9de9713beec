"""`python -m psgd.kaldi convert|info` and `psgd.kaldi.forward`, in process."""
import os

import numpy as np
import pytest

from psgd.kaldi import FeatureTransform, encode_nnet, layers_of, read_nnet, write_counts
from psgd.kaldi.__main__ import main as kaldi_main
from psgd.kaldi.forward import main as forward_main
from psgd.nnet import build_model
from psgd.train.model_files import read_model

HERE = os.path.dirname(__file__)
REAL_FT = os.path.join(HERE, "..", "..", "data", "kaldi_final.feature_transform")


@pytest.fixture
def nnet_file(tmp_path):
    net = build_model("mlp", (440,), 6, hidden="8", dropout=0.1, seed=2)
    path = tmp_path / "final.nnet"
    path.write_bytes(encode_nnet(layers_of(net), binary=True))
    return str(path), net


def test_nnet_to_npz_and_back_is_byte_identical(nnet_file, tmp_path):
    path, net = nnet_file
    counts = str(tmp_path / "c.counts")
    write_counts(counts, [3, 1, 4, 1, 5, 9])
    npz = str(tmp_path / "m.npz")
    assert kaldi_main(["convert", path, npz, "--feature-transform", REAL_FT,
                       "--class-frame-counts", counts]) == 0
    back, model, extras = read_model(npz)
    assert model["name"] == "nnet1"
    assert extras["class_counts"].tolist() == [3, 1, 4, 1, 5, 9]
    assert extras["feature_transform"].encode(False) == open(REAL_FT, "rb").read()
    out = tmp_path / "k" / "final.nnet"
    assert kaldi_main(["convert", npz, str(out)]) == 0
    assert out.read_bytes() == open(path, "rb").read()
    assert (tmp_path / "k" / "final.feature_transform").read_bytes() == \
        open(REAL_FT, "rb").read()
    assert (tmp_path / "k" / "ali_train_pdf.counts").read_text() == "[ 3 1 4 1 5 9 ]\n"
    assert kaldi_main(["convert", npz, str(tmp_path / "t.nnet"), "--binary", "false"]) == 0
    assert (tmp_path / "t.nnet").read_bytes().startswith(b"<Nnet> \n<AffineTransform> 8 440")


def test_info_prints_like_nnet_info(nnet_file, capsys):
    path, _ = nnet_file
    assert kaldi_main(["info", path]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["num-components 5", "input-dim 440", "output-dim 6"]
    assert out[4].startswith("component 1 : <AffineTransform>, input-dim 440, output-dim 8")


def test_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.nnet"
    bad.write_bytes(b"\x00B<Nnet> <AffineTransform> \x04")
    assert kaldi_main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.nnet: truncated" in err


def test_forward_writes_log_posteriors_through_the_real_transform(nnet_file, tmp_path):
    import kaldiio
    path, net = nnet_file
    rng = np.random.default_rng(0)
    feats = {"u1": rng.normal(size=(9, 40)).astype(np.float32),
             "u2": rng.normal(size=(4, 40)).astype(np.float32)}
    kaldiio.save_ark(str(tmp_path / "f.ark"), feats, scp=str(tmp_path / "f.scp"))
    out = str(tmp_path / "o.ark")
    assert forward_main(["--feature-transform", REAL_FT, path, "scp:" + str(tmp_path / "f.scp"),
                         "ark,scp:%s,%s" % (out, tmp_path / "o.scp")]) == 0
    got = dict(kaldiio.load_scp(str(tmp_path / "o.scp")))
    ft = FeatureTransform.read(REAL_FT)
    for key, x in feats.items():
        want = np.log(net.predict(ft.apply(x)))
        np.testing.assert_allclose(got[key], want, atol=1e-5)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
