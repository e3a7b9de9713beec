"""Checkpoints: every rank writes its own state (its model, optimizer and
algorithm state differ under the async algorithms) into one folder per
epoch; rank 0 then points LATEST at the folder, and only once every rank's
file is on disk. A job killed at any moment leaves LATEST on the last
complete checkpoint, so --resume never sees a torn one."""
import json
import os
import shutil

import numpy as np
from mpi4py import MPI

from ..errors import UsageError
from . import model_io
from .outputs import atomic_write

LATEST = "LATEST"
KEEP = 2


def _rank_file(folder, rank):
    return os.path.join(folder, "rank-%05d.npz" % rank)


class Checkpointer:
    def __init__(self, directory, comm):
        self.directory = directory
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def save(self, epoch, arrays, header):
        """Collective. `arrays`: this rank's {name: host array}."""
        folder = os.path.join(self.directory, "epoch-%04d" % epoch)
        ok = 1
        try:
            model_io.save(_rank_file(folder, self.rank), arrays,
                          dict(header, epoch=epoch, rank=self.rank, size=self.size))
        except OSError as exc:
            ok, error = 0, exc
        everyone = np.array([ok], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [everyone, MPI.INT64_T], op=MPI.MIN)
        if not everyone[0]:
            raise UsageError("checkpoint %s could not be written%s" % (
                folder, "" if ok else ": %s" % error))
        if self.rank == 0:
            self._point_latest(os.path.basename(folder))
            self._prune(epoch)
            _remove_leftovers(folder)
            _remove_leftovers(self.directory)   # a LATEST being written when killed
        self.comm.Barrier()

    def _point_latest(self, name):
        atomic_write(os.path.join(self.directory, LATEST),
                     lambda f: json.dump({"folder": name, "size": self.size}, f), binary=False)

    def _prune(self, epoch):
        for name in os.listdir(self.directory):
            if name.startswith("epoch-"):
                try:
                    old = int(name[6:])
                except ValueError:
                    continue
                if old <= epoch - KEEP:
                    shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def latest_folder(self):
        path = os.path.join(self.directory, LATEST)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            raise UsageError("%s: unreadable checkpoint pointer" % path) from None
        name = info.get("folder") if isinstance(info, dict) else None
        # Only a folder beside LATEST: the pointer is a file a user may hand us.
        if not isinstance(name, str) or not name.startswith("epoch-") \
                or os.path.basename(name) != name:
            raise UsageError("%s: not a psgd checkpoint pointer" % path)
        if info.get("size") != self.size:
            raise UsageError("checkpoint in %s was written by %s ranks, this job has %d" % (
                self.directory, info.get("size"), self.size))
        folder = os.path.join(self.directory, name)
        if not os.path.isdir(folder):
            raise UsageError("%s points at %s, which is missing: restore it, or remove %s "
                             "to start afresh" % (path, folder, path))
        return folder

    def load(self):
        """(arrays, header) of this rank's latest checkpoint, or None."""
        folder = self.latest_folder()
        if folder is None:
            return None
        return model_io.load(_rank_file(folder, self.rank))


def _remove_leftovers(folder):
    """Temporary files of writers killed in an earlier attempt at this folder
    (every rank's write of this attempt has completed by now)."""
    for name in os.listdir(folder):
        if name.startswith(".tmp-"):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def split(arrays, prefix):
    """The entries of `arrays` under `prefix/`, with the prefix removed."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in arrays.items() if k.startswith(prefix + "/")}


def join(prefix, arrays):
    return {"%s/%s" % (prefix, k): np.asarray(v) for k, v in arrays.items()}
