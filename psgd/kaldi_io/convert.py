"""nnet1 Layers <-> psgd networks.

    layers = layers_of(net)                    # psgd Network -> [Layer]
    net = network_of(layers, xp, dtype, seed)  # [Layer] -> psgd Network (values loaded)
    spec = spec_of(net); net = network_from_spec(spec)   # a JSON-able description

The mapping is exact or refused: psgd's ReLU is nnet1's ParametricRelu with
alpha 1 and beta 0 (the CUDA kernel computes alpha*x for x > 0, beta*x
otherwise) written with zero learning-rate coefficients so Kaldi keeps it a
ReLU; a ParametricRelu with other values, AddShift/Rescale inside a model
(they belong to the feature transform) and psgd layers without an nnet1 form
(Conv1d, MaxPool1d, LSTM, BatchNorm, reshapes) are refused with one line
naming the layer.
"""
import numpy as np

from psgd.backend import to_numpy
from psgd.errors import UsageError
from psgd.nnet import (AffineTransform, Dropout, Network, ReLU, Sigmoid, Softmax, Splice,
                       Tanh)

from .components import Layer

_PLAIN = {"<Sigmoid>": Sigmoid, "<Tanh>": Tanh, "<Softmax>": Softmax}
_PLAIN_KIND = {"sigmoid": "<Sigmoid>", "tanh": "<Tanh>", "softmax": "<Softmax>"}


# --- psgd -> nnet1 ---------------------------------------------------------------------
def layers_of(net, name="the model"):
    """[Layer] for a psgd Network; a layer with no nnet1 form is a UsageError."""
    layers, width = [], None
    for i, comp in enumerate(net.components):
        kind = comp.kind
        if kind == "affine":
            layer = Layer("<AffineTransform>", comp.input_dim, comp.output_dim,
                          {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0, "<MaxNorm>": 0.0},
                          {"W": to_numpy(comp.W).astype(np.float32),
                           "b": to_numpy(comp.b).astype(np.float32)})
        elif kind in _PLAIN_KIND or kind in ("relu", "dropout"):
            if width is None:
                raise UsageError("%s: layer %d %r comes first, so its width is unknown to "
                                 "nnet1" % (name, i, comp))
            if kind == "relu":
                layer = Layer("<ParametricRelu>", width, width,
                              {"<AlphaLearnRateCoef>": 0.0, "<BetaLearnRateCoef>": 0.0},
                              {"alpha": np.ones(width, np.float32),
                               "beta": np.zeros(width, np.float32)})
            elif kind == "dropout":
                layer = Layer("<Dropout>", width, width, {"<DropoutRate>": comp.rate})
            else:
                layer = Layer(_PLAIN_KIND[kind], width, width)
        elif kind == "splice":
            layer = Layer("<Splice>", comp.input_dim, comp.output_dim,
                          {"offsets": list(comp.offsets)})
        else:
            raise UsageError("%s: layer %d %r has no nnet1 form (nnet1 takes AffineTransform, "
                             "ReLU, Sigmoid, Tanh, Softmax, Dropout, Splice)" % (name, i, comp))
        width = layer.output_dim
        layers.append(layer)
    return layers


# --- nnet1 -> psgd ---------------------------------------------------------------------
def _component_of(layer, index, name):
    marker = layer.marker
    if marker == "<AffineTransform>":
        return AffineTransform(layer.input_dim, layer.output_dim)
    if marker in _PLAIN:
        return _PLAIN[marker]()
    if marker == "<ParametricRelu>":
        alpha, beta = layer.arrays["alpha"], layer.arrays["beta"]
        if not (np.all(alpha == 1) and np.all(beta == 0)):
            raise UsageError("%s: component %d <ParametricRelu> has alpha != 1 or beta != 0, "
                             "which psgd's ReLU cannot represent" % (name, index))
        return ReLU()
    if marker == "<Dropout>":
        return Dropout(layer.options["<DropoutRate>"])
    if marker == "<Splice>":
        return Splice(layer.input_dim, offsets=layer.options["offsets"])
    raise UsageError("%s: component %d %s belongs in a feature transform, not in a model "
                     "psgd trains (give it with --feature-transform)" % (name, index, marker))


def network_of(layers, xp=np, dtype=np.float32, seed=0, name="the model"):
    """A psgd Network holding the values of `layers`."""
    if not layers:
        raise UsageError("%s: the nnet1 model has no components" % name)
    comps = [_component_of(layer, i + 1, name) for i, layer in enumerate(layers)]
    net = Network(comps, xp=xp, dtype=dtype, seed=seed)
    for comp, layer in zip(comps, layers):
        if comp.kind == "affine":
            comp.W[...] = xp.asarray(layer.arrays["W"], dtype=net.dtype)
            comp.b[...] = xp.asarray(layer.arrays["b"], dtype=net.dtype)
    net.input_shape = (layers[0].input_dim,)
    net.output_shape = (layers[-1].output_dim,)
    return net


# --- a JSON-able description, so an .npz can rebuild any nnet1-shaped network -------------
def spec_of(layers):
    """[[marker, input_dim, output_dim, {scalar options}], ...] (no arrays)."""
    return [[layer.marker, layer.input_dim, layer.output_dim, dict(layer.options)]
            for layer in layers]


def network_from_spec(spec, xp=np, dtype=np.float32, seed=0, name="the model"):
    """A freshly initialised Network of the described shape (values from `seed`)."""
    try:
        layers = [Layer(str(m), int(i), int(o), dict(opts)) for m, i, o, opts in spec]
    except (TypeError, ValueError):
        raise UsageError("%s: corrupt layer description" % name) from None
    for layer in layers:
        if layer.marker == "<ParametricRelu>":
            layer.arrays.update(alpha=np.ones(layer.output_dim), beta=np.zeros(layer.output_dim))
    comps = [_component_of(layer, i + 1, name) for i, layer in enumerate(layers)]
    net = Network(comps, xp=xp, dtype=dtype, seed=seed)
    net.input_shape = (layers[0].input_dim,)
    net.output_shape = (layers[-1].output_dim,)
    return net
