"""The wait policy (psgd/algorithms/waiting.py) on a fake clock: where it
spins, how long it sleeps, what a wait costs and how late it notices."""
import pytest

from psgd.algorithms import waiting
from psgd.algorithms.waiting import FIRST_SLEEP, LEAD, SPIN_MIN, Waiter

TEST_COST = 1e-6        # one Test call: the CPU a spin burns per iteration
OVERSHOOT = 80e-6       # what a sleep adds on this kind of machine
WAKE_COST = 25e-6       # CPU of one wake-up


class Machine:
    """A fake clock, a sleep that advances it, and a message due at `due`."""

    def __init__(self):
        self.now, self.cpu, self.due = 0.0, 0.0, None
        self.naps = []

    def clock(self):
        return self.now

    def cpu_clock(self):
        return self.cpu

    def sleep(self, seconds):
        self.naps.append(seconds)
        self.now += seconds + OVERSHOOT
        self.cpu += WAKE_COST

    def test(self):
        self.now += TEST_COST
        self.cpu += TEST_COST
        return "message" if self.now >= self.due else None

    def waiter(self, max_sleep=1e-3, anticipate=True):
        return Waiter(max_sleep, anticipate, clock=self.clock, cpu_clock=self.cpu_clock,
                      sleep=self.sleep, yield_core=lambda: None)

    def wait(self, waiter, after, stats=None):
        """One wait for a message `after` seconds away: (lag, cpu, naps)."""
        start, cpu, naps = self.now, self.cpu, len(self.naps)
        self.due = start + after
        assert waiter.wait(self.test, stats) == "message"
        return self.now - self.due, self.cpu - cpu, len(self.naps) - naps


class Stats:
    sleeps, idle_cpu_s = 0, 0.0


def test_a_first_wait_spins_briefly_then_backs_off_to_max_sleep():
    m = Machine()
    lag, cpu, naps = m.wait(m.waiter(max_sleep=1e-3), after=0.02)
    assert m.naps[:3] == pytest.approx([FIRST_SLEEP, 2 * FIRST_SLEEP, 4 * FIRST_SLEEP])
    assert max(m.naps) == pytest.approx(1e-3)
    assert 0 <= lag <= 1e-3 + OVERSHOOT
    assert cpu < 0.05 * 0.02                  # SPIN_MIN of spin and the wake-ups


def test_regular_gaps_are_noticed_at_once_for_a_few_percent_of_the_wait():
    m = Machine()
    w = m.waiter()
    for _ in range(10):
        m.wait(w, after=5e-3)
    lag, cpu, naps = m.wait(w, after=5e-3)
    assert lag <= 2 * TEST_COST               # caught spinning, not at a wake-up
    assert cpu <= 0.10 * 5e-3                 # the idle server's budget
    assert naps <= 6                          # max_sleep naps up to the window, no ramp
    start, end = w.window()
    assert start <= 5e-3 - LEAD + 1e-5 and end >= 5e-3 + SPIN_MIN - 1e-5


def test_a_message_later_than_usual_costs_at_most_a_backoff_sleep():
    m = Machine()
    w = m.waiter(max_sleep=1e-3)
    for _ in range(10):
        m.wait(w, after=5e-3)
    lag, cpu, _ = m.wait(w, after=50e-3)
    assert lag <= 1e-3 + OVERSHOOT
    assert cpu < 0.05 * 50e-3                 # no spinning past the window


def test_the_spin_is_bounded_by_its_share_of_the_wait_when_arrivals_scatter():
    m = Machine()
    w = m.waiter()
    for after in [2e-3, 9e-3] * 8:
        m.wait(w, after=after)
    start, end = w.window()
    assert end - start <= LEAD + SPIN_MIN + waiting.SPIN_SHARE * 9e-3 + 1e-9


# a worker's wait for the server's answer: spin from the start ---------------------
def test_a_workers_first_wait_spins_through():
    m = Machine()
    lag, cpu, naps = m.wait(m.waiter(anticipate=False), after=0.05)
    assert naps == 0 and lag <= 2 * TEST_COST


def test_a_worker_spins_through_its_usual_answer_and_sleeps_through_a_slow_one():
    m = Machine()
    w = m.waiter(anticipate=False)
    for _ in range(8):
        m.wait(w, after=2e-3)
    lag, cpu, naps = m.wait(w, after=2e-3)
    assert naps == 0 and lag <= 2 * TEST_COST     # never asleep while bytes may move
    assert w.window() == pytest.approx((0.0, 2 * 2e-3 + SPIN_MIN), abs=1e-5)
    lag, cpu, naps = m.wait(w, after=1.0)         # the server is busy elsewhere
    assert cpu < 0.05 * 1.0 and lag <= 1e-3 + OVERSHOOT
    assert max(m.naps) == pytest.approx(1e-3)


def test_max_sleep_zero_never_sleeps():
    m = Machine()
    lag, cpu, naps = m.wait(m.waiter(max_sleep=0.0), after=3e-3)
    assert naps == 0 and lag <= 2 * TEST_COST and cpu == pytest.approx(3e-3, rel=0.01)


def test_a_small_max_sleep_caps_every_sleep():
    m = Machine()
    w = m.waiter(max_sleep=20e-6)
    for _ in range(3):
        m.wait(w, after=3e-3)
    assert max(m.naps) <= 20e-6


def test_an_immediate_message_costs_no_sleep_and_teaches_a_spin_from_the_start():
    m = Machine()
    w = m.waiter()
    for _ in range(8):
        assert m.wait(w, after=0.0)[2] == 0
    assert w.window()[0] == 0.0


def test_the_wait_records_when_the_message_was_last_known_missing():
    m = Machine()
    w = m.waiter()
    m.wait(w, after=20e-3)                    # found at a wake-up, after a sleep
    assert w.recent[-1] <= 20e-3 <= w.recent[-1] + 1e-3 + OVERSHOOT + TEST_COST
    assert len(w.recent) == 1
    for _ in range(2 * waiting.HISTORY):
        m.wait(w, after=1e-3)
    assert len(w.recent) == waiting.HISTORY


def test_stats_count_sleeps_and_the_cpu_of_the_wait():
    m = Machine()
    stats = Stats()
    _, cpu, naps = m.wait(m.waiter(), after=10e-3, stats=stats)
    assert stats.sleeps == naps > 0
    assert stats.idle_cpu_s == pytest.approx(cpu)
