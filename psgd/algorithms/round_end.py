"""The end of a server round with S > 1 servers (server.py, "Shards"): the
servers agree on whether any gave up, and if none did, servers 1..S-1 send
rank 0 their shard of x (and of its average, center_average.py), so that
rank 0 holds the whole model."""
import numpy as np
from mpi4py import MPI

from .. import mpi
from ..errors import ProtocolError
from ..protocol import NOTICE_SERVER_ERROR, TAG_SHARD, notice_text


def end_shards(server, failed):
    """S > 1, every server after its loop: agree on whether any failed
    (then each raises), else bring every shard of x to rank 0's params."""
    if server.server_comm is None:
        return
    mine = np.zeros(5, dtype=np.int64)
    if failed:
        mine[:4] = (1, *(server.notice_sent if server.notice_sent is not None
                         else (NOTICE_SERVER_ERROR, server.node.rank, 0)))
    if server.order is not None:
        mine[4] = server.order.sent               # the leader's count of orders
    status = np.zeros((server.servers, 5), dtype=np.int64)
    server.server_comm.Allgather([mine, MPI.INT64_T], [status, MPI.INT64_T])
    if server.order is not None and not server.order.leads:
        server.order.drain(int(status[0, 4]))
    bad = [s for s in range(server.servers) if status[s, 0]]
    if bad:
        if not failed:
            _, code, sender, value = (int(v) for v in status[bad[0], :4])
            server.failure = "%s server rank %d: server rank %d stopped: %s" % (
                server.name, server.node.rank, bad[0], notice_text(code, sender, value))
            raise ProtocolError(server.failure)
        return
    # x's shards, then a's: messages from one rank on one tag arrive in order
    shards = range(len(server._gather))
    if server.node.is_main:
        for j in shards:
            if j % server.servers:
                server._gather[j].recv(j % server.servers, tag=TAG_SHARD)
    else:
        for j in shards[server.node.rank::server.servers]:
            server._gather[j].send(mpi.MAIN_RANK, tag=TAG_SHARD)
