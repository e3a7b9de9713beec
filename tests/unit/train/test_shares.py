"""Work shares by speed (psgd/train/shares.py): the split of an epoch's
minibatches by the workers' rates, the shard walked in passes across
epochs, and which runs take shares by speed."""
import numpy as np
import pytest
from mpi4py import MPI

from psgd.data import Minibatches, ShardStream
from psgd.errors import UsageError
from psgd.train import make_config
from psgd.train.config import resolve
from psgd.train.shares import WorkShares, split


def test_the_split_follows_the_rates_and_sums_to_the_epoch():
    assert split(100, [1, 1, 1, 1]).tolist() == [25, 25, 25, 25]
    assert split(100, [2, 2, 2, 1]).tolist() == [29, 29, 28, 14]
    shares = split(101, [3.0, 1.0, 1.7])
    assert shares.sum() == 101 and shares[0] > shares[2] > shares[1]


def test_unknown_rates_split_equally_and_no_worker_is_left_out():
    assert split(10, [1, float("nan"), 1]).tolist() == [4, 3, 3]
    assert split(10, [1, 0, 1]).tolist() == [4, 3, 3]
    assert split(10, [1000, 1, 1]).tolist() == [8, 1, 1]       # every worker keeps one
    assert split(2, [1, 1, 1]).sum() == 2                       # fewer than workers


def _data(n=23):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return x, np.arange(n, dtype=np.int64)


def labels(batches):
    return [b[1].tolist() for b in batches]


def test_a_stream_taken_a_pass_per_epoch_is_minibatches():
    x, y = _data()
    stream = ShardStream(x, y, 5, seed=7)
    for epoch in range(3):
        stream.seek(epoch)
        assert labels(stream.take(23)) == labels(Minibatches(x, y, 5, seed=7, epoch=epoch))


def test_a_stream_goes_on_across_passes_cutting_the_last_minibatch_to_fit():
    x, y = _data()
    whole = ShardStream(x, y, 5, seed=7)

    passes = [v for e in range(3)
              for b in labels(Minibatches(x, y, 5, seed=7, epoch=e)) for v in b]
    got = labels(whole.take(31))                      # a pass of 23, and 8
    assert [len(b) for b in got] == [5, 5, 5, 5, 3, 5, 3]
    assert [v for b in got for v in b] == passes[:31]
    assert (whole.pass_, whole.position) == (1, 8)
    resumed = ShardStream(x, y, 5, seed=7)
    resumed.seek(whole.pass_, whole.position)         # a checkpoint's cursor
    rest = labels(resumed.take(20))
    assert [len(b) for b in rest] == [5, 5, 5, 5]
    assert [v for b in rest for v in b] == passes[31:51]


def test_a_cursor_beyond_the_shard_is_refused():
    with pytest.raises(UsageError, match="shard position 24 is outside 0..23"):
        ShardStream(*_data(), 5, seed=7).seek(0, 24)


def test_an_empty_shard_yields_nothing():
    stream = ShardStream(*_data(0), 5, seed=1)
    assert stream.size == 0 and list(stream.take(3)) == []


def test_one_worker_alone_keeps_its_shard():
    shares = WorkShares(MPI.COMM_SELF, "speed", 0, 9, 0)
    shares.rate = 3.0
    shares.agree(1, say=False)
    assert shares.budget == 9


@pytest.mark.parametrize("algo,flags,expected", [
    ("easgd", {}, "speed"), ("masgd", {}, "speed"),
    ("asgd", {"barrier_period": 2}, "equal"),          # a service order that replays alike
    ("asgd", {"barrier_period": 2, "work_shares": "speed"}, "speed"),
    ("easgd", {"work_shares": "equal"}, "equal"), ("bsp", {}, "equal"),
    ("syncgrad", {}, "equal")])
def test_server_algorithms_take_shares_by_speed_by_default(algo, flags, expected):
    assert resolve(make_config(algo=algo, **flags), 5).run.work_shares == expected


def test_shares_given_to_a_collective_algorithm_are_refused():
    with pytest.raises(UsageError, match="--work-shares applies to the server algorithms"):
        make_config(algo="bmuf", work_shares="speed")


class Job:
    """A job's Allgather seen from one rank: the others' values are given."""

    def __init__(self, values, rank):
        self.values, self.rank = values, rank

    def Get_size(self):
        return len(self.values)

    def Allgather(self, mine, out):
        out[...] = np.array(self.values, dtype=out.dtype).reshape(out.shape)
        out[self.rank] = mine.reshape(out[self.rank].shape)


NAN = float("nan")


def shares_of(rank, rates, kind="speed"):
    """Worker `rank`'s WorkShares after an epoch at `rates`: (rate, compute
    rate) of ranks 0..3, rank 0 serving, every shard 100 examples."""
    shares = WorkShares(Job([0, 100, 100, 100], rank), kind, rank - 1, 100, 1)
    shares.comm = Job([list(r) for r in rates], rank)
    shares.rate, shares.compute_rate = rates[rank]
    shares.agree(1, say=False)
    return shares


def test_a_worker_slow_to_compute_syncs_after_fewer_samples():
    rates = [(NAN, NAN), (2.0, 2.5), (2.0, 2.5), (1.0, 1.25)]
    slow = shares_of(3, rates)
    assert (slow.budget, slow.pace, slow.sync_period(128)) == (60, 0.5, 64)
    fast = shares_of(1, rates)
    assert (fast.budget, fast.sync_period(128)) == (120, 128)


def test_a_worker_slow_to_sync_keeps_its_block():
    # its link, not its compute, is slow: a smaller share, the same block
    slow = shares_of(3, [(NAN, NAN), (2.0, 2.5), (2.0, 2.5), (1.0, 2.5)])
    assert (slow.budget, slow.sync_period(128)) == (60, 128)


def test_equal_shares_keep_the_block_size():
    shares = WorkShares(Job([0, 100, 100], 2), "equal", 1, 100, 1)
    shares.rate = 1.0
    shares.agree(1, say=False)
    assert (shares.budget, shares.sync_period(128)) == (100, 128)


def test_the_summed_pace_counts_a_slow_worker_by_its_rate():
    from psgd.train.shares import summed_pace
    assert summed_pace([1.0, 1.0, 1.0, 0.5]) == pytest.approx(3.5)
    assert summed_pace([2.0, 2.1, 1.9, 2.0]) == pytest.approx(4.0)     # alike: N
    assert summed_pace([1.0, 1.0, 2.0]) == pytest.approx(4.0)          # a fast one: more
    assert summed_pace([1.0, float("nan"), 1.0]) == 3.0                 # unknown: N
    assert summed_pace([1.0, 0.0]) == 2.0


@pytest.mark.parametrize("flags,size,paced", [
    ({"algo": "asgd"}, 5, True),                            # 1 server, 4 workers
    ({"algo": "asgd", "alpha": 0.25}, 5, False),            # the user's alpha
    ({"algo": "asgd", "work_shares": "equal"}, 5, False),
    ({"algo": "asgd"}, 2, False),                           # 1 worker: no mean
    ({"algo": "masgd"}, 5, False),
    ({"algo": "asgd", "barrier_period": 4}, 5, False),      # one service order: equal shares
])
def test_the_trainers_asgd_divides_by_the_summed_pace(flags, size, paced):
    from psgd.train.defaults import asgd_paced
    assert asgd_paced(resolve(make_config(**flags), size)) == paced
