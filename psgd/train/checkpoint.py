"""Checkpoints: every rank writes its own state (its model, optimizer and
algorithm state differ under the async algorithms) into one folder per
epoch; rank 0 then points LATEST at the folder, and only once every rank's
file is on disk. A job killed at any moment leaves LATEST on the last
complete checkpoint, so --resume never sees a torn one. Without LATEST
(deleted, or folders copied without it), --resume takes the newest folder
whose files all load, and refuses when folders exist but none is
complete: a fresh start would prune and overwrite them. A job of another
size resumes from rank 0's file (the global model) and, under a server
algorithm, the shard files of the checkpoint's servers (data_parallel.py
says what carries over)."""
import json
import os
import shutil
import zipfile

import numpy as np
from mpi4py import MPI

from .. import agreement
from ..atomic import atomic_write, remove_debris
from ..backend import to_numpy
from ..errors import UsageError
from . import model_io

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
        error = None
        if self.rank == 0:
            try:
                self._point_latest(os.path.basename(folder))
                self._prune(epoch)
                self._remove_other_ranks(folder)
                remove_debris(folder, any_writer=True)
                remove_debris(self.directory, any_writer=True)  # a LATEST being written when killed
            except OSError as exc:      # a full disk: LATEST still names the last checkpoint
                error = UsageError("checkpoint %s: %s" % (folder, exc))
        agreement.agree(self.comm, error)           # the others wait for LATEST here

    def _remove_other_ranks(self, folder):
        """Files of ranks this job does not have: a job that lost workers
        (survival.py) saves again the epoch its larger self began to save."""
        for name in os.listdir(folder):
            if name.startswith("rank-") and name.endswith(".npz") and \
                    name[5:-4].isdigit() and int(name[5:-4]) >= self.size:
                os.unlink(os.path.join(folder, name))

    def _point_latest(self, name):
        atomic_write(os.path.join(self.directory, LATEST),
                     lambda f: json.dump({"folder": name, "size": self.size}, f), binary=False)

    def _prune(self, epoch):
        for old, folder in self.epoch_folders().items():
            if old <= epoch - KEEP:
                shutil.rmtree(folder, ignore_errors=True)

    def latest_folder(self):
        """The folder LATEST names, or None without LATEST (rank-local)."""
        path = os.path.join(self.directory, LATEST)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            raise UsageError("%s: unreadable checkpoint pointer" % path) from None
        name = info.get("folder") if isinstance(info, dict) else None
        size = info.get("size") if isinstance(info, dict) else None
        # Only a folder beside LATEST: the pointer is a file a user may hand us.
        if not isinstance(name, str) or _epoch_of(name) is None \
                or os.path.basename(name) != name \
                or not isinstance(size, int) or isinstance(size, bool):
            raise UsageError("%s: not a psgd checkpoint pointer (it must be {\"folder\": "
                             "\"epoch-NNNN\", \"size\": RANKS})" % path)
        folder = os.path.join(self.directory, name)
        if not os.path.isdir(folder):
            raise UsageError("%s points at %s, which is missing: restore it, or remove %s "
                             "to start afresh" % (path, folder, path))
        return folder

    def epoch_folders(self):
        """{epoch: folder} of the epoch-NNNN folders in the directory (rank-local)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return {}
        return {_epoch_of(n): os.path.join(self.directory, n) for n in names
                if _epoch_of(n) is not None and os.path.isdir(os.path.join(self.directory, n))}

    def load_from(self, folder, rank=None, size=None):
        """(arrays, header) of rank `rank`'s file in `folder` (this rank's by
        default), which must be that rank's of that epoch in a job of `size`
        ranks (this job's by default): a file copied in from another epoch
        or job would start the ranks apart."""
        rank = self.rank if rank is None else rank
        size = self.size if size is None else size
        path = _rank_file(folder, rank)
        arrays, header = model_io.load(path)
        epoch = _epoch_of(os.path.basename(folder))
        saved = (header.get("epoch"), header.get("rank"), header.get("size"))
        if saved != (epoch, rank, size):
            raise UsageError("%s is not rank %d's checkpoint of epoch %d in a job of %d ranks "
                             "(it says: epoch %s, rank %s of %s)" % (
                                 path, rank, epoch + 1, size,
                                 "?" if saved[0] is None else saved[0] + 1, saved[1], saved[2]))
        return arrays, header

    def load_resumed(self, folder):
        """(arrays, header) this rank resumes from in `folder`: its own file
        when the job has the checkpoint's size, else rank 0's, once this
        rank's share of the other ranks' files has loaded too (the servers
        read their shards of those later: a torn one must fail first)."""
        size = _saved_size(folder)
        if size in (None, self.size):       # None: rank 0's file names its problem
            return self.load_from(folder)
        first = self.load_from(folder, 0, size)
        for rank in range(self.rank or self.size, size, self.size):
            self.load_from(folder, rank, size)
        return first

    def refuse_to_overwrite(self):
        """Collective, for a run without --resume: a directory holding
        checkpoints is refused, since this run would prune them and
        overwrite LATEST."""
        error = None
        names = sorted(os.path.basename(f) for f in self.epoch_folders().values())
        if names or os.path.exists(os.path.join(self.directory, LATEST)):
            error = UsageError("--checkpoint-dir %s holds checkpoints (%s): add --resume to "
                               "continue from them, or give another folder" % (
                                   self.directory, ", ".join(names) or LATEST))
        agreement.agree(self.comm, error)

    def find(self):
        """Collective: (folder, this rank's (arrays, header)) to resume from,
        the same folder on every rank, or None when the directory holds no
        checkpoint; a problem on any rank is a UsageError on every rank."""
        error, folder = None, None
        try:
            folder = self.latest_folder()
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        pointed = _count(self.comm, folder is not None)
        if 0 < pointed < self.size:
            raise UsageError("%s/%s is seen by %d of %d ranks: --checkpoint-dir must be one "
                             "folder that every rank sees" % (self.directory, LATEST, pointed,
                                                              self.size))
        if folder is None:
            return self._newest_complete()
        agreement.check_same(self.comm, {"folder": os.path.basename(folder)},
                             "%s/%s" % (self.directory, LATEST))
        error, state = None, None
        try:
            state = self.load_resumed(folder)
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        return folder, state

    def _newest_complete(self):
        """Without LATEST: the newest epoch whose files all load."""
        folders = self.epoch_folders()
        if _count(self.comm, bool(folders)) == 0:
            return None
        checked, bound = {}, np.iinfo(np.int64).max
        while True:
            mine = max((e for e in folders if e <= bound and self._loads(folders[e], checked)),
                       default=-1)
            epoch = np.array([mine], dtype=np.int64)
            self.comm.Allreduce(MPI.IN_PLACE, [epoch, MPI.INT64_T], op=MPI.MIN)
            epoch = int(epoch[0])
            if epoch < 0:
                # the same line on every rank: rank 0's list of folders
                agreement.agree(self.comm, UsageError(
                    "--resume: %s has no %s and no checkpoint that every rank's file completes "
                    "(found %s): restore %s, or give another --checkpoint-dir to start afresh "
                    "(a fresh start here would overwrite them)" % (
                        self.directory, LATEST, ", ".join(os.path.basename(folders[e])
                                                          for e in sorted(folders)) or "none",
                        LATEST)))
            if _count(self.comm, epoch in folders and self._loads(folders[epoch], checked)) \
                    == self.size:
                return folders[epoch], checked[folders[epoch]]
            bound = epoch - 1

    def _loads(self, folder, checked):
        if folder not in checked:
            try:
                checked[folder] = self.load_resumed(folder)
            except UsageError:
                checked[folder] = None
        return checked[folder] is not None


def _saved_size(folder):
    """The size rank 0's file in `folder` says its job had (checked by load_from)."""
    try:
        with np.load(_rank_file(folder, 0), allow_pickle=False) as z:
            size = json.loads(z[model_io.HEADER].tobytes().decode()).get("size")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None     # unreadable: load_from names the problem
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _epoch_of(name):
    """N of a folder named epoch-N, or None."""
    if not name.startswith("epoch-") or not name[6:].isdigit():
        return None
    return int(name[6:])


def _count(comm, flag):
    """Collective: on how many ranks `flag` holds."""
    n = np.array([int(bool(flag))], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, [n, MPI.INT64_T], op=MPI.SUM)
    return int(n[0])


def split(arrays, prefix):
    """The entries of `arrays` under `prefix/`, with the prefix removed."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in arrays.items() if k.startswith(prefix + "/")}


def join(prefix, arrays):
    return {"%s/%s" % (prefix, k): np.asarray(v) for k, v in arrays.items()}


def optimizer_arrays(optimizer):
    """The local optimizer's state under "opt/", on the host; an unallocated
    slot (None) is left out and is None again on load."""
    return join("opt", {k: to_numpy(v) for k, v in optimizer.state_dict().items()
                        if v is not None})


def optimizer_state(arrays):
    """The optimizer's state_dict of a checkpoint's `arrays`."""
    return {k: (v.item() if v.ndim == 0 else v) for k, v in split(arrays, "opt").items()}
