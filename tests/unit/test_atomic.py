"""psgd.atomic: every file psgd writes (trainer outputs and Kaldi files alike)
appears whole, with the umask's mode, and a failed write leaves the old file."""
import os

import numpy as np
import pytest

from psgd import atomic
from psgd.kaldi import write_counts


@pytest.fixture
def umask():
    def set_mask(mask):
        old[0] = os.umask(mask)
    old = [None]
    yield set_mask
    if old[0] is not None:
        os.umask(old[0])


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_writers_give_the_mode_the_umask_gives(tmp_path, umask, mask, mode):
    umask(mask)
    plain, counts = str(tmp_path / "a.bin"), str(tmp_path / "ali_train_pdf.counts")
    atomic.atomic_write_bytes(plain, b"abc")
    write_counts(counts, np.array([3, 1, 2]))
    for path in (plain, counts):
        assert os.stat(path).st_mode & 0o777 == mode, path
    assert open(plain, "rb").read() == b"abc"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "model.nnet")
    atomic.atomic_write_bytes(path, b"old")

    def half_then_fail(f):
        f.write(b"new, half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write(path, half_then_fail)
    assert open(path, "rb").read() == b"old"
    assert os.listdir(str(tmp_path)) == ["model.nnet"]


def test_temporaries_are_named_after_their_writer(tmp_path):
    tmp = atomic.temporary_beside(str(tmp_path / "x.ark"))
    name = os.path.basename(tmp)
    assert name.startswith(atomic.TMP + atomic.writer_name() + "-"), name
    assert os.path.dirname(tmp) == str(tmp_path)
