"""ElementwiseKernel of the simulated device: the C body run as NumPy
statements over whole arrays (each element is independent, so running
statement by statement over the arrays equals running element by element),
launched like any other operation. C casts such as `(T)1` become calls of
the type (T: the dtype of the arguments declared T). Without the CUDA
headers (install(toolkit=False)) the first call fails to compile, as CuPy's
does on a host with only the driver."""
import re

import numpy as np

from . import device
from .array import launch

_TYPES = r"T|float|double|int|int32|int64|bool"
_DECLARATION = re.compile(r"^\s*(?:const\s+)?(?:%s)\s+(\w+)\s*=" % _TYPES)
_CAST = re.compile(r"\(\s*(%s)\s*\)\s*(\w+(?:\.\w+)?)" % _TYPES)
_TERNARY = re.compile(r"\(\s*([^?():]+?)\s*\?\s*([^?():]+?)\s*:\s*([^?()]+?)\s*\)")
_FUNCTIONS = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh, "fabs": np.abs,
              "abs": np.abs, "max": np.maximum, "min": np.minimum, "where": np.where,
              "float": np.float32, "double": np.float64, "int": np.int32, "int32": np.int32,
              "int64": np.int64, "bool": np.bool_}


class CompileException(Exception):
    """cupy.cuda.compiler.CompileException."""


def _params(params):
    """[(type, name)] of 'T a, int32 n'."""
    return [tuple(p.split()[-2:]) for p in params.split(",") if p.strip()]


def _python(body):
    lines = []
    for statement in body.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        statement = _DECLARATION.sub(lambda m: m.group(1) + " =", statement)
        statement = _CAST.sub(r"\1(\2)", statement)
        while _TERNARY.search(statement):
            statement = _TERNARY.sub(r"where(\1, \2, \3)", statement)
        lines.append(statement)
    return compile("\n".join(lines), "<simcupy kernel>", "exec")


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="kernel", **kwargs):
        self.inputs, self.outputs = _params(in_params), _params(out_params)
        self.code = _python(operation)
        self.name = name

    def __call__(self, *args):
        if not device._state.toolkit:
            raise CompileException("catastrophic error: cannot open source file "
                                   "\"cuda_fp16.h\" (kernel %s)" % self.name)
        params = self.inputs + self.outputs
        n_in = len(self.inputs)
        if len(args) != len(params):
            raise TypeError("%s takes %d arguments" % (self.name, len(params)))
        outputs = args[n_in:]
        scalar_type = next((a.dtype.type for (kind, _), a in zip(params, args)
                            if kind == "T" and hasattr(a, "dtype")), np.float32)

        def run(*arrays):
            scope = dict(_FUNCTIONS, T=scalar_type)
            scope.update(zip([name for _, name in params], arrays))
            exec(self.code, scope)
            for (_, name), out in zip(self.outputs, arrays[n_in:]):
                if scope[name] is not out:
                    out[...] = scope[name]
        launch(lambda *arrays, out=None: run(*arrays), *args, out=outputs[0])
        return outputs[0] if len(outputs) == 1 else outputs
