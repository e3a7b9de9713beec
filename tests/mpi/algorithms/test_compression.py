"""Compressed syncs of bsp, bmuf, sod and syncgrad under mpirun against a
serial replay of the contract (tests/compression_replay.py), with uneven
sample counts and a rank out of data: bit for bit, on every rank. Then the
residuals as algorithm state (checkpoint, reset_to), compression_start's
plain syncs, and an fp16 overflow named on every rank."""
import numpy as np
import pytest

import psgd
from compression_replay import Replay
from compression_schedule import (KINDS, OPTIONS, OUTER_LR, SIZE, agree_bitwise,
                                  checkpoint_round_trip, drive, initial, replay_syncgrad,
                                  replay_syncs, residuals)
from psgd import kernels
from psgd.errors import UsageError

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

def replay(name, size, kind, block):
    """The models every sync leaves, from the contract."""
    r = Replay(kind, size, SIZE, np.float32, block)
    flat = np.concatenate([a.ravel() for a in initial()])
    w_g, D, start = flat.copy(), np.zeros_like(flat), 0.0
    eta = 1.0 - 1.0 / size
    out = []
    for ns, ws in replay_syncs(size):
        if name == "bmuf":
            s = w_g + np.float32(start) * D
        else:
            s = w_g
        for k in range(size):
            c = np.subtract(ws[k], s)
            c *= np.float32(ns[k] / sum(ns))
            r.e[k] += c
        G = r.sum()
        mean = G + s
        if name == "bsp":
            w_g = mean
        elif name == "bmuf":                    # the filter on G (zeta = 1, Nesterov)
            D = D * np.float32(eta) + G
            w_g = w_g + D
            mean = D * np.float32(eta) + w_g
            start = eta
        else:                                   # sod, outer sgd
            g = np.subtract(w_g, mean)
            w_g = w_g.copy()
            kernels.axpy(w_g, -OUTER_LR, g)
            mean = w_g.copy()
        ws[:] = [mean.copy() for _ in range(size)]
        out.append(mean)
    return out


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
@pytest.mark.parametrize("kind", KINDS)
def test_collective_algorithms_replay_the_contract(comm, name, kind):
    block = 64
    sync, seen = drive(comm, name, compression=kind, compression_block=block, **OPTIONS[name])
    expected = replay(name, comm.Get_size(), kind, block)
    agree_bitwise(comm, seen)
    assert len(seen) == len(expected)
    for t, (w, x) in enumerate(zip(seen, expected)):
        assert w.tobytes() == x.tobytes(), (name, kind, t, np.abs(w - x).max())
    # s is read where the algorithm keeps it (bsp's start model, sod's w_g)
    # or made on the way (bmuf): no model-sized scratch
    assert sync.compressed._scratch is None
    sync.close()


@pytest.mark.parametrize("kind", KINDS)
def test_syncgrad_replays_the_contract(comm, kind):
    replay_syncgrad(comm, kind, Replay(kind, comm.Get_size(), SIZE, np.float32, 50))


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_checkpoint_keeps_the_residuals_and_reset_to_zeroes_them(comm, name):
    options = dict(OPTIONS[name], compression="1bit", compression_block=32)
    checkpoint_round_trip(comm, name, options, holds=True)


def test_a_checkpoint_without_residuals_starts_them_at_zero(comm):
    sync, _ = drive(comm, "bmuf", syncs=1, compression="fp16")
    state = {k: v for k, v in sync.state_dict().items() if not k.startswith("residual")}
    sync.load_state_dict(state)
    assert all(not v.any() for v in residuals(sync).values())
    sync.close()


def test_compression_start_syncs_go_plain(comm):
    plain, plain_seen = drive(comm, "bmuf", syncs=3)
    warm, warm_seen = drive(comm, "bmuf", syncs=3, compression="1bit", compression_start=2)
    assert [w.tobytes() for w in warm_seen[:2]] == [w.tobytes() for w in plain_seen[:2]]
    assert warm_seen[2].tobytes() != plain_seen[2].tobytes()
    plain.close()
    warm.close()


def test_fp16_overflow_names_the_sync_on_every_rank(comm):
    sync = psgd.create("bsp", initial(), comm=comm, compression="fp16")
    for t in range(2):
        sync.synchronize(1)
    if comm.Get_rank() == comm.Get_size() - 1:
        sync.buffer.data[-1] += 1e6
    with pytest.raises(UsageError, match=r"compression=fp16: sync 3 has a value beyond fp16"):
        sync.synchronize(1)
    sync.close()


def test_a_plain_checkpoint_resumes_compressed(comm):
    """bsp's start point, absent from a checkpoint taken without
    compression, is the model the checkpoint was taken on."""
    plain, _ = drive(comm, "bsp", syncs=2)
    state, model = plain.state_dict(), [v.copy() for v in plain.params]
    assert state == {}
    resumed = psgd.create("bsp", model, comm=comm, compression="bf16")
    resumed.load_state_dict(state)
    assert resumed.start_model.data.tobytes() == resumed.buffer.data.tobytes()
    for obj in (plain, resumed):
        obj.close()


PIECED = [("bmuf", {}), ("bmuf", {"compression_momentum": "local"}), ("bsp", {}),
          ("sod", {})]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name,options", PIECED)
def test_piece_by_piece_gives_the_bits_of_whole_passes(comm, kind, name, options):
    """An algorithm's passes before and after the sum run on each piece of
    the striped sum as the quantizer meets it (psgd/compression/stripes.py):
    over a buffer of several pieces a stripe, the bits of the whole passes
    before and after the sum (the sum told to take no pieces)."""
    rank, n = comm.Get_rank(), 700001
    start = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    syncs = []
    for whole in (False, True):
        sync = psgd.create(name, [start.copy()], comm=comm, compression=kind,
                           compression_block=64, **options)
        if whole:
            pieced = sync.compressed.sum

            def at_once(out, at_sync, before=None, after=None, **kw):
                before(0, out.size)
                result = pieced(out, at_sync, **kw)
                after(0, out.size)
                return result
            sync.compressed.sum = at_once
        seen = []
        for t in range(3):
            sync.buffer.data[:] += np.random.default_rng([rank, t]).standard_normal(n).astype(
                np.float32) * np.float32(1e-2)
            sync.synchronize(10 + rank)
            seen.append(sync.buffer.data.tobytes())
        syncs.append(seen)
        sync.close()
    assert comm.allgather(syncs[0] == syncs[1]) == [True] * comm.Get_size()
