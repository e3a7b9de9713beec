"""Kaldi feature transforms: the input side of an nnet1 model.

steps/nnet/train.sh builds final.feature_transform as <Splice> (frame
context) then <AddShift> (minus the global mean) and <Rescale> (one over the
global standard deviation) of the spliced features; speech toolkits ship
CMVN-only ones (am.mvn: AddShift + Rescale). nnet-forward applies it to each
utterance before the network.

    ft = FeatureTransform.read("final.feature_transform")
    x = ft.apply(frames, offsets)        # (N, F) frames, utterance u = rows offsets[u]:offsets[u+1]
    ft = FeatureTransform.from_cmvn(dim, context, mean, std)   # psgd's own splice + CMVN
    ft.write(path, binary=False)

Splice clamps frame indices at the utterance edges (Kaldi's cu::Splice), so
context never crosses from one utterance into the next. AffineTransform
(an LDA-like matrix) is applied too; other components are refused by name.
"""
import numpy as np

from psgd.errors import UsageError

from ..atomic import atomic_write_bytes
from .components import Layer
from .nnet1 import encode_nnet, parse_nnet, read_bytes

APPLIED = ("<Splice>", "<AddShift>", "<Rescale>", "<AffineTransform>")


class FeatureTransform:
    def __init__(self, layers, name="feature transform"):
        self.name = name
        if not layers:
            raise UsageError("%s: the feature transform has no components" % name)
        for i, layer in enumerate(layers, 1):
            if layer.marker not in APPLIED:
                raise UsageError("%s: component %d %s cannot be applied to features (psgd "
                                 "applies %s)" % (name, i, layer.marker,
                                                  ", ".join(m.strip("<>") for m in APPLIED)))
        self.layers = list(layers)

    # --- construction ----------------------------------------------------------------
    @classmethod
    def read(cls, path):
        return cls.parse(read_bytes(path), path)

    @classmethod
    def parse(cls, data, name):
        return cls(parse_nnet(data, name), name)

    @classmethod
    def from_cmvn(cls, dim, context, mean=None, std=None):
        """Splice -context..context, then (when given) the global mean and std of the
        raw features repeated for each spliced block: train.sh's layout."""
        offsets = list(range(-int(context), int(context) + 1))
        out = dim * len(offsets)
        layers = [Layer("<Splice>", dim, out, {"offsets": offsets})]
        if mean is not None:
            blocks = len(offsets)
            layers.append(Layer("<AddShift>", out, out, {"<LearnRateCoef>": 0.0},
                                {"shift": np.tile(-np.asarray(mean), blocks).astype(np.float32)}))
            layers.append(Layer("<Rescale>", out, out, {"<LearnRateCoef>": 0.0},
                                {"scale": np.tile(1.0 / np.asarray(std), blocks)
                                 .astype(np.float32)}))
        return cls(layers, "psgd's splice + CMVN")

    # --- shape -----------------------------------------------------------------------
    @property
    def input_dim(self):
        return self.layers[0].input_dim

    @property
    def output_dim(self):
        return self.layers[-1].output_dim

    # --- output ----------------------------------------------------------------------
    def encode(self, binary=False):
        return encode_nnet(self.layers, binary)

    def write(self, path, binary=False):
        atomic_write_bytes(path, self.encode(binary))

    # --- applying ----------------------------------------------------------------------
    def apply(self, x, offsets=None):
        """The transformed frames of x (N, input_dim), float32; utterances end at
        `offsets` (default: x is one utterance)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise UsageError("%s expects features of dimension %d, got shape %s"
                             % (self.name, self.input_dim, x.shape))
        offsets = np.asarray([0, len(x)] if offsets is None else offsets, dtype=np.int64)
        for layer in self.layers:
            x = _apply(layer, x, offsets)
        return x


def _apply(layer, x, offsets):
    if layer.marker == "<Splice>":
        lengths = np.diff(offsets)
        first = np.repeat(offsets[:-1], lengths)
        last = np.repeat(offsets[1:] - 1, lengths)
        rows = np.arange(len(x), dtype=np.int64)[:, None] + np.asarray(layer.options["offsets"])
        rows = np.clip(rows, first[:, None], last[:, None])
        return x[rows].reshape(len(x), layer.output_dim)
    if layer.marker == "<AddShift>":
        return x + layer.arrays["shift"]
    if layer.marker == "<Rescale>":
        return x * layer.arrays["scale"]
    return x @ layer.arrays["W"].T + layer.arrays["b"]
