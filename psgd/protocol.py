"""psgd's wire protocol: every MPI tag and message code, declared once
(docs/protocol.md says what each message carries and when it is sent).

The server algorithms' traffic runs on the communicator `psgd.create`
duplicated; the stall watchdog's on a duplicate of its own, so its tag may
repeat none of the others' without meaning to.
"""

# Tags on the algorithm's communicator.
TAG_MSG = 0        # worker -> each server: a control message, int64 [message, n_k]
TAG_MODEL = 1      # both ways: the flat buffer (or a shard of it), w_k, delta_k or x
TAG_NOTICE = 2     # server -> worker: int64 [code, sender, value]
TAG_SHARD = 3      # servers 1..S-1 -> rank 0: their shard of the center, after run()
TAG_ORDER = 4      # rank 0 -> servers 1..S-1: int64 [rank] served next, or [LEADER_FAILED]
TAG_READY = 5      # server -> worker: one byte, the answer to MSG_SYNC_WHEN_READY

# Tag on the stall watchdog's own communicator: int64 status rows.
TAG_WATCHDOG = 7

# Tag on the communicator abort_on_error watches (COMM_WORLD unless told):
# rank -> rank 0, int64 [1], "my line is out" (agreement.abort).
TAG_SAID = 8

# Control messages (TAG_MSG): [message, n_k]; FINISHED carries n_k = 0.
MSG_SYNC = 0
MSG_FINISHED = 1
# A sync whose worker pushes only once the server has taken it up (READY on
# TAG_READY): sharded servers' workers in turns, so that a turn's push never
# shares a server's link with the worker that server is still serving.
MSG_SYNC_WHEN_READY = 2
MESSAGES = {MSG_SYNC: "SYNC", MSG_FINISHED: "FINISHED", MSG_SYNC_WHEN_READY: "SYNC_WHEN_READY"}
# A server receives control messages into this many int64 slots: room to
# receive, and report as malformed, a message longer than the pair.
CONTROL_SLOTS = 4

# Notices (TAG_NOTICE): [code, sender, value].
NOTICE_DONE = 0            # the answer to FINISHED
NOTICE_UNKNOWN = 1         # unknown control message (value: the message)
NOTICE_MALFORMED = 2       # malformed control message (value: its bytes, or the bad n_k)
NOTICE_SERVER_ERROR = 3    # a server failed in its own update (sender: that server)

# Orders (TAG_ORDER): the leader gave up.
LEADER_FAILED = -1


def notice_text(code, sender, value):
    """What a failure notice [code, sender, value] says happened."""
    return {NOTICE_UNKNOWN: "unknown control message %d from rank %d" % (value, sender),
            NOTICE_MALFORMED: "malformed control message from rank %d" % sender,
            }.get(code, "it failed (see rank %d's error)" % sender)
