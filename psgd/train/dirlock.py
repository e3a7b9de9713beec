"""--checkpoint-dir belongs to one job at a time. Two jobs given the same
folder would overwrite each other's checkpoints, or one would delete the
other's temporary files. Rank 0 holds an fcntl lock on DIR/.lock for the
life of the job: the kernel drops it when the process ends, however it
ends, so the lock of a dead job is never in the way (the file stays, and
only says who held it last)."""
import fcntl
import os
import socket

from ..errors import UsageError

LOCK = ".lock"


class DirectoryLock:
    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, LOCK)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip()
            os.close(fd)
            raise UsageError("--checkpoint-dir %s is in use by another job (%s); give each "
                             "job its own directory" % (directory, holder or "holder unknown")
                             ) from None
        os.ftruncate(fd, 0)
        os.write(fd, ("pid %d on %s\n" % (os.getpid(), socket.gethostname())).encode())
        self.fd = fd

    def release(self):
        if self.fd is not None:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __del__(self):
        try:
            self.release()
        except (OSError, TypeError, AttributeError):
            pass
