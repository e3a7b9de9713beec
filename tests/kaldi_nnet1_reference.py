"""An nnet1 model reader and writer for tests, written from Kaldi's sources
(kaldi-asr/kaldi) and nothing of psgd's, so psgd's files are checked against
Kaldi's format rather than against psgd's own reader. The basic I/O is
kaldi_io_reference.py; here each function names the Kaldi function it follows:
    src/nnet/nnet-nnet.cc                  Nnet::Read / Write
    src/nnet/nnet-component.cc             Component::Read / Write
    src/nnet/nnet-*.h                      each component's ReadData / WriteData

A model is a list of dicts: {"type": "<AffineTransform>", "in": 3, "out": 2,
<field token>: value, ..., <array name>: ndarray}. Reading records every item
it takes, in order, as (kind, value) pairs: the token sequence a file holds.

    model, items = read_nnet(data)
    data = write_nnet(model, binary)
    post = forward(ft_model + model, frames)       # one utterance, as nnet-forward
"""
import numpy as np

from kaldi_io_reference import Input, KaldiError, Output


# --- src/nnet/nnet-*.h: ReadData / WriteData of each component -----------------------
def _unknown(s):
    raise KaldiError("Unknown token: " + s.read_token())


def _by_first_letter(s, c, defaults):
    """The `while ('<' == Peek) switch (PeekToken)` loop: each case's letter, then
    ExpectToken of its one spelling; `defaults` are the constructor's values."""
    c.update(defaults)
    names = {token[1]: token for token in defaults}
    while s.peek() == "<":
        letter = s.peek_token()
        if letter not in names:
            _unknown(s)
        s.expect_token(names[letter])
        c[names[letter]] = s.read_float()


def _write_floats(o, c, tokens):
    for token in tokens:
        o.token(token)
        o.float(c[token])


def _read_affine(s, c):                            # nnet-affine-transform.h
    _by_first_letter(s, c, {"<LearnRateCoef>": 1.0, "<BiasLearnRateCoef>": 1.0,
                            "<MaxNorm>": 0.0})
    c["linearity"] = s.read_matrix()
    c["bias"] = s.read_vector()
    if c["linearity"].shape != (c["out"], c["in"]) or c["bias"].shape != (c["out"],):
        raise KaldiError("KALDI_ASSERT: AffineTransform dimensions")


def _write_affine(o, c):
    _write_floats(o, c, ("<LearnRateCoef>", "<BiasLearnRateCoef>", "<MaxNorm>"))
    o.endl()
    o.matrix(c["linearity"])
    o.vector(c["bias"])


def _read_prelu(s, c):                             # nnet-parametric-relu.h
    _by_first_letter(s, c, {"<AlphaLearnRateCoef>": 0.0, "<BetaLearnRateCoef>": 0.0})
    c["alpha"] = s.read_vector()
    c["beta"] = s.read_vector()
    if c["alpha"].shape != (c["out"],) or c["beta"].shape != (c["out"],):
        raise KaldiError("KALDI_ASSERT: ParametricRelu dimensions")


def _write_prelu(o, c):
    _write_floats(o, c, ("<AlphaLearnRateCoef>", "<BetaLearnRateCoef>"))
    o.endl()
    o.vector(c["alpha"])
    o.vector(c["beta"])


def _read_dropout(s, c):                           # nnet-activation.h
    c["<DropoutRate>"] = 0.5
    while s.peek() == "<":
        letter = s.peek_token()
        if letter == "D":
            token = s.read_token()
            if token == "<DropoutRate>":
                c["<DropoutRate>"] = s.read_float()
            elif token == "<DropoutRetention>":
                c["<DropoutRate>"] = 1.0 - s.read_float()
            else:
                raise KaldiError("Unknown token: " + token)
        elif letter == "!":
            s.expect_token("<!EndOfComponent>")
            break
        else:
            _unknown(s)
    if not 0.0 <= c["<DropoutRate>"] < 1.0:
        raise KaldiError("KALDI_ASSERT: dropout rate")


def _write_dropout(o, c):
    o.token("<DropoutRate>")
    o.float(c["<DropoutRate>"])


def _read_splice(s, c):                            # nnet-various.h
    c["offsets"] = s.read_int_vector()
    if len(c["offsets"]) * c["in"] != c["out"]:
        raise KaldiError("KALDI_ASSERT: Splice dimensions")


def _write_splice(o, c):
    o.int_vector(c["offsets"])


def _shift_like(name):                             # nnet-various.h AddShift, Rescale
    def read(s, c):
        c["<LearnRateCoef>"] = 1.0
        if s.peek() == "<":
            s.expect_token("<LearnRateCoef>")
            c["<LearnRateCoef>"] = s.read_float()
        c[name] = s.read_vector()

    def write(o, c):
        o.token("<LearnRateCoef>")
        o.float(c["<LearnRateCoef>"])
        o.vector(c[name])
    return read, write


def _nothing(s_or_o, c):                           # Component's empty ReadData/WriteData
    pass


COMPONENTS = {
    "<AffineTransform>": (_read_affine, _write_affine),
    "<ParametricRelu>": (_read_prelu, _write_prelu),
    "<Dropout>": (_read_dropout, _write_dropout),
    "<Splice>": (_read_splice, _write_splice),
    "<AddShift>": _shift_like("shift"),
    "<Rescale>": _shift_like("scale"),
    "<Sigmoid>": (_nothing, _nothing),
    "<Tanh>": (_nothing, _nothing),
    "<Softmax>": (_nothing, _nothing),
}
_BY_LOWER = {k.lower(): k for k in COMPONENTS}


# --- src/nnet/nnet-component.cc and nnet-nnet.cc: the framing ------------------------
def read_component(s):                             # Component::Read
    if s.peek() is None:
        return None
    token = s.read_token()
    if token == "<Nnet>":
        token = s.read_token()
    if token == "</Nnet>":
        return None
    out_dim, in_dim = s.read_int32(), s.read_int32()
    kind = _BY_LOWER.get(token.lower())
    if kind is None:
        raise KaldiError("Unknown 'Component' marker : '%s'" % token)
    c = {"type": kind, "in": in_dim, "out": out_dim}
    COMPONENTS[kind][0](s, c)
    if s.peek() == "<" and s.peek_token() == "!":
        s.expect_token("<!EndOfComponent>")
    return c


def read_nnet(data):                               # Nnet::Read
    """(components, items): the model and every item read, in file order."""
    s = Input(data)
    model = []
    while True:
        c = read_component(s)
        if c is None:
            break
        if model and model[-1]["out"] != c["in"]:
            raise KaldiError("Dimensionality mismatch!")
        model.append(c)
    return model, s.items


def write_nnet(model, binary):                     # Nnet::Write, Component::Write
    o = Output(binary)
    o.token("<Nnet>")
    o.endl()
    for c in model:
        o.token(c["type"])
        o.int32(c["out"])
        o.int32(c["in"])
        o.endl()
        COMPONENTS[c["type"]][1](o, c)
        o.token("<!EndOfComponent>")
        o.endl()
    o.token("</Nnet>")
    o.endl()
    return o.bytes()


# --- PropagateFnc of each component, as nnet-forward runs it (dropout off) -----------
def forward(model, x):
    """The outputs of `model` for one utterance's frames `x` (frames x dim)."""
    x = np.asarray(x, np.float64)
    for c in model:
        kind = c["type"]
        if kind == "<Splice>":                     # cu-kernels.cu _splice: clamped rows
            rows = np.clip(np.arange(len(x))[:, None] + np.asarray(c["offsets"]), 0,
                           len(x) - 1)
            x = x[rows].reshape(len(x), -1)
        elif kind == "<AddShift>":
            x = x + c["shift"]
        elif kind == "<Rescale>":
            x = x * c["scale"]
        elif kind == "<AffineTransform>":
            x = x @ np.asarray(c["linearity"], np.float64).T + c["bias"]
        elif kind == "<ParametricRelu>":           # cu-kernels.cu _parametric_relu
            x = np.where(x > 0, c["alpha"] * x, c["beta"] * x)
        elif kind == "<Sigmoid>":
            x = 1.0 / (1.0 + np.exp(-x))
        elif kind == "<Tanh>":
            x = np.tanh(x)
        elif kind == "<Softmax>":
            e = np.exp(x - x.max(axis=1, keepdims=True))
            x = e / e.sum(axis=1, keepdims=True)
    return x
