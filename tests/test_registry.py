"""The op registry (minidl/ops/registry.py): every public op declared once, where a search for its
name finds it, and minidl's functions and Tensor's methods made from the declarations."""
import ast
import pathlib
import re

import pytest

import minidl
import minidl.nn.functional as F
from minidl import formulas
from minidl.ops import registry

OPS_DIR = pathlib.Path(minidl.ops.__file__).parent
SOURCES = {p.name: p.read_text() for p in OPS_DIR.glob("*.py")}
UNARY = {f.name for f in formulas.UNARY}


def _declarations(tree):
    """Names declared in a module: ``@op(...)`` on ``def name``, ``name = op(...)(...)``, ``op("name", ...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", None) == "op" and not d.args
                for d in node.decorator_list):
            yield node.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(
                node.value.func, ast.Call) and getattr(node.value.func.func, "id", None) == "op" \
                and not node.value.func.args:
            yield node.targets[0].id
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "op" and node.args and isinstance(
                node.args[0], ast.Constant):
            yield node.args[0].value


DECLARED = {}
for _file, _text in SOURCES.items():
    for _name in _declarations(ast.parse(_text)):
        DECLARED.setdefault(_name, []).append(_file)


def _declared_where(name):
    """The ops/ files that declare ``name``; for the unary ops made from it, the formula table."""
    if name not in DECLARED and name in UNARY:
        table = (OPS_DIR.parent / "formulas" / "table.py").read_text()
        return ["formulas/table.py"] if re.search(rf"\"{name}\"", table) else []
    return DECLARED.get(name, [])


@pytest.mark.parametrize("name", sorted(registry.OPS))
def test_a_search_for_an_op_finds_its_one_declaration(name):
    assert len(_declared_where(name)) == 1, f"{name}: declared in {_declared_where(name)}"


def test_an_op_is_declared_once_and_declarations_are_checked():
    with pytest.raises(ValueError, match="'add' is declared twice"):
        registry.op("add")(lambda a, b: a)
    with pytest.raises(ValueError, match="'divide' is declared twice"):
        registry.op("divide")(lambda a, b: a)
    with pytest.raises(ValueError, match="'sub' is declared twice"):
        registry.op("not_yet_an_op", aliases=("sub",))(lambda a, b: a)
    with pytest.raises(TypeError, match="decorator factory"):
        registry.op(lambda x: x)
    with pytest.raises(ValueError, match="namespace must be one of"):
        registry.op("not_yet_an_op", namespace="nn.funtional")
    assert "not_yet_an_op" not in registry.OPS


def test_rules_attach_once_per_kind():
    rules = registry.OPS["neg"].rules
    kept = rules.pop("sharding", None)   # (minidl.dist.tensor attaches neg's when a test imported it)
    before = dict(rules)                 # (its ONNX lowering, attached by minidl.onnx)
    registry.attach_rule("neg", "sharding", "elementwise")
    try:
        assert rules == {**before, "sharding": "elementwise"}
        with pytest.raises(ValueError, match="already has a sharding rule"):
            registry.attach_rule("neg", "sharding", "elementwise")
    finally:
        del rules["sharding"]
        if kept is not None:
            rules["sharding"] = kept
    with pytest.raises(ValueError, match="unknown kind 'shards'"):
        registry.attach_rule("neg", "shards", None)
    with pytest.raises(KeyError, match="no op named 'negg'"):
        registry.attach_rule("negg", "sharding", None)


def test_functions_methods_and_twins_come_from_the_declarations():
    for d in registry.OPS.values():
        for name in d.names:
            home = {"minidl": minidl, "nn.functional": F, "special": minidl.special,
                    "linalg": minidl.linalg}.get(d.namespace)
            if home is not None:   # (minidl.linalg.vector_norm is declared as linalg_vector_norm, aten's name)
                assert getattr(home, registry._public_name(name, d.namespace)) is d.function, name
            else:   # (minidl.dist is the distributed package, not the Tensor method dist)
                assert not callable(getattr(minidl, name, None)), name
            if d.method is not None:
                assert getattr(minidl.Tensor, name) is d.method, name
            else:
                assert not hasattr(minidl.Tensor, name), name
            twin = d.twins.get(name + "_")
            assert getattr(minidl.Tensor, name + "_", None) is twin or twin is None, name
            assert twin is None or twin.__name__ == name + "_", name  # (errors name the twin called)


def test_minidl_exports_the_declared_ops_and_not_ops_internals():
    assert set(registry.functions()) <= set(minidl.ops.__all__)
    for internal in ("core", "creation", "elementwise", "getitem", "to_dtype", "registry"):
        assert not hasattr(minidl, internal), internal
    assert minidl.random is minidl.ops.random  # (torch.random's counterpart)


def test_a_declared_method_calls_its_function():
    x = minidl.tensor([[3.0, -1.0], [2.0, 5.0]])
    assert minidl.equal(x.sum(1), minidl.sum(x, 1)) and minidl.equal(x.swapaxes(0, 1), x.t())
    assert minidl.equal(x.where(x > 0, minidl.zeros(())), minidl.where(x > 0, x, minidl.zeros(())))
