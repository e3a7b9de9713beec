"""Files written whole or not at all, for every writer in psgd (the trainer's
outputs, Kaldi models, transforms, counts and archives).

A write goes to a temporary file beside its target, named after the writer
(`.tmp-PID@HOST-XXXX`), is fsynced and renamed over the target, with the mode
the umask gives any new file (mkstemp alone makes it 0600). Readers see the
old file or the new one, never a torn one. A writer killed mid-write leaves
its temporary file behind; psgd.train.outputs removes those of dead writers.
A write that fails (a full disk, a folder that is a file) raises WriteError,
an OSError that names the target, not the temporary file."""
import os
import socket
import tempfile

TMP = ".tmp-"


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
