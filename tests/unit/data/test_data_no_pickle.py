"""A Kaldi archive is only ever read: kaldiio would unpickle an entry tagged
PKL (running whatever it names); psgd refuses it with one line."""
import pickle

import pytest

from psgd.data import load_kaldi
from psgd.errors import UsageError

kaldiio = pytest.importorskip("kaldiio")


class Payload:
    """Unpickling this creates a file: the proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("via_scp", [False, True])
def test_a_pickled_entry_is_refused_and_never_loaded(tmp_path, via_scp, monkeypatch):
    marker = tmp_path / "code-ran"
    ark, scp = str(tmp_path / "evil.ark"), str(tmp_path / "evil.scp")
    with monkeypatch.context() as m:  # psgd disarms kaldiio's pickle: re-arm it to write
        m.setattr(kaldiio.matio, "pickle", pickle)
        kaldiio.save_ark(ark, {"utt1": Payload(str(marker))}, scp=scp, write_function="pickle")
    ali = tmp_path / "ali.txt"
    ali.write_text("utt1 0 1 0\n")
    spec = "scp:" + scp if via_scp else "ark:" + ark
    with pytest.raises(UsageError, match="pickled Python object"):
        load_kaldi(spec, str(ali))
    assert not marker.exists()
