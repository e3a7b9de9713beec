"""The serial reference itself, on cases small enough to work out by hand
from docs/algorithms.md's text (so a wrong reading of the contract cannot hide
behind a replay that agrees with the code)."""
import numpy as np

import reference


def test_bmuf_blocks_start_from_s_the_nesterov_look_ahead():
    # one worker, eta = 0.5, zeta = 1: w_g = 0, D = 0, s = 0 at first
    state = {"w_g": np.zeros(1), "D": np.zeros(1)}
    (w,) = reference.bmuf([np.array([1.0])], [1], state, 0.5, 1.0, True)
    # G = 1 - 0; D = 1; w_g = 1; s = 1 + 0.5 = 1.5
    assert (state["D"][0], state["w_g"][0], w[0]) == (1.0, 1.0, 1.5)
    (w,) = reference.bmuf([np.array([2.0])], [1], state, 0.5, 1.0, True)
    # G = 2 - s = 0.5 (measured from s, not from w_g = 1); D = 0.5 + 0.5 = 1
    assert (state["D"][0], state["w_g"][0], w[0]) == (1.0, 2.0, 2.5)


def _log(ranks):
    """A log of syncs served in this order: (rank, n_k, order, reply, arrived)."""
    return [(r, 1, i, -1, i) for i, r in enumerate(ranks)]


def test_barrier_period_one_is_lockstep():
    # two workers, K = 1: the first sync's reply is held until the other waits
    replies = reference.barrier_replies(_log([1, 2, 1, 2]), [], 1, [1, 2])
    assert replies == [2, 2, 4, 4]


def test_the_kth_reply_and_those_after_it_are_held():
    # K = 3, two workers: syncs 1 and 2 are answered at once; the 3rd (rank 1)
    # is held, so is rank 2's next; both then get x after 4 updates
    replies = reference.barrier_replies(_log([1, 2, 1, 2, 1]), [], 3, [1, 2])
    assert replies == [1, 2, 4, 4, 5]


def test_barrier_period_zero_or_below_disables_it():
    for K in (0, -1):
        assert reference.barrier_replies(_log([1, 1, 2]), [], K, [1, 2]) == [1, 2, 3]
