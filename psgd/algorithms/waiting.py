"""How the server algorithms wait for a message without burning a core: the
server's idle wait for a control message (server.py) and a worker's wait for
the server's answer (server_worker.py).

MPICH and Open MPI spin in every blocking call (Wait, Waitany, Recv), and
neither offers a wait that blocks in the kernel, so a wait here polls with
Test calls and sleeps in between. A sleep costs latency (a message that
arrives during one waits for it to end, plus ~70 us of timer slack), a spin
costs a core. The policy spends spinning where a message is likely: each
Waiter remembers how long its recent waits lasted (a worker's gap between
syncs, as the server sees it; the server's answer time, as a worker sees it)
and spins in a short window around the earliest of them, sleeping with a
doubling backoff before and after it. When waits are short (a worker in a
tight loop, an answer right after a reply) the window starts at once, so
the wait is a spin; when they are long the window is a few percent of the
wait, so an idle rank stays nearly idle.

The transfer itself does not need the waiting side to poll: a rank that
sleeps while its peer copies the bytes finds them done when it wakes
(measured with the MPICH wheel), so sleeping never stalls a transfer.
"""
import collections
import time

FIRST_SLEEP = 50e-6     # the backoff's first sleep
LEAD = 150e-6           # spin from this long before the earliest expected arrival:
                        # a sleep here overshoots by ~100 us
SPIN_MIN = 200e-6       # and until at least this long after it
HISTORY = 16            # waits remembered
SERVER_SPIN_SHARE = 0.03  # the server idles most of the time: spin little of it
WORKER_SPIN_SHARE = 0.1   # a worker waits a round trip, whose latency is the sync's


class Waiter:
    """Repeats `test()` until it returns something other than None, which
    wait() returns. `max_sleep` is the longest sleep (the option
    poll_max_sleep); 0 polls without ever sleeping. `spin_share` bounds the
    spin beyond LEAD + SPIN_MIN to that share of a typical wait. Clocks and
    sleep are parameters so that tests can drive the policy with a fake clock."""

    def __init__(self, max_sleep, spin_share, clock=time.perf_counter,
                 cpu_clock=time.process_time, sleep=time.sleep):
        self.max_sleep, self.spin_share = max_sleep, spin_share
        self.clock, self.cpu_clock, self.sleep = clock, cpu_clock, sleep
        self.recent = collections.deque(maxlen=HISTORY)   # how long each wait lasted

    def window(self):
        """(start, end) of the spin, in seconds from the start of a wait: from
        just before the earliest recent waits ended to the median, as far as
        the spin share allows; None before any wait (then: spin SPIN_MIN, as a
        message right away is likely, then back off)."""
        if not self.recent:
            return None
        ordered = sorted(self.recent)
        early = ordered[len(ordered) // 4]  # near the earliest, robust to outliers
        typical = ordered[len(ordered) // 2]
        start = max(0.0, early - LEAD)
        longest = LEAD + SPIN_MIN + self.spin_share * typical
        return start, min(typical + SPIN_MIN, start + longest)

    def wait(self, test, stats=None):
        """test()'s first result that is not None. `stats` (a ServerStats, or
        anything with `sleeps` and `idle_cpu_s`) counts the sleeps taken and
        the process CPU time the wait cost."""
        cpu = self.cpu_clock() if stats is not None else 0.0
        start = self.clock()
        spin_from, spin_to = self.window() or (0.0, SPIN_MIN)
        delay, sleeps, last_miss = min(FIRST_SLEEP, self.max_sleep), 0, 0.0
        while True:
            result = test()
            now = self.clock() - start
            if result is not None:
                break
            last_miss = now
            if self.max_sleep <= 0 or spin_from <= now < spin_to:
                continue                                    # spin
            if now < spin_from:                             # wake up in time for the window
                nap = min(self.max_sleep, spin_from - now)
            else:                                           # past it: back off
                nap = delay
                delay = min(2 * delay, self.max_sleep)
            self.sleep(nap)
            sleeps += 1
        # When it arrived is only known to lie after the last failed test: that
        # early bound keeps the window from drifting late.
        self.recent.append(last_miss)
        if stats is not None:
            stats.sleeps += sleeps
            stats.idle_cpu_s += self.cpu_clock() - cpu
        return result
