"""benchmarks/server_throughput.py: the servers' steady rate counts only the
syncs that end while every worker syncs, each worker's over its own time."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
import server_throughput  # noqa: E402


def test_steady_rate_leaves_out_start_up_and_wind_down():
    # two workers served in turn, one sync each 0.5 s, once the second one's
    # slow first sync (3.0 s) is done; after the first worker stops (5.5)
    # the second is served alone at twice the pace
    first = [1.0, 3.5, 4.5, 5.5]
    second = [3.0, 4.0, 5.0, 5.75, 6.0]
    # from 3.0 (the later first end) to 5.5 (the earlier last end): the
    # first worker's 3.5, 4.5, 5.5 and the second's 3.0, 4.0, 5.0, one sync
    # a second each (the whole run reads 9 syncs in 6 s)
    assert server_throughput.steady_syncs_per_s([first, second]) == pytest.approx(2.0)


def test_workers_in_step_are_not_read_low_at_the_span_end():
    # two workers syncing every 0.35 s, the second's ends 0.01 s after the
    # first's: the span (0.36 to 7.0) ends at the first's last end, just
    # before the second's; counting the syncs that end in it read
    # 37 / 6.64 = 5.57, 2.5% below the 2 / 0.35 = 5.71 they sync at
    first = [0.35 * (k + 1) for k in range(20)]
    second = [t + 0.01 for t in first]
    assert server_throughput.steady_syncs_per_s([first, second]) == pytest.approx(2 / 0.35)


def test_one_worker_is_its_own_span_and_too_few_syncs_give_none():
    assert server_throughput.steady_syncs_per_s([[1.0, 1.5, 2.5]]) == pytest.approx(2 / 1.5)
    assert server_throughput.steady_syncs_per_s([[1.0], [2.0]]) is None
    assert server_throughput.steady_syncs_per_s([[1.0, 2.0], []]) is None
