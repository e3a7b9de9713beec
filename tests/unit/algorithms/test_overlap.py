"""When an easgd worker leaves its exchange in flight (overlap.py): the
median of its last exchanges against that of its compute between syncs,
the shorter at least a quarter of the longer, across hosts only under
`auto`."""
import pytest

from psgd.algorithms import overlap
from psgd.algorithms.in_flight import RECENT, SLOW_MIN_S


def timed(flight, took, computed):
    flight.took.extend(took)
    flight.computed.extend(computed)
    return flight.wanted()


def test_auto_leaves_an_exchange_of_a_quarter_of_the_compute_in_flight():
    flight = overlap.Flight("auto", across_hosts=True)
    assert not flight.wanted()                              # nothing measured yet
    assert not timed(flight, [0.03] * (RECENT - 1), [0.08] * RECENT)   # too few exchanges
    assert timed(flight, [0.03], [])
    assert not timed(flight, [0.015] * RECENT, [])          # under a quarter of 0.08 s
    assert timed(flight, [0.02] * 2, [])                    # two of the last three: its link
    assert not timed(flight, [0.001] * 2, [])               # recovered: in line again


def test_auto_needs_compute_to_hide_the_exchange_behind():
    """An exchange far longer than the compute beside it hides next to
    nothing and still costs a copy, a thread and a late pull."""
    flight = overlap.Flight("auto", across_hosts=True)
    assert not timed(flight, [0.04] * RECENT, [0.0] * RECENT)     # no compute at all
    assert not timed(flight, [], [0.009] * RECENT)          # under a quarter of 0.04 s
    assert timed(flight, [], [0.011] * 2)                   # a quarter: a fifth of the cycle
    assert timed(flight, [], [0.1] * RECENT)                # and all of the exchange


def test_auto_needs_a_worthwhile_exchange_and_more_than_one_host():
    fast = overlap.Flight("auto", across_hosts=True)
    assert not timed(fast, [SLOW_MIN_S * 0.9] * RECENT, [SLOW_MIN_S] * RECENT)
    one_host = overlap.Flight("auto", across_hosts=False)
    assert not timed(one_host, [1.0] * RECENT, [0.01] * RECENT)


@pytest.mark.parametrize("mode,wanted", [("always", True), ("never", False)])
def test_always_and_never_decide_alone(mode, wanted):
    assert overlap.Flight(mode, across_hosts=False).wanted() is wanted
    assert timed(overlap.Flight(mode, across_hosts=True), [1.0] * RECENT,
                 [0.01] * RECENT) is wanted


def test_only_the_time_before_a_sync_counts_as_compute():
    """stop() lands right after its own push returned: no compute of 0 s."""
    flight = overlap.Flight("auto", across_hosts=True)
    flight.returned()
    assert not flight.land(before_sync=False) and len(flight.computed) == 0
    flight.returned()
    assert not flight.land() and len(flight.computed) == 1
    assert not flight.land() and len(flight.computed) == 1     # nothing since it returned
