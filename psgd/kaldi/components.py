"""The nnet1 component table: each component psgd reads and writes, with its
fields in the order Kaldi's src/nnet writes them.

A component on disk is its marker, the OUTPUT dimension, the input
dimension, its own fields and data, then "<!EndOfComponent>" (written since
2016; older files lack it, so reading accepts its absence). Markers match
case-insensitively, as in Kaldi's Component::MarkerToType.

A `Layer` is one component as data (marker, dims, scalar options, arrays);
convert.py maps Layers to and from psgd's nnet components.
"""
from dataclasses import dataclass, field

import numpy as np

END_OF_COMPONENT = "<!EndOfComponent>"


@dataclass
class Layer:
    marker: str                     # canonical spelling, e.g. "<AffineTransform>"
    input_dim: int
    output_dim: int
    options: dict = field(default_factory=dict)   # scalar fields, by token
    arrays: dict = field(default_factory=dict)    # numpy data, by name

    @property
    def name(self):
        return self.marker.strip("<>")

    def num_params(self):
        return int(sum(np.size(a) for a in self.arrays.values()))


def _options(reader, layer, defaults, where):
    """Scalar "<Token> value" fields in any order, as Kaldi's ReadData loops."""
    layer.options.update(defaults)
    while reader.peek() == "<":
        start = reader.pos
        token = reader.token("a field of %s" % where)
        if token == END_OF_COMPONENT or token.startswith("</"):
            reader.pos = start
            return
        if token == "<DropoutRetention>" and "<DropoutRate>" in defaults:
            layer.options["<DropoutRate>"] = 1.0 - reader.float(token)
            continue
        if token not in defaults:
            reader.pos = start
            reader.fail("%s: unknown field %s (psgd knows %s)"
                        % (where, token, ", ".join(defaults) or "none"))
        layer.options[token] = reader.float("the value of %s" % token)


def _write_options(writer, layer, tokens):
    for token in tokens:
        writer.token(token)
        writer.float(layer.options[token])


def _check(reader, where, ok, problem):
    if not ok:
        reader.fail("%s: %s" % (where, problem))


# --- one reader/writer pair per component ---------------------------------------------
AFFINE_FIELDS = ("<LearnRateCoef>", "<BiasLearnRateCoef>", "<MaxNorm>")
PRELU_FIELDS = ("<BiasLearnRateCoef>", "<LearnRateCoef>", "<ClipGradient>")


def _read_affine(reader, layer, where):
    _options(reader, layer, {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0,
                             "<MaxNorm>": 0.0}, where)
    w = reader.matrix("the linearity of %s" % where)
    b = reader.vector("the bias of %s" % where)
    _check(reader, where, w.shape == (layer.output_dim, layer.input_dim),
           "linearity is %dx%d, the header says %dx%d" % (w.shape + (layer.output_dim,
                                                                      layer.input_dim)))
    _check(reader, where, b.shape == (layer.output_dim,),
           "bias has %d values, the output dimension is %d" % (b.size, layer.output_dim))
    layer.arrays.update(W=w, b=b)


def _write_affine(writer, layer):
    _write_options(writer, layer, AFFINE_FIELDS)
    writer.newline()
    writer.matrix(layer.arrays["W"])
    writer.vector(layer.arrays["b"])


def _read_prelu(reader, layer, where):
    _options(reader, layer, {"<BiasLearnRateCoef>": 1.0, "<LearnRateCoef>": 1.0,
                             "<ClipGradient>": 0.0}, where)
    alpha = reader.vector("the alpha of %s" % where)
    beta = reader.vector("the beta of %s" % where)
    for name, v in (("alpha", alpha), ("beta", beta)):
        _check(reader, where, v.shape == (layer.output_dim,),
               "%s has %d values, the dimension is %d" % (name, v.size, layer.output_dim))
    layer.arrays.update(alpha=alpha, beta=beta)


def _write_prelu(writer, layer):
    _write_options(writer, layer, PRELU_FIELDS)
    writer.newline()
    writer.vector(layer.arrays["alpha"])
    writer.vector(layer.arrays["beta"])


def _read_dropout(reader, layer, where):
    _options(reader, layer, {"<DropoutRate>": 0.5}, where)
    rate = layer.options["<DropoutRate>"]
    _check(reader, where, 0 <= rate < 1, "dropout rate %g is outside [0, 1)" % rate)


def _write_dropout(writer, layer):
    _write_options(writer, layer, ("<DropoutRate>",))


def _read_splice(reader, layer, where):
    offsets = reader.int_vector("the frame offsets of %s" % where)
    _check(reader, where, offsets and len(offsets) * layer.input_dim == layer.output_dim,
           "%d offsets x input %d != output %d" % (len(offsets), layer.input_dim,
                                                   layer.output_dim))
    layer.options["offsets"] = list(offsets)


def _write_splice(writer, layer):
    writer.int_vector(layer.options["offsets"])


def _vector_reader(name):
    def read(reader, layer, where):
        # files from before 2016 have no <LearnRateCoef> here
        _options(reader, layer, {"<LearnRateCoef>": 0.0}, where)
        v = reader.vector("the %s of %s" % (name, where))
        _check(reader, where, v.shape == (layer.input_dim,) and
               layer.input_dim == layer.output_dim,
               "%d values for dimensions %d -> %d" % (v.size, layer.input_dim,
                                                      layer.output_dim))
        layer.arrays[name] = v
    return read


def _vector_writer(name):
    def write(writer, layer):
        _write_options(writer, layer, ("<LearnRateCoef>",))
        writer.vector(layer.arrays[name])
    return write


def _read_plain(reader, layer, where):
    _check(reader, where, layer.input_dim == layer.output_dim,
           "input %d != output %d" % (layer.input_dim, layer.output_dim))


def _write_plain(writer, layer):
    pass


#: canonical marker -> (read(reader, layer, where), write(writer, layer))
TABLE = {
    "<AffineTransform>": (_read_affine, _write_affine),
    "<Sigmoid>": (_read_plain, _write_plain),
    "<Tanh>": (_read_plain, _write_plain),
    "<Softmax>": (_read_plain, _write_plain),
    "<ParametricRelu>": (_read_prelu, _write_prelu),
    "<Dropout>": (_read_dropout, _write_dropout),
    "<Splice>": (_read_splice, _write_splice),
    "<AddShift>": (_vector_reader("shift"), _vector_writer("shift")),
    "<Rescale>": (_vector_reader("scale"), _vector_writer("scale")),
}
_BY_LOWER = {m.lower(): m for m in TABLE}

#: nnet1 components Kaldi knows that psgd has no form for (refused by name)
UNSUPPORTED = (
    "<LinearTransform>", "<ConvolutionalComponent>", "<Convolutional2DComponent>",
    "<LstmProjected>", "<LstmProjectedStreams>", "<BlstmProjected>",
    "<BlstmProjectedStreams>", "<RecurrentComponent>", "<HiddenSoftmax>", "<BlockSoftmax>",
    "<LengthNormComponent>", "<Rbm>", "<Copy>", "<KlHmm>", "<AveragePoolingComponent>",
    "<AveragePooling2DComponent>", "<MaxPoolingComponent>", "<MaxPooling2DComponent>",
    "<SentenceAveragingComponent>", "<SimpleSentenceAveragingComponent>",
    "<FramePoolingComponent>", "<ParallelComponent>", "<MultiBasisComponent>", "<Fsmn>",
    "<DeepFsmn>", "<UniFsmn>", "<UniDeepFsmn>",
)
_UNSUPPORTED_LOWER = {m.lower() for m in UNSUPPORTED}


def canonical_marker(token):
    """The table's spelling of a marker (case-insensitive), or None."""
    return _BY_LOWER.get(token.lower())


def is_known_unsupported(token):
    return token.lower() in _UNSUPPORTED_LOWER


def read_layer(reader, marker, index):
    """The component after its marker: dims, fields, data."""
    where = "component %d %s" % (index, marker)
    output_dim = reader.int32("the output dimension of %s" % where)
    input_dim = reader.int32("the input dimension of %s" % where)
    if output_dim < 0 or input_dim < 0:
        reader.fail("%s: negative dimension" % where)
    layer = Layer(marker, input_dim, output_dim)
    TABLE[marker][0](reader, layer, where)
    return layer


def write_layer(writer, layer):
    writer.token(layer.marker)
    writer.int32(layer.output_dim)
    writer.int32(layer.input_dim)
    writer.newline()
    TABLE[layer.marker][1](writer, layer)
    writer.token(END_OF_COMPONENT)
    writer.newline()
