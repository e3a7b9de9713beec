"""Every error psgd raises on purpose, in one place.

Two questions decide how an error is reported: is it the user's (one line,
no traceback) and is it collective (every rank of the communicator raises it
together, so the job can exit cleanly instead of being aborted by the one
rank that knows). The second is a class, `Collective`, mixed into the
errors that are raised on every rank, never an attribute set afterwards.
"""


class Collective(Exception):
    """Marker: every rank of the communicator raises this error together,
    so no rank is left waiting in a collective call."""


class UsageError(ValueError):
    """Bad input from the user: reported as one line, no traceback."""


class CollectiveUsageError(UsageError, Collective):
    """Bad input that every rank knows about (agreed, or checked alike)."""


class NonFiniteError(RuntimeError):
    """A NaN or Inf in a model or gradient about to be synchronized."""


class CollectiveNonFiniteError(NonFiniteError, Collective):
    """A non-finite value that every rank saw (model-parallel: one loss)."""


class CollectiveError(Collective, RuntimeError):
    """A failure that every rank of a communicator agreed on and raises together."""


class ProtocolError(CollectiveError):
    """A server algorithm's server gave up; raised on the server and on
    every running worker."""


class ServerDiedError(RuntimeError):
    """A server algorithm's server (rank 0) died under ULFM. Every surviving
    worker meets the failure on its own, so each ends itself (exit status
    1) instead of taking the job down with MPI_Abort: an Abort's kill could
    reach every worker before its own exit, and Open MPI's launcher under
    --with-ft ulfm, which ignores the dead server's signal, then reports
    status 0."""

    def __init__(self, algo, how, host=None):
        super().__init__("the %s server (rank 0%s) %s: a job goes on after a worker's death, "
                         "not its server's" % (algo, " on %s" % host if host else "", how))
        self.algo, self.how = algo, how

    def on(self, host):
        """The same error, naming the server's host."""
        return ServerDiedError(self.algo, self.how, host)


def is_collective(exc):
    return isinstance(exc, Collective)
