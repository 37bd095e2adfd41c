"""Import structure (issue 20): each layer of the README's table imports only the layers below it,
ops/ reads bottom-up in its declared order, and the libraries on top use the public API only."""
import ast
import pathlib
import re

import minidl
import minidl.ops

PACKAGE = pathlib.Path(minidl.__file__).parent

def _readme_layers():
    """The README's layer table, bottom-up: (layer, module prefixes from its "where" column)."""
    text = (PACKAGE.parent / "README.md").read_text()
    table = text[text.index("| layer | where | what |"):].split("\n\n")[0].splitlines()[2:]
    rows = [row.split(" | ") for row in table]
    return [(cells[0].strip("| "), tuple(path.removesuffix(".py").rstrip("/").replace("/", ".")
                                         for path in re.findall(r"`(minidl/[\w/.]*)`", cells[1])))
            for cells in rows]


# A module belongs to the row of its longest matching prefix.
LAYERS = _readme_layers()
# libraries that use only the public API: minidl's own names, the faces of these packages, and each other
PUBLIC_ONLY = ("minidl.nn", "minidl.optim", "minidl.utils", "minidl.vision", "minidl.models", "minidl.multiprocessing")
# (and the slot through which the libraries tell minidl.compile what kernels cannot show: host steps,
# graph breaks, modules run, gradients set)
FACES = {"minidl", "minidl.ops", "minidl.autograd", "minidl.amp", "minidl.cuda", "minidl.dist", "minidl._tracing"}


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path, here=None):
    """(absolute minidl module imported, inside a function?) for each import in the file of module
    ``here``; a name imported from a package counts as that submodule when it is one."""
    tree = ast.parse(path.read_text())
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    here = here or _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == "minidl" or target.startswith("minidl."):
                yield target, id(node) in inner


def _layer(module):
    if module == "minidl":  # the package's face: all of it, which only the libraries may use
        return next(i for i, (name, _) in enumerate(LAYERS) if name == "libraries")
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
                if module == p or module.startswith(p + ".")), default=None)
    return None if best is None else best[1]


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if m != "minidl" and _layer(m) is None)
    assert not missing, f"modules in no row of the layer table: {missing}"


def _upward_imports(modules):
    upward = []
    for module, path in modules.items():
        if module == "minidl":
            continue  # (the package gathers everything)
        for target, _ in _imports(path, module):
            if target.startswith(module + "."):
                continue  # (a package's face gathers its own modules: minidl.nn holds nn.parallel)
            if _layer(target) > _layer(module):
                upward.append(f"{module} ({LAYERS[_layer(module)][0]}) imports {target} "
                              f"({LAYERS[_layer(target)][0]})")
    return upward


def test_no_import_runs_up_the_layers():
    upward = _upward_imports(MODULES)
    assert not upward, "\n".join(upward)


def test_the_layer_test_catches_upward_imports(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text("import minidl\nfrom ..ops import core\n\ndef f():\n    import minidl.nn.functional\n")
    found = _upward_imports({"minidl.kernels.fake": fake})
    assert len(found) == 3, found
    assert "imports minidl (libraries)" in found[0] and "minidl.ops.core (ops)" in found[1]
    assert "minidl.nn.functional" in found[2]


def test_the_libraries_use_the_public_api_only():
    reaching = []
    for module, path in MODULES.items():
        if not module.startswith(PUBLIC_ONLY) or LAYERS[_layer(module)][0] != "libraries":
            continue
        for target, _ in _imports(path):
            if target not in FACES and not target.startswith(PUBLIC_ONLY):
                reaching.append(f"{module} imports {target}")
    assert not reaching, "\n".join(reaching)


def test_autograd_imports_nothing_above_it_and_no_module_imports_at_call_time():
    for path in sorted((PACKAGE / "autograd").glob("*.py")):
        for target, at_call_time in _imports(path):
            assert _layer(target) <= _layer("minidl.autograd"), f"autograd/{path.name} imports {target}"
            assert not at_call_time, f"autograd/{path.name} imports {target} inside a function (a cycle held open)"


def test_ops_modules_import_only_those_above_them_in_the_declared_reading_order():
    order = re.findall(r"^- ``(\w+)``", minidl.ops.__doc__, re.M)
    modules = sorted(p.stem for p in (PACKAGE / "ops").glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules, "the ops/ docstring's reading order must list every module once"
    imported = [target.split(".")[2] for target, _ in _imports(PACKAGE / "ops" / "__init__.py")]
    assert imported == order, "ops/__init__.py imports its modules in the reading order"
    for position, name in enumerate(order):
        for target, at_call_time in _imports(PACKAGE / "ops" / f"{name}.py"):
            assert not at_call_time, f"ops/{name}.py imports {target} inside a function (a cycle held open)"
            if target.startswith("minidl.ops."):
                sibling = target.split(".")[2]
                assert sibling in order[:position], f"ops/{name}.py imports ops/{sibling}.py, which comes after it"
