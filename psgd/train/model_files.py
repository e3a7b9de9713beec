"""The trainer's model files: what --init reads and what --out writes.

--init: a psgd .npz (a zip: detected by content) or a Kaldi nnet1 model
(binary or text, e.g. the output of nnet-initialize), anything else is
read as nnet1 and refused in one line if it is not.
--out NAME.nnet writes nnet1 (binary unless --binary false) and next to it
final.feature_transform (the splice + CMVN the model was trained with, or
the --feature-transform given) and ali_train_pdf.counts, the layout of
steps/nnet/train.sh; any other name writes a self-contained .npz holding
the network, the feature transform and the class frame counts.

A network read from nnet1 is described in the .npz header by its layers
(name "nnet1"), so it round-trips through .npz too.
"""
import os

import numpy as np

from .. import kaldi_io
from ..errors import UsageError
from ..nnet import build_model
from . import consistency, model_io

TRANSFORM_KEY = "feature_transform"   # nnet1 binary bytes of the transform, uint8
COUNTS_KEY = "class_counts"
EXTRA_KEYS = (TRANSFORM_KEY, COUNTS_KEY)
TRANSFORM_FILE = "final.feature_transform"
COUNTS_FILE = "ali_train_pdf.counts"


def writes_nnet1(path):
    return bool(path) and path.endswith(".nnet")


def is_npz(path):
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"PK"
    except FileNotFoundError:
        raise UsageError("%s: no such file" % path) from None
    except OSError as exc:
        raise UsageError("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None


def read_model(path, xp=np, seed=0):
    """(net, model header, extras {feature_transform, class_counts}) of a model file."""
    if not is_npz(path):
        layers = kaldi_io.read_nnet(path)
        net = kaldi_io.network_of(layers, xp=xp, seed=seed, name=path)
        return net, _nnet1_header(layers, net), {}
    arrays, header = model_io.load(path)
    if "rank" in header and "epoch" in header:
        raise UsageError("%s is a checkpoint file (rank %s's of epoch %s), not a model: resume "
                         "it with --checkpoint-dir and --resume, or give a model written with "
                         "--out" % (path, header["rank"], header["epoch"] + 1
                                    if isinstance(header["epoch"], int) else header["epoch"]))
    extras = {k: arrays.pop(k) for k in EXTRA_KEYS if k in arrays}
    model = header.get("model", {})
    net = network_from_header(model, xp, seed, path)
    try:
        net.load_state_dict(arrays)
    except UsageError as exc:
        raise UsageError("%s: %s" % (path, exc)) from None
    except (KeyError, ValueError, TypeError) as exc:
        raise UsageError("%s: its arrays do not fit the model its header describes (%s)"
                         % (path, _first_line(exc))) from None
    if TRANSFORM_KEY in extras:
        extras[TRANSFORM_KEY] = kaldi_io.FeatureTransform.parse(
            extras[TRANSFORM_KEY].tobytes(), "%s (its feature transform)" % path)
    return net, model, extras


def network_from_header(model, xp, seed, name):
    """The network a header describes; a header that describes none (edited
    by hand: the checksum covers the arrays only) is one line naming `name`."""
    try:
        if not isinstance(model, dict):
            raise TypeError("'model' is not an object")
        if model.get("name") == "nnet1":
            return kaldi_io.network_from_spec(model.get("layers", []), xp=xp, seed=seed, name=name)
        return build_model(model.get("name"), tuple(model.get("input_shape", ())),
                           model.get("num_classes"), xp=xp, seed=seed, **model.get("sizes", {}))
    except UsageError as exc:
        text = str(exc)
        raise UsageError(text if text.startswith(name) else "%s: %s" % (name, text)) from None
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError("%s: malformed model header (%s)" % (name, _first_line(exc))) from None


def _first_line(exc):
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text or type(exc).__name__


def files_written(path, data=None):
    """[path, side files...]: what save_model(path, ..., data) writes."""
    if not writes_nnet1(path):
        return [path]
    folder = os.path.dirname(path)
    sides = [(TRANSFORM_FILE, getattr(data, "feature_transform", None)),
             (COUNTS_FILE, getattr(data, "class_counts", None))]
    return [path] + [os.path.join(folder, name) for name, extra in sides if extra is not None]


def check_extras(model, name, transform=None, counts=None, counts_name=None):
    """Refuse a feature transform whose output is not the input of the model
    `name` (its header `model`), or class counts of another length than its
    outputs: stored or applied, either would fail only at decoding."""
    want = int(np.prod(model.get("input_shape") or [0]))
    if transform is not None and transform.output_dim != want:
        raise UsageError("%s gives features of dimension %d, but %s takes %d"
                         % (transform.name, transform.output_dim, name, want))
    classes = model.get("num_classes")
    if counts is not None and classes is not None and len(counts) != int(classes):
        raise UsageError("%s has counts of %d classes, but %s has %d outputs"
                         % (counts_name or "the class frame counts", len(counts), name,
                            classes))


def _nnet1_header(layers, net):
    return {"name": "nnet1", "input_shape": [layers[0].input_dim],
            "num_classes": int(layers[-1].output_dim), "layers": kaldi_io.spec_of(layers),
            "dtype": str(net.dtype)}


def read_transform(feature_transform, init):
    """The feature transform this run applies to its input, or None (psgd's own
    splice + CMVN): --feature-transform, else the one stored in an --init .npz."""
    if feature_transform:
        return kaldi_io.FeatureTransform.read(feature_transform)
    if init and is_npz(init):
        arrays, _ = model_io.load(init)
        if TRANSFORM_KEY in arrays:
            return kaldi_io.FeatureTransform.parse(arrays[TRANSFORM_KEY].tobytes(),
                                                "%s (its feature transform)" % init)
    return None


def build_network(config, data, xp):
    """(net, model header) for the trainer's Config: --init's model, or a
    fresh one."""
    model, seed, out = config.model, config.run.seed, config.outputs.out
    sizes = model.sizes()
    if model.init:
        net, saved, _ = read_model(model.init, xp=xp, seed=seed)
        if "sizes" in saved:   # a psgd model records its sizes; an nnet1 file has none to compare
            consistency.check_init(model, model.init, saved["sizes"], saved.get("name"))
        saved_shape = tuple(saved.get("input_shape", ()))
        if saved_shape != tuple(data.input_shape):
            raise UsageError("%s expects inputs of shape %s, the data has %s"
                             % (model.init, saved_shape, tuple(data.input_shape)))
        data.num_classes = saved.get("num_classes", data.num_classes)
        header = dict(saved, sizes=saved.get("sizes", sizes))
    else:
        net = build_model(model.model, data.input_shape, data.num_classes, xp=xp,
                          seed=seed, **sizes)
        header = {"name": model.model, "input_shape": list(data.input_shape),
                  "num_classes": int(data.num_classes), "sizes": sizes,
                  "dtype": str(net.dtype)}
    if writes_nnet1(out):
        kaldi_io.layers_of(net, name="--out %s" % out)   # refuse now, not after training
    return net, header


def save_model(path, state, header, data=None, binary=True):
    """Write the model `state` (a state_dict) described by `header`; see the
    module docstring for what goes where."""
    transform = getattr(data, "feature_transform", None)
    counts = getattr(data, "class_counts", None)
    if writes_nnet1(path):
        net = network_from_header(header["model"], np, 0, path)
        net.load_state_dict(state)
        files = iter(files_written(path, data)[1:])
        # the side files first: a model is never left without them
        if transform is not None:
            transform.write(next(files), binary=False)
        if counts is not None:
            kaldi_io.write_counts(next(files), counts)
        kaldi_io.write_nnet(path, kaldi_io.layers_of(net, name=path), binary=binary)
        return
    arrays = dict(state)
    if transform is not None:
        arrays[TRANSFORM_KEY] = np.frombuffer(transform.encode(binary=True), dtype=np.uint8)
    if counts is not None:
        arrays[COUNTS_KEY] = np.asarray(counts, dtype=np.int64)
    model_io.save(path, arrays, header)
