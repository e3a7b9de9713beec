"""Kaldi nnet1 model files: `<Nnet>` components `</Nnet>`, binary ("\\0B"
header, Kaldi's default) or text (--binary=false), detected on reading.

    layers = read_nnet("final.nnet")            # [Layer, ...]
    write_nnet("final.nnet", layers, binary=True)

Reading follows Kaldi's Nnet::Read and Component::Read: the opening <Nnet>
is optional, the network ends at </Nnet> or (text only: a binary file
without it was cut short) the end of the file, one "<!EndOfComponent>" after
a component is optional, consecutive dimensions must agree. Writing is atomic
(a temporary file renamed over the name), so no half-written model is left.
"""

from ..atomic import atomic_write_bytes
from .components import TABLE, canonical_marker, is_known_unsupported, read_layer, write_layer
from .encoding import KaldiFormatError, Reader, Writer

SUPPORTED = ", ".join(m.strip("<>") for m in TABLE)


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise KaldiFormatError("%s: no such file" % path) from None
    except OSError as exc:
        raise KaldiFormatError("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None


def parse_nnet(data, name):
    """[Layer] of an nnet1 model held in `data` (bytes)."""
    reader = Reader(data, name)
    layers, closed = [], False
    if reader.at_end():
        reader.fail("empty file, expected an nnet1 model (<Nnet> ...)")
    while not reader.at_end():
        start = reader.pos
        token = reader.token("a component marker")
        if token == "<Nnet>":       # Component::Read skips it before a marker
            start = reader.pos
            token = reader.token("a component marker")
        if token == "</Nnet>":
            closed = True
            break
        marker = canonical_marker(token)
        if marker is None:
            reader.pos = start
            if is_known_unsupported(token):
                reader.fail("component %d %s has no psgd form (psgd reads %s)"
                            % (len(layers) + 1, token, SUPPORTED))
            reader.fail("%r is not an nnet1 component marker (psgd reads %s)"
                        % (token[:40], SUPPORTED))
        layer = read_layer(reader, marker, len(layers) + 1)
        if layers and layers[-1].output_dim != layer.input_dim:
            reader.fail("component %d %s takes %d inputs but component %d gives %d"
                        % (len(layers) + 1, marker, layer.input_dim, len(layers),
                           layers[-1].output_dim))
        layers.append(layer)
    if reader.binary and not closed:
        # every Kaldi writer ends a binary model with </Nnet>: without it the file
        # was cut short (text prototypes written by hand may omit it)
        reader.fail("truncated: the binary model ends without </Nnet>")
    return layers


def read_nnet(path):
    return parse_nnet(read_bytes(path), path)


def encode_nnet(layers, binary=True):
    writer = Writer(binary)
    writer.token("<Nnet>")
    writer.newline()
    for layer in layers:
        write_layer(writer, layer)
    writer.token("</Nnet>")
    writer.newline()
    return writer.getvalue()


def write_nnet(path, layers, binary=True):
    atomic_write_bytes(path, encode_nnet(layers, binary))


def info(layers):
    """Lines like Kaldi's nnet-info: totals, then one line per component."""
    total = sum(layer.num_params() for layer in layers)
    lines = ["num-components %d" % len(layers),
             "input-dim %d" % (layers[0].input_dim if layers else 0),
             "output-dim %d" % (layers[-1].output_dim if layers else 0),
             "number-of-parameters %g millions" % (total / 1e6)]
    for i, layer in enumerate(layers, 1):
        extra = ", ".join("%s %g" % (k.strip("<>"), v) for k, v in layer.options.items()
                          if not isinstance(v, list))
        if "offsets" in layer.options:
            extra = "frame_offsets %s" % layer.options["offsets"]
        lines.append("component %d : %s, input-dim %d, output-dim %d%s"
                     % (i, layer.marker, layer.input_dim, layer.output_dim,
                        ", " + extra if extra else ""))
    return lines
