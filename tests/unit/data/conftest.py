"""Tiny Kaldi corpora written on the fly with kaldiio."""
import numpy as np
import pytest

kaldiio = pytest.importorskip("kaldiio")


class Corpus:
    """Features (varying lengths) and matching frame targets in every format."""

    def __init__(self, root, num_utts=5, dim=3, num_classes=4, seed=0):
        rng = np.random.default_rng(seed)
        self.root = root
        # Ids written out of order: readers must sort them for sharding.
        keys = ["utt%02d" % i for i in range(num_utts)][::-1]
        self.feats = {k: (rng.normal(size=(4 + 2 * i, dim)) * 3 + 1).astype(np.float32)
                      for i, k in enumerate(keys)}
        self.ali = {k: rng.integers(0, num_classes, size=len(v)).astype(np.int32)
                    for k, v in self.feats.items()}

    def path(self, name):
        return str(self.root / name)

    def write_feats(self, name="feats", text=False, feats=None):
        """(ark path, scp path)."""
        ark, scp = self.path(name + ".ark"), self.path(name + ".scp")
        kaldiio.save_ark(ark, feats or self.feats, scp=scp, text=text)
        return ark, scp

    def write_ali_ark(self, name="ali.ark", ali=None, text=False):
        kaldiio.save_ark(self.path(name), ali if ali is not None else self.ali, text=text)
        return self.path(name)

    def write_ali_text(self, name="ali.txt", ali=None):
        ali = ali if ali is not None else self.ali
        with open(self.path(name), "w") as f:
            for k, v in ali.items():
                f.write("%s %s\n" % (k, " ".join(str(int(t)) for t in v)))
        return self.path(name)

    @property
    def sorted_keys(self):
        return sorted(self.feats)


@pytest.fixture
def corpus(tmp_path):
    return Corpus(tmp_path)
