import numpy as np
import pytest

from psgd.data.dataset import Dataset, Utterances


def test_utterances_locate_rows_without_copying():
    u = Utterances.from_lengths(["a", "b", "c"], [2, 0, 3])
    np.testing.assert_array_equal(u.offsets, [0, 2, 2, 5])
    assert len(u) == 3 and u.num_frames == 5
    x = np.arange(10).reshape(5, 2)
    parts = u.split(x)
    assert [p.shape[0] for p in parts] == [2, 0, 3]
    assert np.shares_memory(parts[2], x)
    np.testing.assert_array_equal(parts[2], x[2:])


def _ds(**kw):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    return Dataset(x, y, x[:4], y[:4], 10, (2,), "toy", **kw)


def test_to_moves_arrays_and_keeps_facts():
    d = _ds().to(np)
    assert d.name == "toy" and d.num_train == 10 and d.num_test == 4


def test_utterance_view_needs_utterances():
    with pytest.raises(ValueError, match="utterance"):
        _ds().utterances()
    u = Utterances.from_lengths(["a"], [10])
    with pytest.raises(ValueError, match="sharded"):
        _ds(train_utts=u).shard(0, 2)
