"""The compressed sum in two levels (psgd/algorithms/two_level.py) with
hosts faked on one machine: pairs of ranks per host ({0, 1}, {2, 3}, {4}
at np 5) and one rank per host. Against a serial replay of the contract
over host sums (the striped sum among host leaders, each leader's u being
its residual plus its host's contributions, rank ascending): bit for bit,
on every rank. Then the totals on every rank, and the leaders' residuals
as state (checkpoint, reset_to)."""
import numpy as np
import pytest

import psgd
from compression_replay import Replay
from compression_schedule import (OPTIONS, SHAPES, SIZE, agree_bitwise, checkpoint_round_trip,
                                  counts, drive, initial, replay_syncs, step)
from psgd import hierarchy, kernels, settings
from psgd.algorithms import two_level

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

SPLITS = {"pairs": lambda rank: rank // 2, "one per host": lambda rank: rank}


@pytest.fixture
def hosts(monkeypatch, request):
    """Fakes hosts by request.param and forces two levels."""
    split = SPLITS[request.param]
    real = hierarchy.create
    monkeypatch.setattr(hierarchy, "create", lambda comm, host=None: real(
        comm, split(comm.Get_rank())))
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", "on")
    yield split
    settings.set("PSGD_COMPRESSION_HIERARCHY", old)


def host_list(split, size):
    """The ranks of each host, hosts in leader order."""
    groups = {}
    for k in range(size):
        groups.setdefault(split(k), []).append(k)
    return sorted(groups.values())


def replay(name, size, split, kind, block):
    """The models every sync leaves, from the contract over host sums."""
    groups = host_list(split, size)
    r = Replay(kind, len(groups), SIZE, np.float32, block)
    flat = np.concatenate([a.ravel() for a in initial()])
    out = []
    for ns, ws in replay_syncs(size):
        s = out[-1] if out else flat
        for h, ranks in enumerate(groups):
            for k in ranks:
                c = np.subtract(ws[k], s)
                c *= np.float32(ns[k] / sum(ns))
                r.e[h] += c
        mean = r.sum() + s
        ws[:] = [mean.copy() for _ in range(size)]
        out.append(mean)
    return out


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_bsp_replays_the_contract_over_host_sums(comm, hosts, kind):
    sync, seen = drive(comm, "bsp", compression=kind, compression_block=64)
    assert isinstance(sync.compressed.striped, two_level.TwoLevelSum)
    expected = replay("bsp", comm.Get_size(), hosts, kind, 64)
    agree_bitwise(comm, seen)
    assert len(seen) == len(expected)
    for t, (w, x) in enumerate(zip(seen, expected)):
        assert w.tobytes() == x.tobytes(), (kind, t, np.abs(w - x).max())
    sync.close()


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_syncgrad_replays_the_contract_and_every_rank_gets_the_count(comm, hosts, kind):
    size, k = comm.Get_size(), comm.Get_rank()
    groups = host_list(hosts, size)
    grads = [np.zeros(s, np.float32) for s in SHAPES]
    sync = psgd.create("syncgrad", initial(), comm=comm, grads=grads, compression=kind,
                       compression_block=50)
    r = Replay(kind, len(groups), SIZE, np.float32, 50)
    plans = [counts(j, size) for j in range(size)]
    flat = sync.grad_buffer.data
    for t in range(5):
        bs = [p[t] if t < len(p) else 0 for p in plans]
        flat[...] = step(k, t) * 100 if bs[k] else np.nan    # out of data: ignored
        assert sync.synchronize(bs[k])
        for h, ranks in enumerate(groups):
            for j in ranks:
                if bs[j]:
                    kernels.axpy(r.e[h], bs[j], step(j, t) * 100)
        G = r.sum()
        # the division by the total count: wrong on any rank the count missed
        G /= np.float32(max(sum(bs), 1))
        same = flat.tobytes() == G.tobytes()
        assert comm.allgather(same) == [True] * size, (kind, t)
    sync.stop(0)
    sync.close()


@pytest.mark.parametrize("hosts", ["pairs"], indirect=True)
def test_a_bad_count_on_a_non_leader_fails_every_rank(comm, hosts):
    """The header's bad flag, raised by rank 1 (no leader), reaches every rank."""
    grads = [np.ones(s, np.float32) for s in SHAPES]
    sync = psgd.create("syncgrad", initial(), comm=comm, grads=grads, compression="1bit")
    with pytest.raises(psgd.UsageError, match="n_k|sample count"):
        sync.synchronize(-1 if comm.Get_rank() == 1 else 1)
    sync.close()


@pytest.mark.parametrize("hosts", ["pairs"], indirect=True)
def test_an_overflow_reaches_every_rank(comm, hosts):
    """Found by a leader's encoding; the flag reaches the non-leaders too."""
    sync = psgd.create("bsp", initial(), comm=comm, compression="fp16")
    sync.synchronize(1)
    if comm.Get_rank() == comm.Get_size() - 1:
        sync.buffer.data[-1] += 1e6
    with pytest.raises(psgd.UsageError, match=r"compression=fp16: sync 2 has a value beyond"):
        sync.synchronize(1)
    sync.close()


@pytest.mark.parametrize("hosts", ["pairs"], indirect=True)
def test_leaders_keep_the_residuals_through_a_checkpoint_and_reset_to_zeroes_them(comm, hosts):
    options = dict(OPTIONS["bmuf"], compression="1bit", compression_block=32)
    rank = comm.Get_rank()
    leader = rank == 0 or hosts(rank) != hosts(rank - 1)
    checkpoint_round_trip(comm, "bmuf", options, holds=leader)


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
def test_auto_goes_two_level_only_across_hosts_with_several_ranks_on_one(comm, hosts):
    settings.set("PSGD_COMPRESSION_HIERARCHY", "auto")
    sync = psgd.create("bsp", initial(), comm=comm, compression="fp16")
    groups = host_list(hosts, comm.Get_size())
    wanted = 1 < len(groups) < comm.Get_size()
    assert isinstance(sync.compressed.striped, two_level.TwoLevelSum) == wanted
    sync.close()


def test_a_bad_setting_is_one_line_on_every_rank(comm):
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", "sometimes")
    try:
        with pytest.raises(psgd.UsageError, match=r"PSGD_COMPRESSION_HIERARCHY='sometimes': "
                           r"must be one of auto \| on \| off"):
            psgd.create("bsp", initial(), comm=comm, compression="1bit")
    finally:
        settings.set("PSGD_COMPRESSION_HIERARCHY", old)


def test_ranks_that_disagree_on_the_setting_are_told_before_any_exchange(comm):
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", "on" if comm.Get_rank() == 0 else "off")
    try:
        with pytest.raises(psgd.UsageError, match="PSGD_COMPRESSION_HIERARCHY"):
            psgd.create("bsp", initial(), comm=comm, compression="1bit")
    finally:
        settings.set("PSGD_COMPRESSION_HIERARCHY", old)
