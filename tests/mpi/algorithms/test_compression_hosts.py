"""The compressed sum in two levels (psgd/algorithms/two_level.py) with
hosts faked on one machine: pairs of ranks per host ({0, 1}, {2, 3}, {4}
at np 5: the leader form), hosts of two ranks each (the first 4 ranks at
np 5, the first 2 at np 2 and 3: the sliced form), the same through the
leader form, a host of three (np 3 and 5: the sliced form's ring), and
one rank per host. Against a serial replay of the
contract over host sums (tests/compression_replay.py, HostReplay): bit for
bit, on every rank. Then the totals on every rank, and the residuals as
state (checkpoint, reset_to)."""
import numpy as np
import pytest
from mpi4py import MPI

import psgd
from compression_replay import HostReplay
from compression_schedule import (OPTIONS, SHAPES, SIZE, agree_bitwise, checkpoint_round_trip,
                                  drive, initial, replay_syncgrad, replay_syncs)
from psgd import hierarchy, settings
from psgd.algorithms import two_level

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

# name: (the host of each rank, how many ranks take part, the setting)
SPLITS = {"pairs": (lambda rank: rank // 2, lambda P: P, "on"),
          "even pairs": (lambda rank: rank // 2, lambda P: P - P % 2, "on"),
          "even pairs, leader form": (lambda rank: rank // 2, lambda P: P - P % 2, "leader"),
          "threes": (lambda rank: rank // 3, lambda P: P - P % 3, "on"),
          "one per host": (lambda rank: rank, lambda P: P, "on")}


class Hosts:
    def __init__(self, comm, split, taking_part, form):
        self.split, self.form = split, form
        rank = comm.Get_rank()
        self.comm = comm.Split(0 if rank < taking_part(comm.Get_size()) else MPI.UNDEFINED, rank)

    def groups(self):
        """The ranks of each host, hosts in leader order."""
        groups = {}
        for k in range(self.comm.Get_size()):
            groups.setdefault(self.split(k), []).append(k)
        return sorted(groups.values())

    def sliced(self):
        sizes = {len(g) for g in self.groups()}
        return self.form != "leader" and len(sizes) == 1

    def replay(self, kind, block):
        return HostReplay(kind, self.groups(), SIZE, block, self.sliced())

    def expected_form(self):
        return two_level.SlicedSum if self.sliced() else two_level.TwoLevelSum


@pytest.fixture
def hosts(monkeypatch, request, comm):
    """Fakes hosts by request.param and forces two levels; None on a rank
    left out."""
    split, taking_part, form = SPLITS[request.param]
    real = hierarchy.create
    monkeypatch.setattr(hierarchy, "create", lambda comm, host=None: real(
        comm, split(comm.Get_rank())))
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", form)
    h = Hosts(comm, split, taking_part, form)
    yield h if h.comm != MPI.COMM_NULL else None
    if h.comm != MPI.COMM_NULL:
        h.comm.Free()
    settings.set("PSGD_COMPRESSION_HIERARCHY", old)


def replay(size, hosts, kind, block):
    """The models every sync leaves, from the contract over host sums."""
    r = hosts.replay(kind, block)
    flat = np.concatenate([a.ravel() for a in initial()])
    out = []
    for ns, ws in replay_syncs(size):
        s = out[-1] if out else flat
        for k in range(size):
            c = np.subtract(ws[k], s)
            c *= np.float32(ns[k] / sum(ns))
            r.e[k] += c
        mean = r.sum() + s
        ws[:] = [mean.copy() for _ in range(size)]
        out.append(mean)
    return out


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_bsp_replays_the_contract_over_host_sums(hosts, kind):
    if hosts is None:
        return
    comm = hosts.comm
    sync, seen = drive(comm, "bsp", compression=kind, compression_block=64)
    assert type(sync.compressed.striped) is hosts.expected_form()
    expected = replay(comm.Get_size(), hosts, kind, 64)
    agree_bitwise(comm, seen)
    assert len(seen) == len(expected)
    for t, (w, x) in enumerate(zip(seen, expected)):
        assert w.tobytes() == x.tobytes(), (kind, t, np.abs(w - x).max())
    sync.close()


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_syncgrad_replays_the_contract_and_every_rank_gets_the_count(hosts, kind):
    if hosts is None:
        return
    replay_syncgrad(hosts.comm, kind, hosts.replay(kind, 50))


@pytest.mark.parametrize("hosts", ["pairs", "even pairs"], indirect=True)
def test_a_bad_count_on_rank_1_fails_every_rank(hosts):
    """The header's bad flag, raised by rank 1 (no leader; no slice's
    owner on the other host), reaches every rank."""
    if hosts is None:
        return
    grads = [np.ones(s, np.float32) for s in SHAPES]
    sync = psgd.create("syncgrad", initial(), comm=hosts.comm, grads=grads, compression="1bit")
    with pytest.raises(psgd.UsageError, match="n_k|sample count"):
        sync.synchronize(-1 if hosts.comm.Get_rank() == 1 else 1)
    sync.close()


@pytest.mark.parametrize("hosts", ["pairs", "even pairs"], indirect=True)
def test_an_overflow_reaches_every_rank(hosts):
    """Found by one rank's encoding (a leader's, or a slice owner's); the
    flag reaches every rank."""
    if hosts is None:
        return
    comm = hosts.comm
    sync = psgd.create("bsp", initial(), comm=comm, compression="fp16")
    sync.synchronize(1)
    if comm.Get_rank() == comm.Get_size() - 1:
        sync.buffer.data[-1] += 1e6
    with pytest.raises(psgd.UsageError, match=r"compression=fp16: sync 2 has a value beyond"):
        sync.synchronize(1)
    sync.close()


@pytest.mark.parametrize("hosts", ["pairs", "even pairs"], indirect=True)
def test_holders_keep_the_residuals_through_a_checkpoint_and_reset_to_zeroes_them(hosts):
    """Leaders hold them in the leader form, every rank its slice's in the
    sliced form."""
    if hosts is None:
        return
    options = dict(OPTIONS["bmuf"], compression="1bit", compression_block=32)
    rank = hosts.comm.Get_rank()
    leader = rank == 0 or hosts.split(rank) != hosts.split(rank - 1)
    checkpoint_round_trip(hosts.comm, "bmuf", options, holds=leader or hosts.sliced())


@pytest.mark.parametrize("hosts", list(SPLITS), indirect=True)
def test_auto_goes_two_level_only_across_hosts_with_several_ranks_on_one(hosts):
    if hosts is None:
        return
    settings.set("PSGD_COMPRESSION_HIERARCHY", "auto")
    sync = psgd.create("bsp", initial(), comm=hosts.comm, compression="fp16")
    groups = hosts.groups()
    if 1 < len(groups) < hosts.comm.Get_size():
        sliced = len({len(g) for g in groups}) == 1
        wanted = two_level.SlicedSum if sliced else two_level.TwoLevelSum
    else:
        wanted = psgd.compression.StripedSum
    assert type(sync.compressed.striped) is wanted
    sync.close()


def test_a_bad_setting_is_one_line_on_every_rank(comm):
    old = settings.set("PSGD_COMPRESSION_HIERARCHY", "sometimes")
    try:
        with pytest.raises(psgd.UsageError, match=r"PSGD_COMPRESSION_HIERARCHY='sometimes': "
                           r"must be one of auto \| on \| leader \| off"):
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
