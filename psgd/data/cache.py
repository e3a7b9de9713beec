"""On-disk cache of generated arrays (.npz, no pickle), safe for concurrent ranks.

Several ranks of one node may miss the cache together and all generate the
data; each writes its own temporary file in the cache directory and renames
it over the final name. os.replace is atomic within one file system, so a
reader sees either no file or a complete one, never a torn write.
"""
import os
import tempfile
import warnings
import zipfile

import numpy as np

from .. import settings


def default_cache_dir():
    return settings.get("PSGD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "psgd")


def load_arrays(path):
    """{name: array} from a cache file, or None when absent or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        # A file from a crashed writer of an older version: regenerate.
        warnings.warn("ignoring unreadable cache file %s (%s)" % (path, e))
        return None


def save_arrays(path, arrays):
    """Write {name: array} atomically; a failure only warns (the cache is optional)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)    # mkstemp's 0600 would hide the cache from other users
        os.replace(tmp, path)
        return True
    except OSError as e:
        warnings.warn("could not write cache file %s (%s)" % (path, e))
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return False
