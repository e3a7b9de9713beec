"""compression_momentum = local (docs/algorithms.md, "Momentum shares"):
bmuf's and sod's compressed syncs sum each rank's step from its share of
the momentum, syncgrad's each rank's step of its own optimizer. Under
mpirun against a serial replay (uneven counts, a rank out of data), bit
for bit on every rank; the shares as per-worker state
(checkpoint, reset_to, a checkpoint taken under global); the switch after
compression_start's plain syncs; the options refused in one line."""
import numpy as np
import pytest

import psgd
from compression_replay import Replay
from compression_schedule import (KINDS, OUTER_LR, SHAPES, SIZE, agree_bitwise,
                                  checkpoint_round_trip, counts, drive, initial, replay_syncs,
                                  step)
from psgd import kernels
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

LOCAL = {"bmuf": {"compression_momentum": "local"},
         "sod": {"compression_momentum": "local", "outer_lr": OUTER_LR}}
MU = 0.9        # sod's default outer momentum


def replay_bmuf(size, kind, block):
    r = Replay(kind, size, SIZE, np.float32, block)
    w_g = np.concatenate([a.ravel() for a in initial()])
    D, start, eta = np.zeros_like(w_g), 0.0, 1.0 - 1.0 / size
    shares = [np.zeros_like(w_g) for _ in range(size)]
    out = []
    for ns, ws in replay_syncs(size):
        s = w_g.copy()
        kernels.axpy(s, start, D)
        for k in range(size):
            c = np.subtract(ws[k], s)
            c *= np.float32(ns[k] / sum(ns))
            shares[k] *= np.float32(eta)
            shares[k] += c                      # block_lr 1
            r.e[k] += shares[k]
        D = r.sum()
        w_g = w_g + D
        w = w_g.copy()
        kernels.axpy(w, eta, D)
        start = eta
        ws[:] = [w.copy() for _ in range(size)]
        out.append(w)
    return out


def replay_sod(size, kind, block, outer):
    r = Replay(kind, size, SIZE, np.float32, block)
    w_g = np.concatenate([a.ravel() for a in initial()])
    shares = [np.zeros_like(w_g) for _ in range(size)]
    out = []
    for ns, ws in replay_syncs(size):
        for k in range(size):
            c = np.subtract(ws[k], w_g)
            c *= np.float32(ns[k] / sum(ns))
            d = c
            if outer != "sgd":
                shares[k] *= np.float32(MU)
                shares[k] += c
                if outer == "nesterov":
                    kernels.axpy(c, MU, shares[k])
                else:
                    d = shares[k]
            r.e[k] += d
        w_g = w_g.copy()
        kernels.axpy(w_g, OUTER_LR, r.sum())
        ws[:] = [w_g.copy() for _ in range(size)]
        out.append(w_g)
    return out


CASES = [("bmuf", None), ("sod", "nesterov"), ("sod", "momentum"), ("sod", "sgd")]


@pytest.mark.parametrize("name,outer", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_local_momentum_replays_its_equations(comm, name, outer, kind):
    block, size = 64, comm.Get_size()
    options = dict(LOCAL[name], **({"outer": outer} if outer else {}))
    sync, seen = drive(comm, name, compression=kind, compression_block=block, **options)
    expected = (replay_bmuf(size, kind, block) if name == "bmuf" else
                replay_sod(size, kind, block, outer))
    agree_bitwise(comm, seen)
    assert len(seen) == len(expected)
    for t, (w, x) in enumerate(zip(seen, expected)):
        assert w.tobytes() == x.tobytes(), (name, outer, kind, t, np.abs(w - x).max())
    sync.close()


@pytest.mark.parametrize("name", ["bmuf", "sod"])
def test_shares_are_checkpointed_and_reset_to_zeroes_them(comm, name):
    options = dict(LOCAL[name], compression="1bit", compression_block=32)
    checkpoint_round_trip(comm, name, options, holds=True)
    sync, _ = drive(comm, name, syncs=2, **options)
    assert sync.state_dict()["momentum_share"].any()
    sync.reset_to(initial() if comm.Get_rank() == 0 else None)
    assert not sync.state_dict()["momentum_share"].any()
    sync.close()


@pytest.mark.parametrize("name", ["bmuf", "sod"])
def test_a_checkpoint_under_global_gives_each_rank_an_equal_share(comm, name):
    options = {"compression": "fp16", **({"outer_lr": OUTER_LR} if name == "sod" else {})}
    plain, _ = drive(comm, name, syncs=3, **options)
    state = plain.state_dict()
    assert "momentum_share" not in state
    local = psgd.create(name, [v.copy() for v in plain.params], comm=comm, **options,
                        compression_momentum="local")
    local.load_state_dict(state)
    share = local.state_dict()["momentum_share"]
    momentum = state["block_momentum"] if name == "bmuf" else -state["velocity"]
    total = comm.allreduce(share.astype(np.float64))
    np.testing.assert_allclose(total, momentum, rtol=1e-5, atol=1e-7)
    assert momentum.any()
    for obj in (plain, local):
        obj.close()


@pytest.mark.parametrize("name", ["bmuf", "sod"])
def test_plain_syncs_keep_the_shares_of_the_momentum_they_build(comm, name):
    """compression_start = 3: after the plain syncs the shares sum to the
    momentum (bmuf's D, sod's -v), which the compressed syncs go on from."""
    sync, _ = drive(comm, name, syncs=3, compression="1bit", compression_start=3,
                    **LOCAL[name])
    state = sync.state_dict()
    momentum = state["block_momentum"] if name == "bmuf" else -state["velocity"]
    total = comm.allreduce(state["momentum_share"].astype(np.float64))
    assert momentum.any()
    np.testing.assert_allclose(total, momentum, rtol=1e-4, atol=1e-6)
    sync.close()


@pytest.mark.parametrize("name,options,message", [
    ("bmuf", {}, "bmuf: compression_momentum=local applies to compressed sums; "
                 "compression is none"),
    ("sod", {"compression": "1bit", "outer": "adam"},
     "sod: compression_momentum=local needs a linear outer step"),
    ("syncgrad", {}, "syncgrad: compression_momentum=local applies to compressed sums"),
])
def test_local_momentum_is_refused_where_it_cannot_apply(comm, name, options, message):
    with pytest.raises(UsageError, match=message):
        psgd.create(name, initial(), comm=comm, compression_momentum="local", **options)


class Moments:
    """A rank's own optimizer with state, not linear in g (as Adam): what
    syncgrad's local shares must keep per rank."""
    LR = np.float32(0.05)

    def __init__(self):
        self.m = np.zeros(SIZE, np.float32)

    def step(self, w, g):
        self.m *= np.float32(0.5)
        self.m += g
        w -= self.LR * self.m / (np.abs(self.m) + np.float32(1))


def replay_syncgrad(size, kind, block, plans):
    """w after every sync: u_k = rank k's step on its own gradient, then
    the compressed sum of b_k u_k over b, added to w."""
    r = Replay(kind, size, SIZE, np.float32, block)
    w = np.concatenate([a.ravel() for a in initial()])
    optimizers = [Moments() for _ in range(size)]
    out, t = [], 0
    while any(t < len(p) for p in plans):
        bs = [p[t] if t < len(p) else 0 for p in plans]
        for j in range(size):
            if bs[j]:
                moved = w.copy()
                optimizers[j].step(moved, step(j, t))
                kernels.axpy(r.e[j], bs[j], np.subtract(moved, w))
        G = r.sum()
        G /= np.float32(sum(bs))
        w = w.copy()
        w += G
        out.append(w)
        t += 1
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_syncgrad_local_sums_each_ranks_optimizer_steps(comm, kind):
    """Each rank steps its own optimizer on its own gradient, the sync sums
    the steps: bit for bit against the replay on every rank, a rank out of
    data early (stop: it applies the others' steps and steps nothing)."""
    size, k = comm.Get_size(), comm.Get_rank()
    grads = [np.zeros(s, np.float32) for s in SHAPES]
    sync = psgd.create("syncgrad", initial(), comm=comm, grads=grads, compression=kind,
                       compression_block=50, compression_momentum="local")
    plans = [counts(j, size) for j in range(size)]
    mine, optimizer = Moments(), plans[k]
    w, g = sync.buffer.data, sync.grad_buffer.data
    seen = []
    for t, b_k in enumerate(optimizer):
        g[...] = step(k, t)
        assert sync.synchronize_step(b_k, lambda: mine.step(w, g))
        seen.append(w.copy())
    sync.stop(0, step=lambda: pytest.fail("a rank out of data took an optimizer step"))
    expected = replay_syncgrad(size, kind, 50, plans)
    assert comm.allgather(w.tobytes()) == [expected[-1].tobytes()] * size, kind
    for t, (got, want) in enumerate(zip(seen, expected)):
        assert got.tobytes() == want.tobytes(), (kind, t, np.abs(got - want).max())
    sync.close()


def test_syncgrad_local_stop_with_a_last_batch_needs_its_step(comm):
    sync = psgd.create("syncgrad", initial(), comm=comm,
                       grads=[np.zeros(s, np.float32) for s in SHAPES], compression="1bit",
                       compression_momentum="local")
    with pytest.raises(UsageError, match="stop\\(b_k=3\\) needs step= for the last batch"):
        sync.stop(3)
    sync.stop(0)
    sync.close()
