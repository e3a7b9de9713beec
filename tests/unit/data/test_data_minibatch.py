import numpy as np
import pytest

from psgd.data.minibatch import Minibatches
from psgd.errors import UsageError


def _data(n=23):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return x, np.arange(n, dtype=np.int64)


def test_one_epoch_covers_every_example_once_with_partial_last_batch():
    x, y = _data()
    batches = list(Minibatches(x, y, batch_size=5, seed=3, epoch=0))
    assert [len(b[1]) for b in batches] == [5, 5, 5, 5, 3]
    seen = np.concatenate([b[1] for b in batches])
    assert sorted(seen.tolist()) == list(range(23))
    assert not np.array_equal(seen, np.arange(23))      # shuffled
    for xb, yb in batches:                              # inputs follow their labels
        np.testing.assert_array_equal(xb[:, 0], 2 * yb)


def test_order_depends_only_on_seed_and_epoch():
    x, y = _data()
    order = lambda s, e: np.concatenate([b[1] for b in Minibatches(x, y, 4, seed=s, epoch=e)])
    np.testing.assert_array_equal(order(1, 2), order(1, 2))
    assert not np.array_equal(order(1, 2), order(1, 3))
    assert not np.array_equal(order(1, 2), order(2, 2))


def test_resume_at_position_gives_the_rest_of_the_epoch():
    x, y = _data()
    first = Minibatches(x, y, 4, seed=7, epoch=5)
    assert len(first) == 6 and first.position == 0
    head = [next(first) for _ in range(3)]
    assert first.position == 3 and first.remaining == 3
    rest = list(first)
    resumed = Minibatches(x, y, 4, seed=7, epoch=5, start=3)
    assert resumed.position == 3
    again = list(resumed)
    assert len(again) == len(rest) == 3 and resumed.position == 6
    for (_, a), (_, b) in zip(rest, again):
        np.testing.assert_array_equal(a, b)
    assert len(head) == 3
    assert list(Minibatches(x, y, 4, seed=7, epoch=5, start=6)) == []


def test_no_shuffle_keeps_order():
    x, y = _data(10)
    got = np.concatenate([b[1] for b in Minibatches(x, y, 3, shuffle=False)])
    np.testing.assert_array_equal(got, y)


@pytest.mark.parametrize("kwargs", [dict(batch_size=0), dict(batch_size=2.5),
                                    dict(batch_size=4, start=7), dict(batch_size=4, start=-1)])
def test_bad_arguments(kwargs):
    x, y = _data()
    with pytest.raises(UsageError):
        Minibatches(x, y, **kwargs)


def test_length_mismatch():
    x, y = _data()
    with pytest.raises(UsageError, match="23 inputs but 22 labels"):
        Minibatches(x, y[:-1], 4)
