"""What the algorithms tell the recorder (psgd/trace.py) under mpirun: one
span per sync on every worker, one per served sync on the server with the
worker and its staleness, the parts only with detail; and the clock offsets
to rank 0, measured."""
import time

import numpy as np
import pytest

import psgd
from psgd import trace

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]


@pytest.fixture
def recorder():
    def install(detail):
        rec = trace.Recorder(detail=detail)
        trace.install(rec)
        return rec
    yield install
    trace.install(None)


def params():
    return [np.ones((4, 3)), np.zeros(3)]


@pytest.mark.parametrize("detail", [False, True])
def test_every_collective_sync_is_a_span_keyed_by_its_number(comm, recorder, detail):
    rec = recorder(detail)
    obj = psgd.create("bsp", params(), comm=comm)
    for _ in range(3):
        obj.synchronize(5)
    obj.stop(0)
    obj.close()
    spans = rec.take()
    syncs = [a for n, _, _, a in spans if n == trace.SYNC]
    assert syncs == [{"sync": k, "collective": True} for k in range(3)]
    parts = {n for n, *_ in spans} - {trace.SYNC}
    assert parts == ({"count", "exchange + update", trace.COMPUTE} if detail else set())


def test_every_syncgrad_sync_is_a_span_keyed_by_its_number(comm, recorder):
    """syncgrad's sync is its own (the count rides in the sum): it is
    recorded all the same, or the straggler line never sees it."""
    rec = recorder(True)
    obj = psgd.create("syncgrad", params(), comm=comm, grads=params())
    for _ in range(3):
        obj.synchronize(5)
    obj.stop(0, step=lambda: None)
    obj.close()
    spans = rec.take()
    assert [a for n, _, _, a in spans if n == trace.SYNC] == [
        {"sync": k, "collective": True} for k in range(3)]
    assert {n for n, *_ in spans} - {trace.SYNC} == {"exchange + update", trace.COMPUTE}


def test_the_server_records_whom_it_served_and_how_stale(comm, recorder):
    rec = recorder(True)
    obj = psgd.create("easgd", params(), comm=comm)
    if comm.rank == 0:
        obj.run()
    else:
        for _ in range(3):
            obj.synchronize(5)
        obj.stop(0)
    log = obj.log if comm.rank == 0 else None
    obj.close()
    spans = rec.take()
    if comm.rank == 0:
        served = [a for n, _, _, a in spans if n == trace.SERVE]
        assert [(a["worker"], a["sync"], a["staleness"]) for a in served] == [
            (s.rank, s.order, s.staleness) for s in log]
        assert len(served) == 3 * (comm.size - 1)
    else:
        syncs = [a for n, _, _, a in spans if n == trace.SYNC]
        assert syncs == [{"sync": k, "collective": False} for k in range(3)]


def test_the_clock_offsets_are_measured(comm, monkeypatch):
    # every rank's clock 100s per rank ahead of rank 0's
    monkeypatch.setattr(trace, "now", lambda: time.time() + 100.0 * comm.rank)
    offset = trace.clock_offsets(comm)
    assert offset == pytest.approx(100.0 * comm.rank, abs=0.5)


@pytest.mark.parametrize("name", ["bsp", "easgd"])
def test_create_with_a_timeline_writes_every_ranks_track_at_close(comm, tmp_path, name):
    import json
    path = comm.bcast(str(tmp_path / "t.json") if comm.rank == 0 else None)
    obj = psgd.create(name, params(), comm=comm, timeline=path)
    if obj.role == "server":
        obj.run()
    else:
        obj.synchronize(5)
        obj.stop(0)
    obj.close()
    assert trace.recorder is None
    if comm.rank == 0:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        tracks = sorted(e["tid"] for e in events if e["name"] == "thread_name")
        assert tracks == list(range(comm.size))
        syncs = {e["tid"] for e in events if e["name"] == "sync"}
        assert syncs == set(range(1 if name == "easgd" else 0, comm.size))


def test_a_timeline_that_cannot_be_written_fails_on_every_rank(comm, tmp_path):
    folder = comm.bcast(str(tmp_path) if comm.rank == 0 else None)
    with pytest.raises(psgd.UsageError, match="is a directory"):
        psgd.create("bsp", params(), comm=comm, timeline=folder)
    assert trace.recorder is None


def test_spans_reach_rank_0_whole_and_on_its_clock(comm):
    mine = [(trace.SYNC, 10.0, 11.0, {"sync": comm.rank, "collective": True}),
            (trace.SERVE, 12.0, 13.0, {"worker": 1, "sync": 7, "staleness": 2}),
            (trace.COMPUTE, 13.0, 14.0, None)][:comm.rank + 1]
    spans = trace.gather(comm, mine, offset=float(comm.rank))
    if comm.rank == 0:
        assert len(spans) == comm.size
        for r, got in enumerate(spans):
            sent = [(n, s, e, a) for n, s, e, a in
                    [(trace.SYNC, 10.0, 11.0, {"sync": r, "collective": True}),
                     (trace.SERVE, 12.0, 13.0, {"worker": 1, "sync": 7, "staleness": 2}),
                     (trace.COMPUTE, 13.0, 14.0, None)][:r + 1]]
            assert got == [(n, s - r, e - r, a) for n, s, e, a in sent]
    else:
        assert spans is None
