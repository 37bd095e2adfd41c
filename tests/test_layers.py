"""Import structure (issue 20, first part): autograd is a layer of its own, with no import cycle."""
import ast
import pathlib

import minidl

PACKAGE = pathlib.Path(minidl.__file__).parent


def _imports(path):
    """(sibling module imported, or ".." for one above the package; inside a function?) for each
    relative import in a file."""
    tree = ast.parse(path.read_text())
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            siblings = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            for module in siblings if node.level == 1 else [".."]:
                yield module, id(node) in inner


def test_autograd_imports_nothing_above_it_and_no_module_imports_at_call_time():
    for path in sorted((PACKAGE / "autograd").glob("*.py")):
        for module, at_call_time in _imports(path):
            assert module != "..", f"autograd/{path.name} imports from above autograd"
            assert not at_call_time, f"autograd/{path.name} imports {module} inside a function (a cycle held open)"


def test_ops_modules_import_only_those_above_them_in_the_declared_reading_order():
    import re
    import minidl.ops
    order = re.findall(r"^- ``(\w+)``", minidl.ops.__doc__, re.M)
    modules = sorted(p.stem for p in (PACKAGE / "ops").glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules, "the ops/ docstring's reading order must list every module once"
    for position, name in enumerate(order):
        for module, at_call_time in _imports(PACKAGE / "ops" / f"{name}.py"):
            assert not at_call_time, f"ops/{name}.py imports {module} inside a function (a cycle held open)"
            if module != "..":
                assert module in order[:position], f"ops/{name}.py imports ops/{module}.py, which comes after it"
