"""Kaldi's write specifiers as ClassifyWspecifier/ClassifyWxfilename read them."""
import pytest

from psgd.errors import UsageError
from psgd.kaldi_io.wspecifier import Wspecifier, parse


@pytest.mark.parametrize("text,want", [
    ("ark:o.ark", Wspecifier("o.ark")),
    ("o.ark", Wspecifier("o.ark")),                       # psgd's shorthand
    ("ark:-", Wspecifier("-")),
    ("ark:", Wspecifier("-")),                            # empty: standard output too
    ("ark,t:o.ark", Wspecifier("o.ark", text=True)),
    ("ark,b,f:o.ark", Wspecifier("o.ark")),
    ("ark,t,b:o.ark", Wspecifier("o.ark")),               # the last of t/b wins
    ("ark,scp:o.ark,o.scp", Wspecifier("o.ark", "o.scp")),
    ("ark,scp,t,nf,p:o.ark,dir/o.scp", Wspecifier("o.ark", "dir/o.scp", text=True)),
    ("ark,scp:o.ark,a,b", Wspecifier("o.ark", "a,b")),    # the first comma splits
])
def test_accepted(text, want):
    assert parse(text) == want
    assert parse(text).stdout == (want.ark == "-")


@pytest.mark.parametrize("text,needle", [
    ("scp,ark:a,b", "wrong order"), ("ark,ark:a", "wrong order"),
    ("ark,,t:a", "unknown option ''"), ("arc:a", "unknown option 'arc'"),
    ("scp:a.scp", "scp: alone"), ("t:a", "no ark"),
    ("ark,scp:a", "two names"), ("ark,scp:,b", "two names"),
    ("ark,scp:a,a", "one file"), ("ark,scp:-,b", "in a file"),
    ("ark:|gzip -c > x", "pipes"), ("ark:a ", "space"),
])
def test_refused_in_one_line_naming_it(text, needle):
    with pytest.raises(UsageError) as info:
        parse(text)
    assert str(info.value).startswith(text + ": ") and needle in str(info.value)
    assert "\n" not in str(info.value)
