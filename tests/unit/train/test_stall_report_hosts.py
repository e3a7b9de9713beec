"""The stall report across hosts: ranks named with their host, a host whose
every rank is silent named as the host, the report held back while the rest
of a host goes silent, and a slow link named by which hosts hear rank 0
behind."""
import numpy as np

from psgd.train.stall_report import (COMPUTING, SYNCING, Names, slow_link, stall_report)

HOSTS = ["h0", "h0", "h1", "h1"]


def table(phases, ms=100):
    return np.array([[p, 2, 7, ms, r, 0] for r, p in enumerate(phases)], dtype=np.int64)


def test_one_host_keeps_the_plain_names():
    assert Names(["a", "a"]).rank(1) == "rank 1"
    assert Names(None).rank(1) == "rank 1"
    assert Names(HOSTS).rank(2) == "rank 2 on h1"


def test_a_host_whose_every_rank_is_silent_is_named_with_its_ranks():
    t = table([SYNCING, SYNCING, SYNCING, SYNCING])
    seen = np.array([100.0, 100.0, 90.0, 90.0])
    line, key = stall_report(t, seen, 100.0, 5.0, HOSTS, beat=1.0)
    assert line.startswith("psgd: stall: host h1 (ranks 2, 3) silent for more than 5s: "
                           "its link is slow or cut;"), line
    assert key == ("silent", 2, 3)


def test_a_host_never_heard_from_is_silent_not_late():
    """Cut off before its first heartbeat crossed the link (CI once cut h1
    1.5 s into a fast job): rank 0 has nothing from h1 since the watchdog
    started, which is silence, not a rank that has not arrived."""
    t = table([SYNCING, SYNCING, -1, -1])
    started = 96.0
    seen = np.array([100.0, 100.0, started, started])
    line, key = stall_report(t, seen, 100.0, 3.0, HOSTS, beat=0.75)
    assert line.startswith("psgd: stall: host h1 (ranks 2, 3) silent for more than 3s: "), line
    assert "rank 2 on h1 (never heard from in 4.0s)" in line, line
    assert key == ("silent", 2, 3)
    # within the timeout of the start, nothing yet
    assert stall_report(t, np.array([100.0, 100.0, 98.0, 98.0]), 100.0, 3.0, HOSTS,
                        beat=0.75) is None


def test_ranks_not_yet_heard_from_wait_while_a_rank_heard_from_is_late():
    """A loaded machine: the workers' first heartbeats have not come in the
    timeout, but rank 0 (a server that never runs) says it has computed for
    longer: it is the one named, once the workers are heard waiting."""
    t = table([COMPUTING, -1, -1], ms=2500)
    seen = np.array([100.0, 97.5, 97.5])
    assert stall_report(t, seen, 100.0, 2.0, beat=0.5) is None
    t[1:, 0] = SYNCING
    line, _ = stall_report(t, np.array([100.0, 100.0, 100.0]), 100.0, 2.0, beat=0.5)
    assert line.startswith("psgd: stall: not arrived after 2s: rank 0 (computing for"), line


def test_one_silent_rank_of_a_host_is_a_rank_not_the_host():
    t = table([SYNCING, SYNCING, COMPUTING, SYNCING])
    seen = np.array([100.0, 100.0, 100.0, 90.0])
    line, _ = stall_report(t, seen, 100.0, 5.0, HOSTS, beat=1.0)
    assert line.startswith("psgd: stall: silent for more than 5s (no heartbeat: frozen or "
                           "dead?): rank 3 on h1 (last heard 10.0s ago"), line
    assert "host h1" not in line


def test_the_report_waits_while_the_rest_of_the_host_goes_silent():
    """A cut host's ranks go silent over one heartbeat period: rank 3 is
    overdue but not yet past the timeout, so the report waits for it."""
    t = table([SYNCING, SYNCING, SYNCING, SYNCING])
    seen = np.array([100.0, 100.0, 94.5, 95.5])
    assert stall_report(t, seen, 100.0, 5.0, HOSTS, beat=1.0) is None
    line, _ = stall_report(t, seen, 101.0, 5.0, HOSTS, beat=1.0)
    assert "host h1 (ranks 2, 3) silent" in line


def test_an_overdue_rank_is_not_reported_as_computing():
    """Its last status ('computing') is stale: silence, not lateness, names it."""
    t = table([SYNCING, SYNCING, COMPUTING, COMPUTING], ms=4500)
    seen = np.array([100.0, 100.0, 97.0, 97.0])
    assert stall_report(t, seen, 100.0, 5.0, HOSTS, beat=1.0) is None


def test_a_slow_link_is_named_by_the_host_that_hears_rank_0_behind():
    names = Names(["h0", "h0", "h1", "h2"])
    heard = np.array([True] * 4)
    assert slow_link(names, np.array([0, 0, 3.0, 0.5]), 2.0, 1.0, heard) == \
        "slow link: host h1's (rank 2; hears rank 0 3.0s behind) (other hosts within 0.5s)"
    # every other host behind: rank 0's own link
    assert slow_link(names, np.array([0, 0, 3.0, 2.5]), 2.0, 1.0, heard).startswith(
        "slow link: host h0's (ranks 0, 1;")
    # nobody behind enough: nothing to say
    assert slow_link(names, np.array([0, 0, 1.5, 0.5]), 2.0, 1.0, heard) == ""
    # a host no longer heard from may be cut off: silence, not slowness, names it
    assert slow_link(names, np.array([0, 0, 3.0, 0.5]), 2.0, 1.0,
                     np.array([True, True, False, True])) == ""


def test_two_hosts_name_the_link_between_them():
    names = Names(HOSTS)
    assert slow_link(names, np.array([0, 0, 3.0, 3.0]), 2.0, 1.0, np.array([True] * 4)) == \
        "slow link: between hosts h0 and h1 (h1 hears rank 0 3.0s behind)"
