"""psgd.data is floor 3: it may lean on psgd.errors and psgd.backend only."""
import ast
import pathlib

import psgd.data

ALLOWED = ("psgd.errors", "psgd.backend", "psgd.data")


def test_imports_point_down_only():
    root = pathlib.Path(psgd.data.__file__).parent
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith("mpi4py"), (path.name, name)
                if name.startswith("psgd"):
                    assert name.startswith(ALLOWED), (path.name, name)
