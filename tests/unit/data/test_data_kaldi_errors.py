"""Bad Kaldi input ends in one UsageError line naming the file and the problem."""
import numpy as np
import pytest

from psgd.data.kaldi import load_kaldi
from psgd.errors import UsageError


def _one_line(excinfo, *words):
    msg = str(excinfo.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    # Raised "from None": no kaldiio traceback chained underneath.
    err = excinfo.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_missing_feature_archive(corpus):
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + corpus.path("nope.ark"), corpus.write_ali_text())
    _one_line(e, "nope.ark", "no such file")


def test_missing_scp_and_missing_archive_behind_it(corpus):
    with pytest.raises(UsageError) as e:
        load_kaldi("scp:" + corpus.path("nope.scp"), corpus.write_ali_text())
    _one_line(e, "nope.scp", "no such file")
    ark, scp = corpus.write_feats()
    text = open(scp).read().replace(ark, corpus.path("gone.ark"))
    open(scp, "w").write(text)
    with pytest.raises(UsageError) as e:
        load_kaldi("scp:" + scp, corpus.write_ali_text())
    _one_line(e, "feats.scp", "gone.ark", "no such file", "utterance")


def test_missing_targets_file(corpus):
    ark, _ = corpus.write_feats()
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, corpus.path("no_ali.txt"))
    _one_line(e, "no_ali.txt", "no such file")


@pytest.mark.parametrize("text", [False, True])
@pytest.mark.parametrize("chop", [2, 7, 40])  # 1 byte of text is just the final newline
def test_truncated_feature_archive(corpus, text, chop):
    ark, _ = corpus.write_feats(text=text)
    data = open(ark, "rb").read()
    open(ark, "wb").write(data[:-chop])
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, corpus.write_ali_text())
    _one_line(e, "feats.ark", "truncated or corrupt")


def test_truncated_archive_behind_scp(corpus):
    ark, scp = corpus.write_feats()
    other, _ = load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=1, size=2)
    data = open(ark, "rb").read()
    open(ark, "wb").write(data[:-12])
    # The last entry written is the first id in sorted order (utt00).
    with pytest.raises(UsageError) as e:
        load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=0, size=2)
    _one_line(e, "feats.scp", "utt00", "truncated or corrupt")
    # The other shard's entries are whole, so that worker reads fine.
    ds, _ = load_kaldi("scp:" + scp, corpus.write_ali_text(), rank=1, size=2)
    assert ds.train_utts.keys == other.train_utts.keys and "utt00" not in ds.train_utts.keys


def test_truncated_alignment_archive(corpus):
    ark, _ = corpus.write_feats()
    ali = corpus.write_ali_ark()
    data = open(ali, "rb").read()
    open(ali, "wb").write(data[:-3])
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, "ark:" + ali)
    _one_line(e, "ali.ark", "truncated or corrupt")


def test_empty_scp_and_empty_archive(corpus):
    open(corpus.path("empty.scp"), "w").close()
    open(corpus.path("empty.ark"), "w").close()
    with pytest.raises(UsageError) as e:
        load_kaldi("scp:" + corpus.path("empty.scp"), corpus.write_ali_text())
    _one_line(e, "empty.scp", "empty scp")
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + corpus.path("empty.ark"), corpus.write_ali_text())
    _one_line(e, "empty.ark", "empty")


def test_bad_scp_line(corpus):
    ark, scp = corpus.write_feats()
    with open(scp, "a") as f:
        f.write("lonely-id\n")
    with pytest.raises(UsageError) as e:
        load_kaldi("scp:" + scp, corpus.write_ali_text())
    _one_line(e, "feats.scp")


@pytest.mark.parametrize("bad", ["x", "1.5", "99999999999999999999999"])
def test_non_integer_text_alignment(corpus, bad):
    ark, _ = corpus.write_feats()
    path = corpus.write_ali_text()
    lines = open(path).read().splitlines()
    lines[1] = lines[1] + " " + bad          # second line: utt03 (written in reverse order)
    open(path, "w").write("\n".join(lines) + "\n")
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, path)
    _one_line(e, "ali.txt:2", "utt03", repr(bad))


def test_float_vectors_are_not_targets(corpus):
    ark, _ = corpus.write_feats()
    floats = {k: v.astype(np.float32) for k, v in corpus.ali.items()}
    path = corpus.write_ali_ark("f_ali.ark", ali=floats)
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, "ark:" + path)
    _one_line(e, "f_ali.ark", "vector of integers")


def test_alignment_as_features_is_rejected(corpus):
    path = corpus.write_ali_ark()
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + path, path)
    _one_line(e, "ali.ark", "expected a matrix")


def test_label_out_of_range_names_the_utterance(corpus):
    ark, _ = corpus.write_feats()
    ali = dict(corpus.ali)
    ali["utt01"] = np.full(len(ali["utt01"]), 4, dtype=np.int32)
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, "ark:" + corpus.write_ali_ark(ali=ali), num_classes=4)
    _one_line(e, "utt01", "target 4", "0..3")


def test_negative_label_names_the_utterance(corpus):
    ark, _ = corpus.write_feats()
    ali = dict(corpus.ali)
    ali["utt02"] = ali["utt02"].copy()
    ali["utt02"][3] = -2
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, corpus.write_ali_text(ali=ali))
    _one_line(e, "utt02", "target -2")


def test_feature_dimensions_must_agree(corpus):
    feats = dict(corpus.feats)
    feats["utt02"] = np.zeros((len(feats["utt02"]), 5), dtype=np.float32)
    ark, _ = corpus.write_feats(feats=feats)
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, corpus.write_ali_text())
    _one_line(e, "feats.ark", "different feature dimensions")


@pytest.mark.parametrize("kwargs,word", [
    (dict(splice=-1), "splice"), (dict(splice=1.5), "splice"),
    (dict(num_classes=0), "num_classes"), (dict(cv_feats="ark:x.ark"), "cv"),
])
def test_bad_arguments(corpus, kwargs, word):
    ark, _ = corpus.write_feats()
    with pytest.raises(UsageError, match=word):
        load_kaldi("ark:" + ark, corpus.write_ali_text(), **kwargs)


def test_stdin_cannot_be_sharded(corpus):
    with pytest.raises(UsageError, match="stdin"):
        load_kaldi("ark:-", corpus.write_ali_text())


def test_failing_pipe_command(corpus):
    ark, _ = corpus.write_feats()
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:exit 3 |", corpus.write_ali_text())
    _one_line(e, "exit 3 |", "exit status 3")
    with pytest.raises(UsageError) as e:
        load_kaldi("ark:" + ark, "ark:cat %s; exit 2 |" % corpus.write_ali_ark())
    _one_line(e, "exit status 2")
