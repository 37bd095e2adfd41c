"""Import structure (issue 20, first part): autograd is a layer of its own, with no import cycle."""
import ast
import pathlib

import minidl

PACKAGE = pathlib.Path(minidl.__file__).parent


def _imports(path):
    """(module imported, inside a function?) for each import in a file of minidl/autograd/."""
    tree = ast.parse(path.read_text())
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            yield (node.module or "").split(".")[0] if node.level == 1 else "..", id(node) in inner


def test_autograd_imports_nothing_above_it_and_no_module_imports_at_call_time():
    for path in sorted((PACKAGE / "autograd").glob("*.py")):
        for module, at_call_time in _imports(path):
            assert module != "..", f"autograd/{path.name} imports from above autograd"
            assert not at_call_time, f"autograd/{path.name} imports {module} inside a function (a cycle held open)"
