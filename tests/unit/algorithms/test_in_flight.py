"""When the server serves a worker in the background (in_flight.py): the
median of its last exchanges against the others'."""
from psgd.algorithms import in_flight


def timed(flight, rank, *seconds):
    for s in seconds:
        flight.timed(rank, s)


def test_a_worker_is_slow_against_the_others_only():
    flight = in_flight.InFlight(None, False)
    timed(flight, 1, 0.5, 0.5, 0.5)
    assert not flight.slow(1)                       # nobody to compare with
    timed(flight, 2, 0.001, 0.001, 0.001)
    timed(flight, 3, 0.002, 0.002, 0.002)
    assert flight.slow(1) and not flight.slow(2) and not flight.slow(3)
    timed(flight, 1, 0.008, 0.008)                  # under SLOW_MIN_S: noise on shared cores
    assert not flight.slow(1)


def test_one_stall_does_not_make_a_worker_slow():
    flight = in_flight.InFlight(None, False)
    timed(flight, 2, 0.001, 0.001, 0.001)
    timed(flight, 1, 0.001, 0.001, 0.5)             # one stall of a shared core
    assert not flight.slow(1)
    timed(flight, 1, 0.5)                           # two of the last three: its link
    assert flight.slow(1)
    timed(flight, 1, 0.001, 0.001)                  # recovered: in line again
    assert not flight.slow(1)
