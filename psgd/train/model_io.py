"""Saved models and checkpoints: .npz of named arrays plus a JSON header,
written atomically (psgd.atomic.atomic_write: temp file, fsync, rename) with a checksum that load
verifies, and read with allow_pickle=False (a file is only ever read)."""
import hashlib
import json
import os
import zipfile

import numpy as np

from ..atomic import atomic_write
from ..errors import UsageError

HEADER = "__header__"


def _digest(arrays):
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _starts_with(path, magic):
    with open(path, "rb") as f:
        return f.read(len(magic)) == magic


def save(path, arrays, header):
    """Write {name: array} and a JSON-able header to `path` atomically."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    if HEADER in arrays:
        raise ValueError("%r is reserved" % HEADER)
    header = dict(header, checksum=_digest(arrays))
    payload = dict(arrays)
    payload[HEADER] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **payload), suffix=".npz")


def load(path):
    """(arrays, header); a missing, torn or tampered file is a UsageError."""
    if not os.path.exists(path):
        raise UsageError("%s: no such file" % path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # NumPy calls any file that is neither .npy nor a zip archive pickled
        if "Object arrays" in text or ("pickle" in text and _starts_with(path, b"\x80")):
            text = "it holds pickled Python objects, which psgd never loads"
        elif "pickle" in text:
            text = "not an .npz archive"
        raise UsageError("%s: not a readable psgd model/checkpoint (%s)" % (path, text)) from None
    raw = arrays.pop(HEADER, None)
    if raw is None:
        raise UsageError("%s: not a psgd file (no header)" % path)
    try:
        header = json.loads(raw.tobytes().decode())
    except ValueError:
        raise UsageError("%s: corrupt header" % path) from None
    if not isinstance(header, dict):
        raise UsageError("%s: corrupt header" % path)
    if header.get("checksum") != _digest(arrays):
        raise UsageError("%s: checksum mismatch (corrupt or partly written file)" % path)
    return arrays, header
