"""Frame targets (class ids per frame) for the utterances of one shard.

Accepted forms:
  * a Kaldi table of int vectors: "ark:ali.ark" (binary or text),
    "scp:ali.scp", or a pipe such as "ark:gunzip -c ali.gz |";
  * a text alignment, one utterance a line: "utt-id id id ...", given as a
    plain path or "ark,t:path".
A plain-file archive is sniffed: binary int vectors go through kaldiio; text
is parsed here line by line: far faster than kaldiio's character-at-a-time
text reader (which also misreads a short last entry of a bare "utt 1 2 3"
file), and errors can name the line. Only the wanted utterances' lines are
converted to numbers.
"""
import numpy as np

from psgd.data.kaldi_table import kaldi_error, read_int_vectors
from psgd.data.rspecifier import parse_rspecifier
from psgd.errors import UsageError


def _is_binary_archive(path):
    """True when the first entry's value starts with Kaldi's binary marker."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise kaldi_error(path, e) from None
    if not head.strip():
        raise UsageError("%s: empty targets file (no utterances)" % path)
    space = head.find(b" ")
    return space >= 0 and head[space + 1:space + 3] == b"\0B"


def read_text_alignment(path, keys):
    """{id: int64 vector} for the wanted ids from a text alignment file."""
    wanted = set(keys)
    out = {}
    try:
        with open(path, "r", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split(None, 1)
                if not parts or parts[0] not in wanted:
                    continue
                key, rest = parts[0], parts[1] if len(parts) > 1 else ""
                # Kaldi writes int vectors bare, kaldiio (and float vectors) in brackets.
                rest = rest.strip()
                if rest.startswith("[") and rest.endswith("]"):
                    rest = rest[1:-1]
                if key in out:
                    raise UsageError("%s:%d: utterance %s appears twice" % (path, lineno, key))
                try:
                    out[key] = np.array(rest.split(), dtype=np.int64)
                except (ValueError, OverflowError):
                    bad = next(t for t in rest.split() if not _is_int(t))
                    raise UsageError("%s:%d: utterance %s: target %r is not a 64-bit integer"
                                     % (path, lineno, key, bad)) from None
    except UnicodeDecodeError as e:
        raise UsageError("%s: not a text alignment (%s); binary alignments need "
                         "an 'ark:' rspecifier" % (path, e.reason)) from None
    except OSError as e:
        raise kaldi_error(path, e) from None
    return out


def _is_int(token):
    try:
        np.int64(token)
        return True
    except (ValueError, OverflowError):
        return False


def read_targets(targets, keys):
    """{id: int64 vector} for the ids of `keys` that have targets (others absent)."""
    rspec = parse_rspecifier(targets)
    if rspec.kind == "scp" or rspec.is_stream or _is_binary_archive(rspec.path):
        return read_int_vectors(targets, keys)
    return read_text_alignment(rspec.path, keys)


def target_lengths(targets, keys):
    """{id: number of targets} for the ids of `keys` that have targets (the
    frames each utterance trains on: what shards are balanced by)."""
    rspec = parse_rspecifier(targets)
    if rspec.kind == "scp" or rspec.is_stream or _is_binary_archive(rspec.path):
        return {k: len(v) for k, v in read_int_vectors(targets, keys).items()}
    wanted, out = set(keys), {}
    try:
        with open(rspec.path, "r", encoding="utf-8") as f:
            for line in f:
                parts = line.split(None, 1)
                if parts and parts[0] in wanted:
                    rest = parts[1].strip() if len(parts) > 1 else ""
                    out[parts[0]] = len(rest.strip("[]").split())
    except UnicodeDecodeError as e:
        raise UsageError("%s: not a text alignment (%s); binary alignments need "
                         "an 'ark:' rspecifier" % (rspec.path, e.reason)) from None
    except OSError as e:
        raise kaldi_error(rspec.path, e) from None
    return out
