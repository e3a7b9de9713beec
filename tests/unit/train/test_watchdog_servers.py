"""The stall report with sharded servers (--servers S): when every worker
waits in a sync and ranks 0..S-1 serve, the report names the servers."""
import numpy as np

from psgd.train.watchdog import COMPUTING, DONE, SERVING, SYNCING, stall_report


def table(phases, ms=5000):
    return np.array([[p, 0, 3, ms, r] for r, p in enumerate(phases)], dtype=np.int64)


def report(phases):
    t = table(phases)
    return stall_report(t, np.full(len(t), 100.0), 100.0, 2.0)


def test_one_server_is_named_as_before():
    line, key = report([SERVING, SYNCING, SYNCING])
    assert "not arrived after 2s: rank 0 (the server, epoch 1: no answer for 5.0s); " \
           "waiting: rank 1 (in sync 4 of epoch 1" in line
    assert [k[0] for k in key] == [0]


def test_every_server_is_named_and_none_listed_as_waiting():
    line, key = report([SERVING, SERVING, SERVING, SYNCING, SYNCING])
    named, waiting = line.split("; waiting: ")
    for r in (0, 1, 2):
        assert "rank %d (a server, epoch 1: no answer for 5.0s)" % r in named
        assert "rank %d " % r not in waiting
    assert [k[0] for k in key] == [0, 1, 2]


def test_a_late_worker_is_named_rather_than_the_servers():
    line, key = report([SERVING, SERVING, SYNCING, COMPUTING])
    assert [k[0] for k in key] == [3] and "server, epoch" not in line.split("; waiting")[0]


def test_a_dead_worker_does_not_hide_a_stuck_server():
    """--survive-worker-loss: rank 3's process died (DONE in the table) and
    the server stopped answering the others: the report still names it."""
    line, key = report([SERVING, SYNCING, SYNCING, DONE])
    assert "rank 0 (the server, epoch 1: no answer for 5.0s)" in line
    assert "rank 3" not in line
    assert [k[0] for k in key] == [0]


def test_a_dead_worker_does_not_hide_every_rank_stuck():
    line, _ = report([SYNCING, SYNCING, DONE])
    assert "every rank has waited for more than 2s" in line and "rank 2" not in line
