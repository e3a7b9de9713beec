"""When the server serves a worker in the background (in_flight.py): its
last exchange against the others' median."""
from psgd.algorithms import in_flight


def test_a_worker_is_slow_against_the_others_only():
    flight = in_flight.InFlight(None, False)
    flight.timed(1, 0.5)
    assert not flight.slow(1)                       # nobody to compare with
    flight.timed(2, 0.001)
    flight.timed(3, 0.002)
    assert flight.slow(1) and not flight.slow(2) and not flight.slow(3)
    flight.timed(1, 0.004)                          # under SLOW_MIN_S: noise on shared cores
    assert not flight.slow(1)
