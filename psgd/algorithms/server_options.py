"""The options every server algorithm takes (easgd, asgd, masgd), on its
servers and workers alike, and the check they share."""
from .. import ulfm
from ..errors import UsageError
from .option import Option


def _sleep_range(v):
    return None if 0.0 <= v <= 1.0 else "must be between 0 and 1 second"


def _survivable(v):
    return ulfm.missing() if v else None


# poll_max_sleep: the longest sleep of the server's idle wait and of a worker's wait for
# its answer (waiting.py), so the most a message coming off schedule waits to be
# noticed; 0 never sleeps (a core per rank).
SERVER_OPTIONS = {"poll_max_sleep": Option(1e-3, _sleep_range, flag=False),
                  "average_examples": Option(
                      0.0, lambda v: None if v >= 0 else "must be >= 0",
                      help="the model a job keeps: the center averaged over about this many "
                           "examples of its updates (0: the center itself; the trainer's "
                           "default: a quarter of an epoch)"),
                  "survive_worker_loss": Option(
                      False, _survivable, kind=bool,
                      help="a worker whose process dies is dropped and the others go on "
                           "(needs %s)" % ulfm.LAUNCH)}


def refuse_survival_with_shards(algorithm):
    """Every rank of a server algorithm (one error on every rank)."""
    if algorithm.survive_worker_loss and algorithm.servers > 1:
        raise UsageError("%s: survive_worker_loss needs one server (servers=%d): shards would "
                         "have to agree on a lost worker mid-round" % (
                             algorithm.name, algorithm.servers))
