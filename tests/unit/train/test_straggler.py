"""Who held the others back, on synthetic span tables: rendezvous (collective
syncs, epoch ends), a server serving one worker while others wait, ties,
and the line the run ends with."""
import inspect
import math

import numpy as np
import pytest

from psgd import trace
from psgd.train import straggler
from psgd.train.stall_report import Names

nan = float("nan")


def sync(start, end, number, collective=True):
    return (trace.SYNC, start, end, {"sync": number, "collective": collective})


def test_the_last_to_arrive_is_held_responsible_for_every_wait():
    held, waited = straggler.rendezvous([1.0, 3.0, 2.5])
    assert held.tolist() == [0.0, 2.5, 0.0]
    assert waited.tolist() == [2.0, 0.0, 0.5]


def test_a_tie_shares_the_blame_and_absent_ranks_take_no_part():
    held, waited = straggler.rendezvous([1.0, 3.0, 3.0, nan])
    assert held.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert waited[3] == 0.0


def test_a_rank_not_arrived_yet_counts_from_now():
    held, _ = straggler.rendezvous([-4.0, math.inf, -1.0], now=0.0)
    assert held.tolist() == [0.0, 5.0, 0.0]


def test_one_rank_alone_waits_for_nobody():
    held, waited = straggler.rendezvous([1.0, nan])
    assert not held.any() and not waited.any()


def test_collective_syncs_and_epoch_ends_add_up_per_rank():
    spans = [[sync(0.0, 1.2, 0), sync(2.0, 2.2, 1), (trace.ARRIVE, 3.0, 3.5, {"epoch": 0})],
             [sync(1.0, 1.2, 0), sync(2.1, 2.2, 1), (trace.ARRIVE, 3.4, 3.5, {"epoch": 0})],
             [sync(0.5, 1.2, 0), sync(2.0, 2.2, 1), (trace.ARRIVE, 3.1, 3.5, {"epoch": 0})]]
    held, waited = straggler.attribute(spans, 3)
    # rank 1 arrives last every time: 1.5 + 0.2 + 0.7
    np.testing.assert_allclose(held, [0.0, 2.4, 0.0], atol=1e-9)
    np.testing.assert_allclose(waited, [1.0 + 0.1 + 0.4, 0.0, 0.5 + 0.1 + 0.3], atol=1e-9)


def test_a_worker_waiting_while_the_server_serves_another_waits_for_that_one():
    serve = [(trace.SERVE, 0.0, 2.0, {"worker": 2, "staleness": 0}),
             (trace.SERVE, 2.0, 2.1, {"worker": 1, "staleness": 1}),
             (trace.SERVE, 5.0, 5.1, {"worker": 1, "staleness": 0})]
    spans = [serve,
             [sync(0.5, 2.1, 0, collective=False), sync(5.0, 5.1, 1, collective=False)],
             [sync(0.0, 2.0, 0, collective=False)]]
    held, waited = straggler.attribute(spans, 3)
    # rank 1 waited 1.5s of its first sync while rank 2 was served; its own
    # service is its own exchange, and rank 2 waited for nobody
    np.testing.assert_allclose(held, [0.0, 0.0, 1.5])
    np.testing.assert_allclose(waited, [0.0, 1.5, 0.0])


def test_the_straggler_and_its_share_of_the_others_time():
    r, seconds, share, runner = straggler.straggler(np.array([0.0, 3.0, 1.0]), wall=10.0,
                                                    ranks=3)
    assert (r, seconds, runner) == (1, 3.0, (2, 1.0)) and share == pytest.approx(0.15)
    assert straggler.straggler(np.array([0.0, 3.0]), 10.0, 2)[3] is None
    assert straggler.straggler(np.zeros(3), 10.0, 3) is None


def test_the_line_names_the_rank_and_its_host():
    names = Names(["a", "a", "b"])
    line = straggler.line(names, (2, 3.0, 0.15, (0, 1.0)))
    assert line == ("straggler: rank 2 on b; the others waited 3.00s for it over the run, "
                    "15.0% of their time (next: rank 0 on a, 1.00s)")
    assert straggler.line(names, (2, 3.0, 0.15, None)).endswith("of their time")
    assert "none" in straggler.line(Names(), None)


def test_the_stall_watchdog_counts_the_wait_as_the_run_line_does():
    from psgd.train.stall_report import COMPUTING, SYNCING, stall_report
    table = np.array([[SYNCING, 0, 3, 5000, 0], [COMPUTING, 0, 3, 7000, 1],
                      [SYNCING, 0, 3, 4000, 2]], dtype=np.int64)
    # stall_report's `running` argument is on its way out: the call fits with and without it
    running = {"running": 10.0} if "running" in inspect.signature(stall_report).parameters \
        else {}
    line, _ = stall_report(table, np.full(3, 100.0), 100.0, 2.0, **running)
    held, _ = straggler.rendezvous([-5.0, math.inf, -4.0], now=0.0)
    assert line.endswith("; the others have waited %.1fs for rank 1" % held[1]), line
    assert held[1] == 9.0


def test_each_wait_is_found_with_the_rank_waited_for():
    spans = [[sync(0.0, 1.2, 0)], [sync(1.0, 1.2, 0)],
             [(trace.SERVE, 5.0, 6.0, {"worker": 0, "staleness": 0})],
             [sync(5.5, 6.5, 1, collective=False)]]
    waits = []
    straggler.attribute(spans, 4, waits)
    assert sorted(waits) == [(0, 0.0, 1.0, 1), (3, 5.5, 6.0, 0)]


def test_shards_served_at_once_count_a_wait_once():
    # two servers serve rank 3's shards at the same time while rank 2 waits
    serve = [(trace.SERVE, 0.0, 1.0, {"worker": 3, "staleness": 0})]
    spans = [serve, list(serve), [sync(0.0, 1.0, 0, collective=False)], []]
    held, waited = straggler.attribute(spans, 4)
    np.testing.assert_allclose(held, [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(waited, [0.0, 0.0, 1.0, 0.0])
