"""Files written whole or not at all, for every writer in psgd (the trainer's
outputs, Kaldi models, transforms, counts and archives).

A write goes to a temporary file beside its target, named after the writer
(`.tmp-PID@HOST-XXXX`), is fsynced and renamed over the target, with the mode
the umask gives any new file (mkstemp alone makes it 0600). Readers see the
old file or the new one, never a torn one. A writer killed mid-write leaves
its temporary file behind; remove_debris() removes those of dead writers.
A write that fails (a full disk, a folder that is a file) raises WriteError,
an OSError that names the target, not the temporary file."""
import os
import socket
import tempfile
import time

TMP = ".tmp-"
_ORPHAN_AGE_S = 3600    # a temporary file without a writer's name: this old is debris


class WriteError(OSError):
    """Writing `filename` failed: errno and strerror are the system's."""

    def __str__(self):
        return "cannot write %s: %s" % (self.filename, self.strerror)


def writer_name():
    return "%d@%s" % (os.getpid(), socket.gethostname())


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary_beside(path, suffix=""):
    """A new empty file beside `path` (mode from the umask), for writers that
    want a file name rather than a file object; the caller renames or removes it."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="%s%s-" % (TMP, writer_name()), suffix=suffix, dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    return tmp


def atomic_write(path, write, binary=True, suffix=""):
    """write(f) into a temporary file beside `path`, then rename it over `path`."""
    try:
        tmp = temporary_beside(path, suffix)
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror or str(exc), path) from exc
    try:
        with open(tmp, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(exc.errno, exc.strerror or str(exc), path) from exc
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def atomic_write_bytes(path, data):
    atomic_write(path, lambda f: f.write(data))


def fsync_dir(folder):
    """Make a rename in `folder` durable (best effort: not every file system can)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
