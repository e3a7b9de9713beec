"""The server algorithms' model messages in pieces, and the server's side of
a sync run piece by piece (docs/algorithms.md, Fixes 1: an exchange pipelined in
chunks of the flat buffer).

A worker sends its buffer and receives the center as a train of messages of
`server_piece()` elements each, all posted at once. The server updates piece
j as soon as it has arrived and sends piece j of the center back while the
later pieces are still coming, so the update leaves the round trip's
critical path and each piece is updated while it is still in cache.
Measured (benchmarks/server_roundtrip.py, gap mode, np 2, shared memory,
three runs each, psgd's round trip over its floor): asgd at 1e6 float32
1.08-1.50x (median 1.14) in one message, 0.97-1.10x (1.02) in 256k-element
pieces; at 1e7 1.23-1.43x (1.31) against 1.11-1.16x (1.15). 128k and 512k
did about as well. Over TCP asgd did not change (1.05x / 1.07x at 1e6):
the transfer dwarfs the update. Across hosts the piece is 32k elements
(128 KB): a sharded server's turn begins with a wait for its first piece
and ends with the worker's wait for its last, each with one direction of
the link idle, and smaller pieces shorten both (benchmarks/FINDINGS.md,
"Servers across hosts: smaller pieces"). easgd's server answers with one
blocking Sendrecv (`in_pieces = False`): its reply is the center from
before the update, so the update is already off the worker's path, and on
one host one message each way measured faster than pieces. Across hosts a
large message each way mostly moved one direction after the other; a train
of blocking Sendrecvs of EAGER_PIECE_BYTES keeps both directions busy, and
an eager piece needs no rendezvous handshake (benchmarks/FINDINGS.md,
"easgd across hosts: eager pieces"). Every rank must use the same piece
size (psgd.create checks it).

A job that survives a worker's death (survive_worker_loss, Open MPI's ULFM)
sends every model message across hosts in eager pieces, asgd's and masgd's
too. A rendezvous message leaves state in Open MPI's ob1: a receive from a
worker killed mid-message stays on ob1's list of receives waiting to be
scheduled after ULFM has completed it in error, a later receive reuses that
request, and the server deadlocks inside MPI on the request's own lock (gdb
stacks in benchmarks/FINDINGS.md, "A worker's death and ob1's pending
receives"). An eager message keeps no such state.
"""
from . import mpi, settings

ONE_HOST_PIECE = 1 << 18            # elements (1 MB of float32)
ACROSS_HOSTS_PIECE = 1 << 15
EAGER_PIECE_BYTES = 1 << 15         # half of Open MPI's TCP eager limit (64 KiB)
RECEIVES_AHEAD = 16                 # pieces whose receive a server posts ahead


def server_piece(across_hosts=False):
    """Elements per model message of the server algorithms when the ranks
    live on one host or on several (0: one message): PSGD_MPI_SERVER_PIECE
    where set, else by the path of the bytes."""
    value = settings.get("PSGD_MPI_SERVER_PIECE")
    if value is not None:
        return value
    return ACROSS_HOSTS_PIECE if across_hosts else ONE_HOST_PIECE


def algorithm_piece(exchange, in_pieces, survive_worker_loss=False):
    """The piece of an algorithm's model messages on `exchange`'s
    communicator (None: one message). in_pieces: its server serves piece by
    piece, every piece posted at once (asgd, masgd); else it answers with
    one Sendrecv (easgd), one message on one host. Collective: every rank
    asks whether the ranks span hosts."""
    across = exchange.spans_hosts()
    if not (in_pieces or across):
        return None
    if (across and (survive_worker_loss or not in_pieces)
            and settings.get("PSGD_MPI_SERVER_PIECE") is None):
        return EAGER_PIECE_BYTES // exchange.buffer.dtype.itemsize
    return server_piece(across) or None


def server_part(exchange, lo, hi, piece):
    """An Exchange on elements [lo, hi) of `exchange`'s buffer that sends
    and receives in messages of `piece` elements (None: one message)."""
    return mpi.exchange_part(exchange, lo, hi, piece)


def serve(incoming, center, source, update, reply=True, received=False, replying=()):
    """The server's side of one sync with `source`, piece by piece: receive
    piece j into `incoming`, run update(lo, hi) on it, and (reply) send
    piece j of `center` back while later pieces are still arriving.
    Returns the reply's sends, by piece, not waited for: the server takes
    up its next worker while they drain, and `replying` (the last serve's,
    by piece) is waited for piece by piece before this serve's update
    writes over it. received: `incoming` already holds the whole message
    (a compressed push, decoded whole). The receives are posted RECEIVES_AHEAD pieces
    ahead of the one being served, not all at once: each post meets the
    worker's waiting rendezvous and takes its time, so posting every one
    first kept the link idle before the first piece (benchmarks/
    FINDINGS.md, "The server's receives posted ahead")."""
    bounds = incoming.pieces()
    receives, sends = [], []

    def post(j):
        if not received and j < len(bounds):
            receives.append(incoming.irecv_part(source, *bounds[j]))
    for j in range(RECEIVES_AHEAD):
        post(j)
    try:
        for j, (lo, hi) in enumerate(bounds):
            if not received:
                receives[j].wait()
                post(j + RECEIVES_AHEAD)
            if j < len(replying):
                replying[j].wait()
            update(lo, hi)
            if reply:
                sends.append(center.isend_part(source, lo, hi))
    except BaseException:
        # the posted receives and the replies complete (the worker has posted
        # every piece both ways), and the pieces not posted yet are what the
        # failure path drains by probing
        for request in list(replying) + sends:
            request.wait()
        raise
    finally:
        for request in receives:
            request.wait()
    return sends
