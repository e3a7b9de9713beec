"""A full disk, without root: `python disk_full_driver.py FOLDER MODULE [ARGS...]`
runs `python -m MODULE ARGS...` (under mpirun: every rank) in a process where
fsync of any file written in FOLDER fails with ENOSPC, as it does on a full
(or over-quota network) file system. psgd itself has no test hooks."""
import errno
import os
import runpy
import sys

FULL = os.path.realpath(sys.argv[1])
_fsync = os.fsync


def fsync(fd):
    if os.path.dirname(os.path.realpath("/proc/self/fd/%d" % fd)) == FULL:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _fsync(fd)


os.fsync = fsync
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
