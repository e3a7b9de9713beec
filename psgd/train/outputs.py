"""Output files (--out, --plot, --metrics, --timeline, --checkpoint-dir): checked at
start-up, before any epoch is trained (output_plan), and written atomically
(psgd.atomic).
A writer killed mid-write leaves its temporary file behind: the next start
removes the ones of writers that are dead (psgd.atomic.remove_debris)."""
import os

from ..atomic import remove_debris
from ..errors import UsageError


def prepare(comm, args, main, data=None):
    """Collective: every rank checks the outputs it will write (output_plan:
    rank 0 all of them, side files of an nnet1 --out included; the others
    --checkpoint-dir), rank 0 takes the lock on --checkpoint-dir and removes
    debris of dead writers; any problem is one line on every rank. Returns
    the lock (held until released or exit)."""
    from .. import agreement
    from . import output_plan
    from .dirlock import DirectoryLock
    lock, plan = None, output_plan.of_args(args, data)
    problem = output_plan.problem(plan, main, output_plan.inputs_of(args) if main else ())
    error = UsageError(problem) if problem else None
    if main and error is None:
        try:
            for output in plan:
                if not output.folder:
                    remove_debris(os.path.dirname(os.path.abspath(output.path)))
            if args.checkpoint_dir:
                lock = DirectoryLock(args.checkpoint_dir)
                for folder in [args.checkpoint_dir] + [
                        os.path.join(args.checkpoint_dir, n) for n in
                        sorted(os.listdir(args.checkpoint_dir)) if n.startswith("epoch-")]:
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
