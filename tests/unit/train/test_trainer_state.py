"""The Trainer and its parallel strategies declare every attribute they
hold in __init__ (None until setup or build makes it): a reader finds an
object's state in one place, and close() can look at any of it."""
import ast
import inspect
import textwrap

import pytest

from psgd.train.data_parallel import DataParallel
from psgd.train.hybrid import ModelParallel
from psgd.train.trainer import Trainer


def assigned(function):
    """The names of `self.NAME = ...` (plain, augmented, tuple targets) in `function`."""
    names = set()
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) \
                        and part.value.id == "self" and isinstance(part.ctx, ast.Store):
                    names.add(part.attr)
    return names


@pytest.mark.parametrize("cls", [Trainer, DataParallel, ModelParallel])
def test_every_attribute_is_declared_in_init(cls):
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    methods = {f.name: f for f in tree.body[0].body if isinstance(f, ast.FunctionDef)}
    declared = assigned(methods.pop("__init__"))
    later = {name: method for method, f in methods.items() for name in assigned(f)
             if name not in declared}
    assert not later, "set outside __init__: %s" % later
