"""ElementwiseKernel of the simulated device: the C body run as NumPy
statements over whole arrays (each element is independent, so running
statement by statement over the arrays equals running element by element),
launched like any other operation."""
import re

import numpy as np

from .array import launch

_DECLARATION = re.compile(r"^\s*(?:const\s+)?(?:T|float|double|int|int32|int64|bool)\s+(\w+)\s*=")
_TERNARY = re.compile(r"\(\s*([^?():]+?)\s*\?\s*([^?():]+?)\s*:\s*([^?()]+?)\s*\)")
_FUNCTIONS = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh, "fabs": np.abs,
              "abs": np.abs, "max": np.maximum, "min": np.minimum, "where": np.where}


def _names(params):
    return [p.split()[-1] for p in params.split(",") if p.strip()]


def _python(body):
    lines = []
    for statement in body.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        statement = _DECLARATION.sub(lambda m: m.group(1) + " =", statement)
        while _TERNARY.search(statement):
            statement = _TERNARY.sub(r"where(\1, \2, \3)", statement)
        lines.append(statement)
    return compile("\n".join(lines), "<simcupy kernel>", "exec")


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="kernel", **kwargs):
        self.inputs, self.outputs = _names(in_params), _names(out_params)
        self.code = _python(operation)
        self.name = name

    def __call__(self, *args):
        n_in = len(self.inputs)
        if len(args) != n_in + len(self.outputs):
            raise TypeError("%s takes %d arguments" % (self.name, n_in + len(self.outputs)))
        outputs = args[n_in:]

        def run(*arrays):
            scope = dict(_FUNCTIONS)
            scope.update(zip(self.inputs + self.outputs, arrays))
            exec(self.code, scope)
            for name, out in zip(self.outputs, arrays[n_in:]):
                if scope[name] is not out:
                    out[...] = scope[name]
        launch(lambda *arrays, out=None: run(*arrays), *args, out=outputs[0])
        return outputs[0] if len(outputs) == 1 else outputs
