"""Output files (--out, --plot, --metrics, --timeline, --checkpoint-dir): checked at
start-up, before any epoch is trained, and written atomically (psgd.atomic).
A writer killed mid-write leaves its temporary file behind: the next start
removes the ones of writers that are dead (same host, no such process)."""
import os
import socket
import tempfile
import time

from ..atomic import TMP, atomic_write, fsync_dir, writer_name  # noqa: F401 (re-exported)
from ..errors import UsageError

PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff",
                "webp", "pgf")
_ORPHAN_AGE_S = 3600    # a temporary file without a writer's name: this old is debris


def remove_debris(folder, any_writer=False):
    """Remove the temporary files of dead writers in `folder` (of any writer:
    a folder under our lock); returns their names."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    host = socket.gethostname()
    for name in names:
        if name.startswith(TMP) and (any_writer or _dead_writer(os.path.join(folder, name),
                                                                name, host)):
            try:
                os.unlink(os.path.join(folder, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _dead_writer(path, name, host):
    who = name[len(TMP):].rsplit("-", 1)[0]
    pid, _, where = who.partition("@")
    if not pid.isdigit() or not where:
        try:   # written by an older psgd: no writer's name
            return time.time() - os.path.getmtime(path) > _ORPHAN_AGE_S
        except OSError:
            return False
    if where != host:
        return False    # its writer may live on another node
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


# start-up checks ------------------------------------------------------------------
def check_file(path, flag, formats=None):
    """The UsageError text for an output file that cannot be written, or None."""
    if os.path.isdir(path):
        return "--%s %s is a directory; give a file name" % (flag, path)
    if formats is not None:
        ext = os.path.splitext(path)[1][1:].lower()
        if ext not in formats:
            return "--%s %s: unknown format %r; use one of %s" % (
                flag, path, ext, ", ".join("." + f for f in formats))
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "--%s %s: file is not writable" % (flag, path)
    return _check_folder(os.path.dirname(os.path.abspath(path)), flag, path)


def check_folder(path, flag):
    if os.path.exists(path) and not os.path.isdir(path):
        return "--%s %s is not a directory" % (flag, path)
    return _check_folder(os.path.abspath(path), flag, path)


def _check_folder(folder, flag, path):
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return "--%s %s: %s is not a directory" % (flag, path, existing)
    try:   # the one honest test (root ignores permission bits, mounts may be read-only)
        fd, probe = tempfile.mkstemp(prefix="%s%s-" % (TMP, writer_name()), dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return "--%s %s: cannot write in %s (%s)" % (flag, path, existing,
                                                    exc.strerror or exc)
    return None


def check_outputs(args):
    """Every output path of a run, checked before training; debris of dead
    writers beside them removed. Returns an error text or None."""
    checks = [(args.out, lambda p: check_file(p, "out")),
              (args.metrics, lambda p: check_file(p, "metrics")),
              (args.plot, lambda p: check_file(p, "plot", PLOT_FORMATS)),
              (args.timeline, lambda p: check_file(p, "timeline", ("json",))),
              (args.checkpoint_dir, lambda p: check_folder(p, "checkpoint-dir"))]
    for path, check in checks:
        if path:
            problem = check(path)
            if problem:
                return problem
    files = [("out", args.out), ("metrics", args.metrics), ("plot", args.plot),
             ("timeline", args.timeline)]
    seen = {}
    for flag, path in files:
        if path:
            other = seen.setdefault(os.path.realpath(path), flag)
            if other != flag:
                return "--%s %s and --%s name the same file: each would overwrite the " \
                       "other" % (flag, path, other)
    for path in (args.out, args.metrics, args.plot, args.timeline):
        if path:
            remove_debris(os.path.dirname(os.path.abspath(path)))
    return None


def prepare(comm, args, main):
    """Collective: rank 0 checks every output path, takes the lock on
    --checkpoint-dir and removes debris of dead writers; any problem is one
    line on every rank. Returns the lock (held until released or exit)."""
    from .. import agreement
    from .dirlock import DirectoryLock
    error, lock = None, None
    if main:
        try:
            problem = check_outputs(args)
            if problem:
                raise UsageError(problem)
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
