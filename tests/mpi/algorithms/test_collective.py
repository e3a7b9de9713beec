"""bsp, bmuf, sod and syncgrad under mpirun against a serial NumPy replay of
docs/algorithms.md, with uneven sample counts, a worker without data and early
finishers."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
import reference
from psgd import settings
from psgd.buffers import host_copy

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

SHAPES = [(3, 4), (0,), (5,), (2, 1, 3)]


def schedule(size):
    """Per rank, the n_k of each block; the last one is passed to stop().
    Rank 1 has no data at all when size > 2, rank 0 runs longest."""
    plans = []
    for k in range(size):
        if k == 1 and size > 2:
            plans.append([])
        else:
            plans.append([(7 * k + 3 * t) % 11 + 1 for t in range(5 - k % 3)])
    plans[-1][-1:] = [0] if plans[-1] else []  # a stop with nothing left over
    return plans


def local_step(k, t, shape):
    """The 'training' worker k does in block t: deterministic, replayable."""
    return np.random.default_rng(1000 * k + t).standard_normal(shape)


def initial(k):
    return [np.random.default_rng(k).standard_normal(s) for s in SHAPES]


def replay(size, update, state_init=None):
    """Expected model of every rank after every round, round by round."""
    plans = schedule(size)
    ws = [np.concatenate([a.ravel() for a in initial(0)]) for _ in range(size)]
    state = {"w_g": ws[0].copy(), "D": np.zeros_like(ws[0])}
    rounds = []
    t = 0
    while True:
        ns = []
        for k in range(size):
            if t < len(plans[k]):
                ws[k] = ws[k] + local_step(k, t, ws[k].shape)
                ns.append(plans[k][t])
            else:
                ns.append(0)
        if sum(ns) == 0:
            return rounds, state
        ws = update(ws, ns, state)
        rounds.append([w.copy() for w in ws])
        t += 1


def run(comm, name, xp=np, **options):
    """Drive psgd on this rank with the schedule (on xp's device); return the
    model after every round this rank saw, and the final one (host copies)."""
    k, size = comm.rank, comm.size
    plan = schedule(size)[k]
    sync = psgd.create(name, [xp.asarray(a) for a in initial(k)], comm=comm, **options)
    seen = []
    flat = sync.buffer.data
    for t, n_k in enumerate(plan):
        flat += xp.asarray(local_step(k, t, flat.shape))
        if t < len(plan) - 1:
            assert sync.synchronize(n_k) is True
            seen.append(host_copy(flat))
    tail = len(seen)
    sync.stop(plan[-1] if plan else 0)
    return seen, tail, host_copy(flat), sync


def check(comm, name, update, final_of=None, xp=np, **options):
    seen, _, final, sync = run(comm, name, xp, **options)
    rounds, state = replay(comm.size, update)
    for t, w in enumerate(seen):
        np.testing.assert_allclose(w, rounds[t][comm.rank], rtol=1e-10, atol=1e-12)
    expected = final_of(state) if final_of else rounds[-1][comm.rank]
    np.testing.assert_allclose(final, expected, rtol=1e-10, atol=1e-12)
    everyone = np.empty((comm.size, final.size))
    comm.Allgather(final, everyone)
    assert (everyone == everyone[0]).all(), "ranks ended with different models"
    return sync


def test_initial_model_of_rank_0_reaches_every_rank(comm):
    mine = [np.full(s, comm.rank + 1.0, np.float32) for s in SHAPES]
    sync = psgd.create("bsp", mine, comm=comm)
    for view in sync.params:
        assert (view == 1.0).all()
    sync.stop(0)


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_bsp_matches_replay(comm, weighting):
    check(comm, "bsp", lambda ws, ns, s: reference.bsp(ws, ns, s, weighting == "uniform"),
          weighting=weighting)


@pytest.mark.parametrize("nesterov", [True, False])
def test_bmuf_matches_replay_and_ends_on_w_g(comm, nesterov):
    eta, zeta = 0.6, 1.3
    check(comm, "bmuf", lambda ws, ns, s: reference.bmuf(ws, ns, s, eta, zeta, nesterov),
          final_of=lambda s: s["w_g"], block_momentum=eta, block_lr=zeta, nesterov=nesterov)


@pytest.mark.parametrize("nesterov", [True, False])
def test_bmuf_keeps_its_momentum_across_rounds(comm, nesterov):
    """A round ends on w_g (no look-ahead), so the next round's first block
    starts from w_g: its delta is measured from there and D carries on,
    D2 = eta * D1 + zeta * G2. Measuring it from the look-ahead restarted
    the momentum at every epoch under Nesterov (zeta = 1: D2 = G2)."""
    eta, zeta = 0.5, 1.0
    sync = psgd.create("bmuf", initial(0), comm=comm, block_momentum=eta, block_lr=zeta,
                       nesterov=nesterov)
    w = sync.buffer.data
    steps = [np.mean([local_step(k, t, w.shape) for k in range(comm.size)], axis=0)
             for t in range(2)]
    start = w.copy()
    w += local_step(comm.rank, 0, w.shape)
    sync.stop(5)                                     # round 1: one block
    d1 = steps[0] * zeta
    np.testing.assert_allclose(w, start + d1, rtol=1e-12, atol=1e-12)   # ends on w_g
    sync.begin_round()
    w += local_step(comm.rank, 1, w.shape)
    sync.stop(5)                                     # round 2, from w_g
    d2 = eta * d1 + zeta * steps[1]
    np.testing.assert_allclose(sync.block_momentum_buffer.data, d2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w, start + d1 + d2, rtol=1e-12, atol=1e-12)
    sync.close()


def test_bmuf_default_momentum_is_one_minus_one_over_n(comm):
    sync = psgd.create("bmuf", [np.zeros(2)], comm=comm)
    assert sync.block_momentum == pytest.approx(1 - 1 / comm.size)
    sync.stop(0)


@pytest.mark.parametrize("outer", ["sgd", "momentum", "nesterov", "adam"])
def test_sod_matches_replay(comm, outer):
    lr = 0.05 if outer == "adam" else 0.7
    check(comm, "sod", lambda ws, ns, s: reference.sod(ws, ns, s, outer, lr),
          outer=outer, outer_lr=lr)


@pytest.mark.parametrize("name,options", [
    ("bmuf", {"block_momentum": 0.0, "block_lr": 1.0}),
    ("sod", {"outer": "sgd", "outer_lr": 1.0}),
])
def test_identities_equal_bsp(comm, name, options):
    _, _, bsp_final, _ = run(comm, "bsp")
    _, _, other_final, _ = run(comm, name, **options)
    np.testing.assert_allclose(other_final, bsp_final, rtol=1e-12, atol=1e-12)


def test_tiny_chunks_give_the_same_average(comm):
    _, _, whole, _ = run(comm, "bmuf")
    old = settings.set("PSGD_MPI_CHUNK", 4)
    try:
        _, _, chunked, _ = run(comm, "bmuf")
    finally:
        settings.set("PSGD_MPI_CHUNK", old)
    np.testing.assert_array_equal(chunked, whole)


def test_float32_params_stay_float32(comm):
    sync = psgd.create("bmuf", [np.ones((4, 3), np.float32)], comm=comm)
    sync.params[0] += comm.rank
    sync.stop(1)
    assert sync.params[0].dtype == np.float32
    np.testing.assert_allclose(sync.params[0], 1 + (comm.size - 1) / 2, rtol=1e-6)


# syncgrad ------------------------------------------------------------------------
def least_squares_grad(w, X, y):
    """Mean-squared-error gradient over a batch (the per-sample mean)."""
    return X.T @ (X @ w - y) / len(y)


def test_syncgrad_equals_one_process_with_the_concatenated_batch(comm):
    rng = np.random.default_rng(7)
    dim, steps, lr = 6, 5, 0.1
    batches = [3 + (k % 3) for k in range(comm.size)]  # uneven b_k
    X = rng.standard_normal((steps, sum(batches), dim))
    y = rng.standard_normal((steps, sum(batches)))
    lo = sum(batches[:comm.rank])
    hi = lo + batches[comm.rank]
    w = np.zeros(dim)
    g = np.zeros(dim)
    sync = psgd.create("syncgrad", [w], grads=[g], comm=comm)
    w, g = sync.params[0], sync.grads[0]
    for t in range(steps):
        g[...] = least_squares_grad(w, X[t, lo:hi], y[t, lo:hi])
        assert sync.synchronize(hi - lo)
        w -= lr * g
    sync.stop(0)
    serial = np.zeros(dim)
    for t in range(steps):
        serial -= lr * least_squares_grad(serial, X[t], y[t])
    np.testing.assert_allclose(w, serial, rtol=1e-12, atol=1e-12)


def test_syncgrad_early_finisher_stays_identical_with_step(comm):
    w = np.zeros(4)
    sync = psgd.create("syncgrad", [w], grads=[np.zeros(4)], comm=comm)
    w, g = sync.params[0], sync.grads[0]
    steps = 2 + comm.rank  # rank k has 2 + k batches
    for t in range(steps - 1):
        g[...] = comm.rank + t
        assert sync.synchronize(1)
        w -= 0.5 * g
    g[...] = comm.rank + steps - 1

    def step():
        w[...] -= 0.5 * g

    sync.stop(1, step=step)
    everyone = np.empty((comm.size, 4))
    comm.Allgather(w, everyone)
    assert (everyone == everyone[0]).all()
    # replay: at round t the mean over ranks still holding a batch
    expected = 0.0
    for t in range(1 + comm.size):
        active = [k + t for k in range(comm.size) if t < 2 + k]
        if active:
            expected -= 0.5 * np.mean(active)
    np.testing.assert_allclose(w, expected)


def test_invalid_count_raises_on_every_rank(comm):
    sync = psgd.create("bsp", [np.zeros(3)], comm=comm)
    with pytest.raises(psgd.UsageError):
        sync.synchronize(-5 if comm.rank == comm.size - 1 else 3)
    sync.stop(0)


def test_layout_mismatch_raises_on_every_rank(comm):
    shape = (4,) if comm.rank == comm.size - 1 else (3,)
    with pytest.raises(psgd.UsageError, match="layout differs between rank 0 and rank %d"
                       % (comm.size - 1)):
        psgd.create("bsp", [np.zeros(shape)], comm=comm)
    # the communicator is still usable: nobody is left waiting
    assert comm.allreduce(1, op=MPI.SUM) == comm.size


def test_unknown_algorithm_raises_on_every_rank_listing_the_valid_ones(comm):
    with pytest.raises(psgd.UsageError, match="unknown algorithm 'bspp'; valid: bsp, bmuf"):
        psgd.create("bspp", [np.zeros(3)], comm=comm)
    assert comm.allreduce(1, op=MPI.SUM) == comm.size


def test_invalid_option_on_one_rank_raises_on_every_rank(comm):
    eta = 1.5 if comm.rank == comm.size - 1 else 0.5
    with pytest.raises(psgd.UsageError, match="rank %d: option block_momentum=1.5"
                       % (comm.size - 1)):
        psgd.create("bmuf", [np.zeros(3)], comm=comm, block_momentum=eta)
    assert comm.allreduce(1, op=MPI.SUM) == comm.size


def test_stats_are_averaged_with_the_model_weights(comm):
    sync = psgd.create("bsp", [np.zeros(3)], comm=comm, stats=[np.zeros(2)])
    sync.stats[0][...] = float(comm.rank)     # this rank's statistics after its block
    sync.stop(comm.rank + 1)
    n = sum(k + 1 for k in range(comm.size))
    expected = sum(k * (k + 1) for k in range(comm.size)) / n
    np.testing.assert_allclose(sync.stat_buffer.data, expected)


def _identical(comm, w):
    everyone = np.empty((comm.size,) + w.shape)
    comm.Allgather(np.ascontiguousarray(w), everyone)
    return bool((everyone == everyone[0]).all())


def _round(sync, comm, batches, stepping, moments):
    """One syncgrad round of `batches` on this rank; `stepping`: whether it
    passes step= to stop (else it misses the steps after its data ends)."""
    w, g = sync.params[0], sync.grads[0]

    def step():
        moments[...] = 0.9 * moments + g      # an optimizer with state
        w[...] -= 0.5 * moments

    for t in range(batches):
        g[...] = comm.rank + t
        assert sync.synchronize(1)
        step()
    sync.stop(0, step=step if stepping else None, state=[moments])


def test_syncgrad_repairs_a_rank_that_missed_steps_every_round_model_and_moments(comm):
    sync = psgd.create("syncgrad", [np.zeros(4)], grads=[np.zeros(4)], comm=comm)
    moments = np.zeros(4)
    last = comm.size - 1
    # Round 1: the last rank runs out first and stops without step=.
    _round(sync, comm, 1 if comm.rank == last else 3, comm.rank != last, moments)
    assert _identical(comm, sync.params[0]) and _identical(comm, moments)
    # Round 2: every other rank misses steps; the last rank, whole again
    # after its repair, must be the source.
    sync.begin_round()
    _round(sync, comm, 3 if comm.rank == last else 1, comm.rank == last, moments)
    assert _identical(comm, sync.params[0]) and _identical(comm, moments)


def test_syncgrad_says_so_when_every_rank_missed_steps(comm):
    sync = psgd.create("syncgrad", [np.zeros(4)], grads=[np.zeros(4)], comm=comm)
    w, g = sync.params[0], sync.grads[0]
    for t in range(comm.rank):
        g[...] = 1.0
        assert sync.synchronize(1)
        w -= g
    g[...] = 1.0
    with pytest.raises(psgd.UsageError, match="every rank stopped without step"):
        sync.stop(1)      # even the longest rank's last batch is never stepped
