"""Who serves: the server count S of a job, checked once for the flags
alone (options.validate) and for the job's size (config.resolve)."""
from ..errors import UsageError


def server_count(algorithm, servers, model_parallel=False, size=None):
    """S, the ranks that serve (0 without a server algorithm), from --servers
    (None: not given): the one check of it, at parse time (`size` None) and
    again for the job's size."""
    serving = algorithm.server_based and not model_parallel
    if servers is not None:
        if not serving:
            raise UsageError("--servers applies to --algo easgd, asgd and masgd (data "
                             "parallel), not %s" % ("--model-parallel" if algorithm.server_based
                                                    else "--algo " + algorithm.name))
        if servers < 1:
            raise UsageError("--servers must be >= 1, got %d" % servers)
    if not serving:
        return 0
    servers = servers or 1
    if size is not None and size < 2:
        raise UsageError("%s needs a server and at least one worker: run with "
                         "mpirun -np 2 or more" % algorithm.name)
    if size is not None and algorithm.workers(size, servers) < 1:
        raise UsageError("--servers %d leaves no worker: run with mpirun -np %d or more" % (
            servers, servers + 1))
    return servers
