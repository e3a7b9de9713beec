"""psgd's own splice + CMVN as a Kaldi feature transform gives the features
psgd trains on; utterance edges are clamped per utterance."""
import numpy as np
import pytest

from psgd.data import CmvnStats, splice_frames
from psgd.data.cmvn import normalize
from psgd.errors import UsageError
from psgd.kaldi import FeatureTransform, Layer

RNG = np.random.default_rng(1)


def test_from_cmvn_equals_psgds_normalize_then_splice():
    x = RNG.normal(3.0, 2.0, size=(20, 4)).astype(np.float32)
    offsets = np.array([0, 6, 7, 20])
    mean, std = CmvnStats.from_frames(x).mean_std()
    ft = FeatureTransform.from_cmvn(4, 2, mean, std)
    ours = ft.apply(x, offsets)
    theirs = splice_frames(normalize(x.copy(), mean, std), offsets, 2)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert [l.marker for l in ft.layers] == ["<Splice>", "<AddShift>", "<Rescale>"]


def test_splice_only_without_cmvn_and_edges_stay_inside_utterances():
    x = np.arange(10, dtype=np.float32)[:, None]
    ft = FeatureTransform.from_cmvn(1, 1)
    y = ft.apply(x, [0, 3, 10])
    assert y[0].tolist() == [0, 0, 1] and y[2].tolist() == [1, 2, 2]
    assert y[3].tolist() == [3, 3, 4] and y[9].tolist() == [8, 9, 9]


def test_cmvn_only_transform_like_am_mvn():
    text = (b"<Nnet>\n<AddShift> 2 2\n<LearnRateCoef> 0 [ -1 -2 ]\n"
            b"<Rescale> 2 2\n<LearnRateCoef> 0 [ 0.5 2 ]\n</Nnet>\n")
    ft = FeatureTransform.parse(text, "am.mvn")
    assert ft.apply(np.array([[3.0, 4.0]])).tolist() == [[1.0, 4.0]]


def test_components_that_are_not_feature_transforms_are_refused():
    with pytest.raises(UsageError, match="ft: component 1 <Sigmoid> cannot be applied"):
        FeatureTransform([Layer("<Sigmoid>", 2, 2)], "ft")


def test_wrong_feature_dimension_is_one_line():
    ft = FeatureTransform.from_cmvn(3, 0)
    with pytest.raises(UsageError, match="expects features of dimension 3"):
        ft.apply(np.zeros((2, 4)))
