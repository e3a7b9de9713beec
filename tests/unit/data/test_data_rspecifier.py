import pytest

from psgd.data.rspecifier import parse_rspecifier
from psgd.errors import UsageError


@pytest.mark.parametrize("spec,kind,path,opts,stream", [
    ("ark:a.ark", "ark", "a.ark", set(), False),
    ("ark,t:ali.txt", "ark", "ali.txt", {"t"}, False),
    ("scp,p:data/feats.scp", "scp", "data/feats.scp", {"p"}, False),
    ("ark,s,cs:gunzip -c ali.gz |", "ark", "gunzip -c ali.gz |", {"s", "cs"}, True),
    ("data/feats.scp", "scp", "data/feats.scp", set(), False),
    ("ali.1.txt", "ark", "ali.1.txt", set(), False),
    ("ark:-", "ark", "-", set(), True),
    ("dir:with/colon.ark", "ark", "dir:with/colon.ark", set(), False),
])
def test_parse(spec, kind, path, opts, stream):
    r = parse_rspecifier(spec)
    assert (r.kind, r.path, set(r.options), r.is_stream) == (kind, path, opts, stream)


@pytest.mark.parametrize("spec", ["", "ark:", "ark,scp:x", "ark,zz:x", None])
def test_bad(spec):
    with pytest.raises(UsageError):
        parse_rspecifier(spec)
