"""A real Kaldi-written final.feature_transform (tests/data/README.md says
where it comes from): psgd reads it, applies it, and writes it back byte for
byte."""
import os

import numpy as np

from psgd.kaldi import FeatureTransform, parse_nnet

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "data",
                    "kaldi_final.feature_transform")


def test_reads_train_sh_layout():
    ft = FeatureTransform.read(PATH)
    assert [l.marker for l in ft.layers] == ["<Splice>", "<AddShift>", "<Rescale>"]
    assert (ft.input_dim, ft.output_dim) == (40, 440)
    assert ft.layers[0].options["offsets"] == list(range(-5, 6))
    shift, scale = ft.layers[1].arrays["shift"], ft.layers[2].arrays["scale"]
    assert shift.shape == scale.shape == (440,)
    assert shift[0] == np.float32(0.002323077) and shift[-1] == np.float32(0.001589457)
    assert scale[0] == np.float32(1.001485) and scale[-1] == np.float32(0.9988289)
    assert ft.layers[1].options["<LearnRateCoef>"] == 0


def test_psgd_writes_it_back_byte_for_byte():
    with open(PATH, "rb") as f:
        original = f.read()
    assert FeatureTransform.parse(original, PATH).encode(binary=False) == original


def test_binary_round_trip_keeps_every_value():
    ft = FeatureTransform.read(PATH)
    back = parse_nnet(ft.encode(binary=True), "bin")
    for a, b in zip(ft.layers, back):
        for k in a.arrays:
            np.testing.assert_array_equal(a.arrays[k], b.arrays[k])


def test_applies_splice_then_shift_then_scale_with_edge_clamping():
    ft = FeatureTransform.read(PATH)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 40)).astype(np.float32)
    y = ft.apply(x)
    shift, scale = ft.layers[1].arrays["shift"], ft.layers[2].arrays["scale"]
    for t in (0, 3, 6):
        rows = np.clip(np.arange(t - 5, t + 6), 0, 6)
        want = (x[rows].reshape(-1) + shift) * scale
        np.testing.assert_allclose(y[t], want, rtol=1e-6)
