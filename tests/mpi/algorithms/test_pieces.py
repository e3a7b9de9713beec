"""asgd's and masgd's model messages in pieces (psgd/pieces.py): the
server updates piece j of a sync while the later ones still travel. With
the 23-element test model cut into pieces of 1, 5 and 7 elements (uneven,
across tensors) and in one message, every center and every worker model
equals the serial replay of docs/algorithms.md; so do dc (each piece
corrected with the mean square the worker sent first), held replies and
shards in pieces, the worker's work under a turn in small pieces and a
reply taken as it lands.
easgd keeps one message.
A failing update in the middle of a sync ends every rank without a hang,
and ranks that disagree on the piece size fail at create with one line."""
import numpy as np
import pytest

import psgd
import reference
from psgd import mpi, settings
from psgd.errors import ProtocolError, UsageError
from server_plans import SIZE, check_replay

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(60)]

REPLAYS = {"easgd": lambda x, log, f: reference.easgd(x, log, f, 0.5),
           "asgd": lambda x, log, f: reference.asgd(x, log, f, 1.0),
           "masgd": lambda x, log, f: reference.asgd(x, log, f, 0.1, 0.9, "worker")}
OPTIONS = {"easgd": {"alpha": 0.5}, "asgd": {}, "masgd": {}}


class Pieces:
    """Model messages of `piece` elements in the block; counts the pieces
    the server's side of a sync receives."""

    def __init__(self, piece):
        self.piece, self.received = piece, 0

    def __enter__(self):
        self.old = settings.set("PSGD_MPI_SERVER_PIECE", self.piece)
        self.irecv_part = mpi.Exchange.irecv_part
        outer = self

        def counting(exchange, *args, **kwargs):
            outer.received += 1
            return outer.irecv_part(exchange, *args, **kwargs)
        mpi.Exchange.irecv_part = counting
        return self

    def __exit__(self, *exc):
        mpi.Exchange.irecv_part = self.irecv_part
        settings.set("PSGD_MPI_SERVER_PIECE", self.old)


@pytest.mark.parametrize("piece", [0, 1, 5, 7])
@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_replay_in_pieces(comm, name, piece):
    with Pieces(piece) as p:
        obj, log, _ = check_replay(comm, name, REPLAYS[name], **OPTIONS[name])
    if obj.role == "server":
        per_sync = 1 if piece == 0 else -(-SIZE // piece)
        assert p.received == per_sync * len(log)     # the piece path, not one message


def test_easgd_keeps_one_message(comm):
    with Pieces(5) as p:
        obj, log, _ = check_replay(comm, "easgd", REPLAYS["easgd"], **OPTIONS["easgd"])
    assert p.received == 0 and not obj.in_pieces


def test_dc_in_pieces(comm):
    """dc corrects each piece with the whole delta's mean square, which the
    worker sends first: the server takes the delta piece by piece."""
    with Pieces(5) as p:
        obj, log, _ = check_replay(comm, "asgd", lambda x, log, f: reference.asgd(
            x, log, f, 1.0, None, "worker", "dc", 0.5),
            staleness_compensation="dc", dc_lambda=0.5)
    if obj.role == "server":
        assert p.received == -(-SIZE // 5) * len(log)


@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_held_replies_in_pieces(comm, name):
    from device_util import load
    servers = load("algorithms/test_servers.py")
    with Pieces(5):
        servers.check_barrier(comm, name, {}, 1)


@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_shards_in_pieces(comm, name):
    if comm.size < 3:
        pytest.skip("two servers need three ranks")
    from shard_plans import check_sharded_replay
    with Pieces(4):
        check_sharded_replay(comm, name, REPLAYS[name], 2, **OPTIONS[name])


@pytest.mark.parametrize("work_piece", [3, 1])
@pytest.mark.parametrize("servers", [2, 3])
def test_the_work_under_a_turn_in_small_pieces(comm, monkeypatch, servers, work_piece):
    """The other turns' deltas and the pulled shards copied into w_k, run
    between polls in pieces of `work_piece` elements (WORK_PIECE), and
    the first turn's delta formed piece by piece as it is sent: the replay
    holds at every piece boundary."""
    if comm.size < servers + 1:
        pytest.skip("%d servers need %d ranks" % (servers, servers + 1))
    from psgd.algorithms import server_worker
    from shard_plans import check_sharded_replay
    monkeypatch.setattr(server_worker, "WORK_PIECE", work_piece)
    with Pieces(5):
        check_sharded_replay(comm, "asgd", REPLAYS["asgd"], servers)


@pytest.mark.parametrize("name", ["asgd", "masgd", "easgd"])
def test_a_reply_taken_piece_by_piece_as_it_lands(comm, monkeypatch, name):
    """The last turn's reply goes into w_k a piece at a time as it lands
    (ServerWorker.landing; easgd's pieces are forced here, it sends one
    message within a host). Servers that send each reply piece 3 ms after
    the last make the worker's final wait find replies partly in: the
    replay holds, and some final wait took its pieces in several polls."""
    if comm.size < 3:
        pytest.skip("two servers need three ranks")
    import time
    from psgd import pieces
    from psgd.algorithms import server_worker
    from shard_plans import check_sharded_replay
    waits = []      # per final wait: the pieces each poll took
    if name == "easgd":
        def two(exchange, *args, **kwargs):
            exchange.spans_hosts()      # collective: every rank asks, as the real one does
            return 2
        monkeypatch.setattr(pieces, "algorithm_piece", two)
    if comm.rank < 2:
        send, sendrecv = mpi.Exchange.isend_part, mpi.Sendrecv

        def trickle(exchange, *args, **kwargs):
            time.sleep(0.003)
            return send(exchange, *args, **kwargs)

        def trickle_both(comm_, send_, receive, peer, tag, step):
            for lo, hi in mpi._chunks(send_.size, step):
                time.sleep(0.003)
                sendrecv(comm_, send_[lo:hi], receive[lo:hi], peer, tag, step)
        monkeypatch.setattr(mpi.Exchange, "isend_part", trickle)
        monkeypatch.setattr(mpi, "Sendrecv", trickle_both)
    else:
        from psgd.algorithms.base import REGISTRY
        cls = REGISTRY[name]
        pulled, landing = cls.pulled, server_worker.ServerWorker.landing

        def counted(obj, lo, hi):
            if waits:
                waits[-1][-1] += 1
            pulled(obj, lo, hi)

        def polls_counted(obj, replies):
            take_landed = landing(obj, replies)
            if take_landed is None:
                return None
            waits.append([])

            def poll():
                waits[-1].append(0)
                take_landed()
            return poll
        monkeypatch.setattr(cls, "pulled", counted)
        monkeypatch.setattr(server_worker.ServerWorker, "landing", polls_counted)
    with Pieces(2):
        check_sharded_replay(comm, name, REPLAYS[name], 2, **OPTIONS[name])
    partly_in = sum(len([n for n in polls if n]) > 1 for polls in waits)
    assert comm.allreduce(partly_in) > 0


# pieces of 1: 23 pieces, more than the server posts receives ahead
# (pieces.RECEIVES_AHEAD), so the failure leaves sends it has not received
@pytest.mark.parametrize("piece", [5, 1])
@pytest.mark.parametrize("name", ["asgd", "masgd"])
def test_a_failing_update_between_pieces_stops_every_rank(comm, name, piece):
    with Pieces(piece):
        obj = psgd.create(name, [np.zeros(SIZE)], comm=comm)
    if obj.role == "server":
        import psgd.kernels as kernels
        real = kernels.momentum_step if name == "masgd" else kernels.axpy
        calls = []

        def broken(*args):
            calls.append(1)
            if len(calls) == 3:                 # piece 2 of the first sync
                raise FloatingPointError("update blew up")
            return real(*args)
        setattr(kernels, real.__name__, broken)
        try:
            with pytest.raises(FloatingPointError, match="blew up"):
                obj.run()
        finally:
            setattr(kernels, real.__name__, real)
    else:
        with pytest.raises(ProtocolError, match="the %s server stopped: it failed" % name):
            for _ in range(1000):
                obj.synchronize(1)
    assert comm.allreduce(1) == comm.size


def test_ranks_that_disagree_on_the_piece_fail_at_create(comm):
    with Pieces(5 if comm.rank == 0 else 6):
        with pytest.raises(UsageError, match="server piece"):
            psgd.create("asgd", [np.zeros(SIZE)], comm=comm)
    assert comm.allreduce(1) == comm.size
