import numpy as np
import pytest

from psgd.data.chunks import PAD_LABEL, chunk_utterances
from psgd.errors import UsageError

X = np.arange(7, dtype=np.float32)[:, None] + 1      # frames 1..7, F = 1
Y = np.arange(7, dtype=np.int64) * 10
OFFSETS = [0, 5, 7]                                 # utterances of 5 and 2 frames


def test_padded_chunks_by_hand():
    xc, yc = chunk_utterances(X, Y, OFFSETS, 2)
    assert xc.shape == (4, 2, 1) and yc.shape == (4, 2)
    np.testing.assert_array_equal(xc[..., 0], [[1, 2], [3, 4], [5, 0], [6, 7]])
    np.testing.assert_array_equal(yc, [[0, 10], [20, 30], [40, PAD_LABEL], [50, 60]])
    assert xc.dtype == np.float32 and yc.dtype == np.int64
    assert (yc >= 0).sum() == len(Y)                # the mask counts every real frame once


def test_drop_partial_chunks():
    xc, yc = chunk_utterances(X, Y, OFFSETS, 2, drop_partial=True)
    np.testing.assert_array_equal(xc[..., 0], [[1, 2], [3, 4], [6, 7]])
    assert (yc != PAD_LABEL).all()


def test_long_chunks_pad_every_utterance():
    xc, yc = chunk_utterances(X, Y, OFFSETS, 6)
    np.testing.assert_array_equal(yc, [[0, 10, 20, 30, 40, -1], [50, 60, -1, -1, -1, -1]])
    assert chunk_utterances(X, Y, OFFSETS, 6, drop_partial=True)[0].shape == (0, 6, 1)


def test_bad_chunk_length():
    with pytest.raises(UsageError):
        chunk_utterances(X, Y, OFFSETS, 0)
