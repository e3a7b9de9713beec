"""The nnet1 component table: each component psgd reads and writes, read and
written as its ReadData/WriteData in Kaldi's src/nnet does.

A component on disk is its marker, the OUTPUT dimension, the input
dimension, its own fields and data, then "<!EndOfComponent>" (written since
2016; older files lack it, so reading accepts its absence). Markers match
case-insensitively, as in Kaldi's Component::MarkerToType. Scalar fields are
read in any order, each told by its first letter; a field a file lacks takes
the value Kaldi's constructor gives it (FIELDS).

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


#: each component's scalar fields in the order its WriteData writes them, with the
#: value its constructor gives (what a file without the field reads as)
FIELDS = {
    "<AffineTransform>": {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0,
                          "<MaxNorm>": 0.0},
    "<ParametricRelu>": {"<AlphaLearnRateCoef>": 0.0, "<BetaLearnRateCoef>": 0.0},
    "<Dropout>": {"<DropoutRate>": 0.5},
    "<AddShift>": {"<LearnRateCoef>": 1.0},
    "<Rescale>": {"<LearnRateCoef>": 1.0},
}
#: fields read but never written: Dropout's 2014-2016 spelling (rate = 1 - value)
RETENTION = "<DropoutRetention>"
#: the ParametricRelu fields psgd wrote before it followed Kaldi (always 0, and
#: alpha, beta after them as now): read and dropped so those models still load
_OLD_PSGD_PRELU = ("<BiasLearnRateCoef>", "<LearnRateCoef>", "<ClipGradient>")


def _read_fields(reader, layer, where, once=False):
    """Scalar "<Token> value" fields as Kaldi's ReadData loops over them: in any
    order, each told by its first letter after '<' (a token with a field's letter
    but another spelling fails like Kaldi's ExpectToken); `once`: AddShift and
    Rescale take one optional field, not a loop."""
    fields = FIELDS[layer.marker]
    layer.options.update(fields)
    while reader.peek() == "<":
        if reader.peek_token() in "!/":
            return      # <!EndOfComponent> or </Nnet>: the framing's, not a field
        start = reader.pos
        token = reader.token("a field of %s" % where)
        if layer.marker == "<Dropout>" and token == RETENTION:
            layer.options["<DropoutRate>"] = 1.0 - reader.float(token)
        elif layer.marker == "<ParametricRelu>" and token in _OLD_PSGD_PRELU:
            reader.float(token)
        elif token in fields:
            layer.options[token] = reader.float("the value of %s" % token)
        else:
            same_letter = list(fields) if once else [t for t in fields if t[:2] == token[:2]]
            reader.pos = start
            if same_letter:
                reader.fail("%s: expected %s, found %s" % (where, same_letter[0], token[:40]))
            reader.fail("%s: unknown field %s (Kaldi's %s has %s)"
                        % (where, token[:40], layer.name, ", ".join(fields)))
        if once:
            return


def _write_fields(writer, layer):
    fields = FIELDS[layer.marker]
    stray = set(layer.options) - set(fields)
    if stray:
        raise ValueError("%s has no field %s (Kaldi writes %s)"
                         % (layer.marker, ", ".join(sorted(stray)), ", ".join(fields)))
    for token, default in fields.items():
        writer.token(token)
        writer.float(layer.options.get(token, default))


def _check(reader, where, ok, problem):
    if not ok:
        reader.fail("%s: %s" % (where, problem))


# --- one reader/writer pair per component, each following its ReadData/WriteData -------
def _read_affine(reader, layer, where):
    _read_fields(reader, layer, where)
    w = reader.matrix("the linearity of %s" % where)
    b = reader.vector("the bias of %s" % where)
    _check(reader, where, w.shape == (layer.output_dim, layer.input_dim),
           "linearity is %dx%d, the header says %dx%d" % (w.shape + (layer.output_dim,
                                                                      layer.input_dim)))
    _check(reader, where, b.shape == (layer.output_dim,),
           "bias has %d values, the output dimension is %d" % (b.size, layer.output_dim))
    layer.arrays.update(W=w, b=b)


def _write_affine(writer, layer):
    _write_fields(writer, layer)
    writer.newline()
    writer.matrix(layer.arrays["W"])
    writer.vector(layer.arrays["b"])


def _read_prelu(reader, layer, where):
    _read_fields(reader, layer, where)
    alpha = reader.vector("the alpha of %s" % where)
    beta = reader.vector("the beta of %s" % where)
    for name, v in (("alpha", alpha), ("beta", beta)):
        _check(reader, where, v.shape == (layer.output_dim,),
               "%s has %d values, the dimension is %d" % (name, v.size, layer.output_dim))
    layer.arrays.update(alpha=alpha, beta=beta)


def _write_prelu(writer, layer):
    _write_fields(writer, layer)
    writer.newline()
    writer.vector(layer.arrays["alpha"])
    writer.vector(layer.arrays["beta"])


def _read_dropout(reader, layer, where):
    _read_fields(reader, layer, where)
    rate = layer.options["<DropoutRate>"]
    _check(reader, where, 0 <= rate < 1, "dropout rate %g is outside [0, 1)" % rate)


def _write_dropout(writer, layer):
    _write_fields(writer, layer)


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
        _read_fields(reader, layer, where, once=True)
        v = reader.vector("the %s of %s" % (name, where))
        _check(reader, where, v.shape == (layer.input_dim,) and
               layer.input_dim == layer.output_dim,
               "%d values for dimensions %d -> %d" % (v.size, layer.input_dim,
                                                      layer.output_dim))
        layer.arrays[name] = v
    return read


def _vector_writer(name):
    def write(writer, layer):
        _write_fields(writer, layer)
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
    # Kaldi's Component::Read eats the separator when one follows (a file from
    # before 2016 has none); only the exact token, as ExpectToken takes it
    if reader.peek() == "<" and reader.peek_token() == "!":
        reader.expect(END_OF_COMPONENT)
    return layer


def write_layer(writer, layer):
    writer.token(layer.marker)
    writer.int32(layer.output_dim)
    writer.int32(layer.input_dim)
    writer.newline()
    TABLE[layer.marker][1](writer, layer)
    writer.token(END_OF_COMPONENT)
    writer.newline()
