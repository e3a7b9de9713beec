import numpy as np
import pytest

from psgd.data.splice import splice_frames
from psgd.errors import UsageError


def test_splice_by_hand_with_edge_replication():
    # Two utterances, lengths 3 and 2, one feature each.
    x = np.array([[1], [2], [3], [10], [20]], dtype=np.float32)
    got = splice_frames(x, [0, 3, 5], 1)
    np.testing.assert_array_equal(got, [[1, 1, 2], [1, 2, 3], [2, 3, 3],
                                        [10, 10, 20], [10, 20, 20]])
    assert got.dtype == np.float32


def test_splice_block_order_and_wide_context():
    # F = 2, K = 2 on a 2-frame utterance: blocks are frames t-2 .. t+2.
    x = np.array([[1, -1], [2, -2]], dtype=np.float32)
    got = splice_frames(x, [0, 2], 2)
    np.testing.assert_array_equal(got[0], [1, -1, 1, -1, 1, -1, 2, -2, 2, -2])
    np.testing.assert_array_equal(got[1], [1, -1, 1, -1, 2, -2, 2, -2, 2, -2])


def test_splice_zero_is_identity_and_empty_is_fine():
    x = np.ones((4, 3), dtype=np.float32)
    assert splice_frames(x, [0, 4], 0) is x
    assert splice_frames(np.zeros((0, 3), np.float32), [0], 2).shape == (0, 15)


@pytest.mark.parametrize("k", [-1, 0.5])
def test_bad_context(k):
    with pytest.raises(UsageError):
        splice_frames(np.ones((2, 2)), [0, 2], k)
