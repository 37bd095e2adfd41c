"""minidl.library.schema against torch 2.13 (issue 46): each function is written once as source text and
built twice, over torch's types and over minidl's, so ``infer`` must print what ``infer_schema`` prints;
``bind`` must accept and refuse the calls torch's own custom ops accept and refuse, with torch's words."""
from __future__ import annotations  # every annotation below, and in the built functions, is a string

import typing

import pytest
import torch

import minidl
from minidl.library import schema as S

TYPING = {"Optional": typing.Optional, "Sequence": typing.Sequence, "List": typing.List, "Union": typing.Union}
TORCH = dict(TYPING, Tensor=torch.Tensor, dtype=torch.dtype, device=torch.device, float32=torch.float32,
             cpu=torch.device("cpu"), torch=torch)
MINIDL = dict(TYPING, Tensor=minidl.Tensor, dtype=minidl.dtype, device=minidl.device, float32=minidl.float32,
              cpu=minidl.device("cpu"), torch=minidl)


def build(params, ret, namespace, body="pass", strings=True):
    """``def f(params) -> ret: body`` with ``namespace`` as its module; ``strings``: annotations stay
    text (this file's ``from __future__ import annotations``), else they are the objects themselves."""
    arrow = "" if ret is None else f" -> {ret}"
    code = compile(f"def f({params}){arrow}:\n    {body}\n", "<case>", "exec", dont_inherit=not strings)
    namespace = dict(namespace)
    exec(code, namespace)
    return namespace["f"]


NUM = "Union[int, float, bool]"
CASES = [  # (parameters, return annotation, mutates_args)
    ("x: Tensor", "Tensor", ()),
    ("x: Tensor, beta: float = 1.0, n: int = 2, flag: bool = False, s: str = 'a', w: Optional[Tensor] = None, "
     "dt: dtype = float32, d: Optional[device] = None", "tuple[Tensor, Tensor]", ()),
    ("x: Tensor, *, beta: float = -0.001, big: float = 1e20, neg: int = -3, inf: float = float('inf'), "
     "dev: device = cpu", "Tensor", ()),
    ("x: Tensor, y: Tensor, z: Tensor", "None", ("x", "z")),
    ("x: Tensor, y: Tensor, n: int", "None", "unknown"),
    ("xs: Sequence[Tensor], ys: list[Tensor], zs: List[Tensor], ws: list[Optional[Tensor]]", "list[Tensor]", ()),
    ("n: Optional[int], f: Optional[float], b: Optional[bool], s: Optional[str], t: Optional[dtype]", "int", ()),
    ("a: Sequence[int], b: list[float], c: list[bool], d: Optional[list[int]] = None, "
     "e: Optional[Sequence[float]] = None, g: Optional[List[bool]] = None", "float", ()),
    (f"s: {NUM}, l: list[{NUM}], o: Optional[{NUM}] = None", NUM, ()),
    ("x: Tensor", "tuple[Tensor]", ()),
    ("x: Tensor", "tuple[Tensor, int, float, bool, list[Tensor]]", ()),
    ("x: Tensor, n: int = True, f: float = 2", "bool", ()),
    ("x: Optional[Tensor] = None, *, out: Tensor", "Tensor", ("out",)),
    ("x: Tensor | None, n: int | None = None, d: device | None = cpu", "Tensor", ()),
    ("x: Optional[Tensor], ys: list[Tensor], zs: list[Optional[Tensor]]", "List[Tensor]", ("x", "ys", "zs")),
    ("x: torch.Tensor, d: torch.dtype", "torch.Tensor", ()),
]


@pytest.mark.parametrize("strings", [True, False], ids=["strings", "objects"])
@pytest.mark.parametrize("params, ret, mutates", CASES)
def test_infer_prints_as_torch(params, ret, mutates, strings):
    expected = torch.library.infer_schema(build(params, ret, TORCH, strings=strings), mutates_args=mutates)
    schema = S.infer(build(params, ret, MINIDL, strings=strings), mutates)
    assert str(schema) == expected
    assert str(S.parse(str(schema))) == expected  # parse reads back what str prints


ERRORS = [  # (parameters, return annotation, mutates_args, words both messages hold)
    ("x", "Tensor", (), "must have a type annotation"),
    ("x: Tensor", None, (), "No return type annotation"),
    ("x: dict", "Tensor", (), "unsupported type"),
    ("x: tuple[int, int]", "Tensor", (), "We do not support Tuple inputs"),
    ("x: Tensor, *args: Tensor", "Tensor", (), "positional-only args, varargs, or varkwargs"),
    ("x: Tensor, **kw: Tensor", "Tensor", (), "positional-only args, varargs, or varkwargs"),
    ("x: Tensor, /", "Tensor", (), "positional-only args, varargs, or varkwargs"),
    ("x: Tensor, n: int = 1", "Tensor", ("n",), "only Tensors or collections of Tensors can be mutated"),
    ("x: Tensor", "Tensor", ("y",), "in mutates_args were not found"),
    ("x: Tensor, l: list[int] = [1]", "Tensor", (), "unsupported default value type"),
    ("x: Tensor", "dict", (), "Return has unsupported type"),
    ("x: Tensor", "tuple[Tensor, str]", (), "Return has unsupported type"),
    ("x: Tensor", "Sequence[Tensor]", (), "Return has unsupported type"),
    ("x: Optional[list[Tensor]]", "Tensor", (), "unsupported type"),
    ("x: list[str]", "Tensor", (), "unsupported type"),
    (f"x: Optional[list[{NUM}]]", "Tensor", (), "unsupported type"),
    ("x: Nope", "Tensor", (), "Unsupported type annotation Nope. It is not a type"),
    ("x: Tensor", "Tensor", "all", "mutates_args must either be a sequence"),
]


@pytest.mark.parametrize("params, ret, mutates, words", ERRORS)
def test_infer_refuses_as_torch(params, ret, mutates, words):
    with pytest.raises(ValueError) as theirs:
        torch.library.infer_schema(build(params, ret, TORCH), mutates_args=mutates)
    with pytest.raises(ValueError) as ours:
        S.infer(build(params, ret, MINIDL), mutates, op_name="mylib::f")
    assert words in str(theirs.value) and words in str(ours.value)
    if "mutates_args must" not in words:
        assert str(ours.value).startswith("infer_schema(mylib::f): ")


def test_string_annotations_name_minidl_types_without_imports():
    fn = build("x: Tensor, d: Optional[dtype] = None", "Tensor", {})  # only the implied names
    assert str(S.infer(fn, ())) == "(Tensor x, ScalarType? d=None) -> Tensor"


def test_parse_reads_aliases_defaults_and_returns():
    s = S.parse('(Tensor(a!) x, Tensor(b!)? y, int[] l=[1, 2], ScalarType dt=float64, Device d="cpu", '
                'str s="a,b", *, float beta=1e+20, Scalar sc=-3) -> ((Tensor))')
    x, y, l, dt, d, st, beta, sc = s.arguments
    assert (x.mutable, y.mutable, y.type, l.mutable) == (True, True, "Tensor?", False)
    assert (l.default, dt.default, d.default, st.default, beta.default, sc.default) == (
        (1, 2), minidl.float64, "cpu", "a,b", 1e20, -3)
    assert (beta.kwarg_only, sc.kwarg_only, st.kwarg_only) == (True, True, False)
    assert s.returns == ("Tensor",) and s.returns_tuple
    assert str(s) == ('(Tensor(a0!) x, Tensor(a1!)? y, int[] l=[1, 2], ScalarType dt=float64, Device d="cpu", '
                      'str s="a,b", *, float beta=1e+20, Scalar sc=-3) -> ((Tensor))')
    assert S.parse("() -> ()") == S.Schema((), (), True)
    assert S.parse("(Tensor x) -> Tensor").returns_tuple is False
    assert S.parse("(Tensor x) -> (Tensor, SymInt)").returns == ("Tensor", "SymInt")


@pytest.mark.parametrize("text, words", [
    ("(Tensor x) Tensor", "expected '(arguments) -> returns'"),
    ("f(Tensor x) -> Tensor", "the op's name goes to custom_op"),
    ("(Tensr x) -> Tensor", "unknown type 'Tensr'"),
    ("(SymInt[] il=None) -> Tensor", "default 'None' that is not a SymInt[]"),
    ("(Tensor x -> Tensor", "expected '(arguments) -> returns'"),
    ("(Tensor x,) -> Tensor", "an empty argument"),
    ("(Tensor x, , Tensor y) -> Tensor", "an empty argument"),
    ("(Tensor) -> Tensor", "cannot read argument 'Tensor'"),
    ("(ScalarType dt=nofloat) -> Tensor", "default 'nofloat'"),
    ("(Tensor x) -> (Tensor, str", "unbalanced"),
])
def test_parse_refuses_what_torch_refuses(text, words):
    with pytest.raises(RuntimeError):
        torch._C.parse_schema("f" + text if not text.startswith("f") else text[1:])
    with pytest.raises(ValueError, match="schema '") as info:
        S.parse(text)
    assert words in str(info.value)


@pytest.mark.parametrize("text, words", [  # torch's parser lets these through; a minidl op could not run them
    ("(Tensor x, Tensor x) -> Tensor", "'x' appears twice"),
    ('(float beta="a") -> Tensor', "not a float"),
    ("(Tensor x, *, *, Tensor y) -> Tensor", "'*' appears twice"),
    ("(Tensor x=None) -> Tensor", "not a Tensor"),
    ("(int(a!) x) -> Tensor", "only alias supported"),
    ("(Tensor(a) x) -> Tensor", "only alias supported"),
    ("(Tensor x) -> (Tensor, str)", "unsupported return 'str'"),
])
def test_parse_is_stricter_than_torch(text, words):
    with pytest.raises(ValueError, match="schema '") as info:
        S.parse(text)
    assert words in str(info.value)


# ---- bind: the calls torch's custom ops accept and refuse --------------------------------------------
BIND_OP = ("x: Tensor, l: Sequence[Tensor], beta: float, n: int = 2, flag: bool = False, s: str = 'a', "
           f"w: Optional[Tensor] = None, dt: dtype = float32, d: Optional[device] = None, sc: {NUM} = 1, "
           "il: Optional[list[int]] = None, fl: Optional[list[float]] = None, dd: device = cpu, "
           "ol: Optional[List[Tensor]] = None, *, k: float = 1.0")
BIND_OP = BIND_OP.replace(", ol: Optional[List[Tensor]] = None", "")  # torch has no Tensor[]? argument
CALLS = {  # name: (args, kwargs) over a namespace T of the library's values
    "basic": lambda T: ((T.t, [T.t, T.t], 1.5), {}),
    "int for float": lambda T: ((T.t, (), 2), {}),
    "bool for float": lambda T: ((T.t, [], True), {}),
    "0-d tensor for float": lambda T: ((T.t, [], T.t0), {}),
    "str for float": lambda T: ((T.t, [], "x"), {}),
    "None for float": lambda T: ((T.t, [], None), {}),
    "missing": lambda T: ((T.t, []), {}),
    "missing all": lambda T: ((), {}),
    "too many": lambda T: ((T.t, [], 1.0, 2, False, "a", None, T.f32, None, 1, None, None, "cpu", 2.0, 5), {}),
    "kw-only given positionally": lambda T: ((T.t, [], 1.0, 2, False, "a", None, T.f32, None, 1, None, None,
                                              "cpu", 2.0), {}),
    "unknown keyword": lambda T: ((T.t, [], 1.0), {"zz": 3}),
    "given twice": lambda T: ((T.t, [], 1.0), {"beta": 2.0}),
    "unknown after twice": lambda T: ((T.t, [], 1.0), {"beta": 2.0, "zz": 1}),
    "float for int": lambda T: ((T.t, [], 1.0), {"n": 2.5}),
    "bool for int": lambda T: ((T.t, [], 1.0), {"n": True}),
    "float tensor for int": lambda T: ((T.t, [], 1.0), {"n": T.t0}),
    "None for int": lambda T: ((T.t, [], 1.0), {"n": None}),
    "int beyond int64": lambda T: ((T.t, [], 1.0), {"n": 2 ** 70}),
    "int for bool": lambda T: ((T.t, [], 1.0), {"flag": 2}),
    "str for bool": lambda T: ((T.t, [], 1.0), {"flag": "x"}),
    "int for str": lambda T: ((T.t, [], 1.0), {"s": 3}),
    "float for Tensor?": lambda T: ((T.t, [], 1.0), {"w": 1.0}),
    "float for Tensor": lambda T: ((1.0, [], 1.0), {}),
    "dtype": lambda T: ((T.t, [], 1.0), {"dt": T.f64}),
    "str for ScalarType": lambda T: ((T.t, [], 1.0), {"dt": "float32"}),
    "str for Device?": lambda T: ((T.t, [], 1.0), {"d": "cpu"}),
    "device for Device?": lambda T: ((T.t, [], 1.0), {"d": T.cpu}),
    "int for Device?": lambda T: ((T.t, [], 1.0), {"d": 0}),
    "None for Device": lambda T: ((T.t, [], 1.0), {"dd": None}),
    "tuple for Tensor[]": lambda T: ((T.t, (T.t, T.t), 1.0), {}),
    "None in Tensor[]": lambda T: ((T.t, [T.t, None], 1.0), {}),
    "Tensor for Tensor[]": lambda T: ((T.t, T.t, 1.0), {}),
    "float in Tensor[]": lambda T: ((T.t, [1.0], 1.0), {}),
    "float Scalar": lambda T: ((T.t, [], 1.0), {"sc": 1.5}),
    "bool Scalar": lambda T: ((T.t, [], 1.0), {"sc": True}),
    "complex Scalar": lambda T: ((T.t, [], 1.0), {"sc": 1j}),
    "str Scalar": lambda T: ((T.t, [], 1.0), {"sc": "a"}),
    "Tensor Scalar": lambda T: ((T.t, [], 1.0), {"sc": T.t0}),
    "tuple for int[]?": lambda T: ((T.t, [], 1.0), {"il": (1, True)}),
    "int for int[]?": lambda T: ((T.t, [], 1.0), {"il": 3}),
    "floats in int[]?": lambda T: ((T.t, [], 1.0), {"il": [1.5]}),
    "mixed float[]?": lambda T: ((T.t, [], 1.0), {"fl": [1, 2.5, True]}),
    "str in float[]?": lambda T: ((T.t, [], 1.0), {"fl": ["a"]}),
    "one-element tensor kw-only float": lambda T: ((T.t, [], 1.0), {"k": T.t1}),
    "two-element tensor for float": lambda T: ((T.t, [], 1.0), {"k": T.t}),
}


def _values(library):
    t = library.ones(2)
    return type("T", (), dict(t=t, t0=library.tensor(2.7), t1=library.tensor([3.0]), f32=library.float32,
                              f64=library.float64, cpu=library.device("cpu")))


def _shown(v):
    """A value as both libraries should see it: tensors by their role, dtypes and devices by name."""
    if isinstance(v, (torch.Tensor, minidl.Tensor)):
        return "tensor"
    if isinstance(v, (torch.dtype, minidl.dtype)):
        return str(v).split(".")[-1]
    if isinstance(v, (torch.device, minidl.device)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_shown(e) for e in v]
    return type(v).__name__, v


@pytest.fixture(scope="module")
def torch_op():
    seen = []
    fn = build(BIND_OP, "Tensor", dict(TORCH, seen=seen), body="seen.append(list(locals().values())); return x.clone()")
    op = torch.library.custom_op("minidl_schema_test::bind_op", fn, mutates_args=())
    return op, seen


@pytest.mark.parametrize("call", CALLS)
def test_bind_accepts_and_refuses_as_torch(call, torch_op):
    op, seen = torch_op
    schema = S.infer(build(BIND_OP, "Tensor", MINIDL), ())
    args, kwargs = CALLS[call](_values(torch))
    try:
        seen.clear()
        op(*args, **kwargs)
        theirs = None
    except RuntimeError as e:  # torch's ScalarType is an int code, named 'int'; minidl's is a dtype
        theirs = str(e).replace("type 'int' for argument 'dt'", "type 'ScalarType' for argument 'dt'")
    args, kwargs = CALLS[call](_values(minidl))
    try:
        ours = schema.bind("minidl_schema_test::bind_op", args, kwargs)
    except RuntimeError as e:
        assert theirs is not None, f"torch accepts {call!r}, minidl refuses: {e}"
        first = str(e).split("\n")[0]
        assert first.split("Declaration:")[0].split("Schema:")[0] == \
            theirs.split("\n")[0].split("Declaration:")[0].split("Schema:")[0]
        assert "minidl_schema_test::bind_op(Tensor x, Sequence" not in first  # the schema text, not Python's
    else:
        assert theirs is None, f"torch refuses {call!r} ({theirs.splitlines()[0]}), minidl accepts"
        assert [_shown(v) for v in ours] == [_shown(v) for v in seen[0]]


@pytest.mark.parametrize("call, words", [
    ("None for Tensor", "Expected a value of type 'Tensor' for argument 'x' but instead found type 'NoneType'"),
    ("None for bool", "Expected a value of type 'bool' for argument 'flag' but instead found type 'NoneType'"),
    ("int for ScalarType", "Expected a value of type 'ScalarType' for argument 'dt' but instead found type 'int'"),
])
def test_bind_refuses_what_torch_lets_through(call, words):
    """torch's binding lets None through as an undefined Tensor or a False bool, and takes an int as a
    dtype code; minidl has neither undefined tensors nor dtype codes, so these fail here, naming the op."""
    schema = S.infer(build(BIND_OP, "Tensor", MINIDL), ())
    t = minidl.ones(2)
    args, kwargs = {"None for Tensor": ((None, [], 1.0), {}), "None for bool": ((t, [], 1.0), {"flag": None}),
                    "int for ScalarType": ((t, [], 1.0), {"dt": 3})}[call]
    with pytest.raises(RuntimeError, match=r"^minidl_schema_test::bind_op\(\) ") as info:
        schema.bind("minidl_schema_test::bind_op", args, kwargs)
    assert words in str(info.value)
    assert "Declaration: minidl_schema_test::bind_op(Tensor x, Tensor[] l" in str(info.value)


def test_bind_fills_defaults_and_converts():
    schema = S.parse('(Tensor x, float beta=1, int[] l=[1, 2], Device d="cpu", ScalarType dt=float32) -> Tensor')
    x = minidl.ones(1)
    assert schema.bind("mylib::f", (x,), {}) == [x, 1.0, [1, 2], minidl.device("cpu"), minidl.float32]
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, meta device type"):
        schema.bind("mylib::f", (x,), {"d": "xpu"})
