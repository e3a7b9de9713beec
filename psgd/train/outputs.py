"""Output files (--out, --plot, --metrics, --timeline, --checkpoint-dir): checked at
start-up, before any epoch is trained (output_plan), and written atomically
(psgd.atomic).
A writer killed mid-write leaves its temporary file behind: the next start
removes the ones of writers that are dead (psgd.atomic.remove_debris)."""
import os

from ..atomic import remove_debris
from ..errors import UsageError


def prepare(comm, config, main, data=None):
    """Collective: every rank checks the outputs it will write (output_plan:
    rank 0 all of them, side files of an nnet1 --out included; the others
    --checkpoint-dir), rank 0 takes the lock on --checkpoint-dir and removes
    debris of dead writers; any problem is one line on every rank. Returns
    the lock (held until released or exit)."""
    from .. import agreement
    from . import output_plan
    from .dirlock import DirectoryLock
    outputs = config.outputs
    lock, plan = None, output_plan.of_args(outputs, data)
    problem = output_plan.problem(plan, main, output_plan.inputs_of(config.data) if main else ())
    error = UsageError(problem) if problem else None
    if main and error is None:
        try:
            for output in plan:
                if not output.folder:
                    remove_debris(os.path.dirname(os.path.abspath(output.path)))
            if outputs.checkpoint_dir:
                lock = DirectoryLock(outputs.checkpoint_dir)
                for folder in [outputs.checkpoint_dir] + [
                        os.path.join(outputs.checkpoint_dir, n) for n in
                        sorted(os.listdir(outputs.checkpoint_dir)) if n.startswith("epoch-")]:
                    remove_debris(folder, any_writer=True)
        except UsageError as exc:
            error = exc
        except OSError as exc:
            error = UsageError("output check failed: %s" % exc)
    agreement.agree(comm, error)
    return lock


def open_metrics(comm, path, keep_epochs):
    """Collective: the MetricsLog (rank 0 passes the path, the others None);
    an unreadable file to resume is one line on every rank."""
    from .. import agreement
    from .metrics import MetricsLog
    error, log = None, None
    try:
        log = MetricsLog(path, keep_epochs)
    except UsageError as exc:
        error = exc
    except (OSError, UnicodeDecodeError) as exc:
        error = UsageError("--metrics %s: %s" % (path, exc))
    agreement.agree(comm, error)
    return log
