"""Op schemas: the typed argument lists of user ops, in torch.library's text form.

A schema is data, as the registry's declarations are: ``parse`` reads the text a user writes,
``infer`` derives it from a function's annotations (torch's ``infer_schema``), ``str`` prints it as
torch 2.13 does (so messages and docs read as PyTorch's), and ``bind`` checks a call against it
before any kernel runs, so a wrong call fails naming the op and the argument, with torch's wording.
"""
from __future__ import annotations

import ast
import collections
import collections.abc
import inspect
import json
import numbers
import operator
import re
import types
import typing
from dataclasses import dataclass

from .. import _device, _dtype
from .._tensor_base import TensorBase


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # an argument's default when it has none

# The schema types an argument may have: torch's infer_schema set, plus the plain-int spellings.
_BASES = ("Tensor", "SymInt", "int", "float", "bool", "str", "Scalar", "ScalarType", "Device")
TYPES = frozenset({b + s for b in _BASES for s in ("", "?")}
                  | {b + "[]" for b in ("Tensor", "SymInt", "int", "float", "bool", "Scalar")}
                  | {b + "[]?" for b in ("SymInt", "int", "float", "bool")} | {"Tensor?[]"})
RETURN_TYPES = frozenset({"Tensor", "Tensor[]", "SymInt", "int", "float", "bool", "Scalar"})
# the names of the types in bind's messages: torch's (its JIT types), but ScalarType for ScalarType
_SHOWN = {"SymInt": "int", "Scalar": "number"}


@dataclass(frozen=True)
class Argument:
    name: str
    type: str  # the schema type without its alias annotation: "Tensor?", "SymInt[]", ...
    default: object = REQUIRED
    kwarg_only: bool = False
    mutable: bool = False  # torch's Tensor(aN!): the op writes into it


@dataclass(frozen=True)
class Schema:
    arguments: tuple
    returns: tuple  # the return types; () for "-> ()"
    returns_tuple: bool = False  # "-> (Tensor, Tensor)" (and "-> ()") rather than "-> Tensor"

    def __str__(self):
        parts = []
        for i, a in enumerate(self.arguments):
            if a.kwarg_only and not any(b.kwarg_only for b in self.arguments[:i]):
                parts.append("*")
            kind = f"Tensor(a{i}!){a.type[len('Tensor'):]}" if a.mutable else a.type
            parts.append(f"{kind} {a.name}" + ("" if a.default is REQUIRED else f"={_show_default(a.default)}"))
        ret = ", ".join(self.returns)
        if self.returns_tuple or not self.returns:
            ret = f"(({ret}))" if len(self.returns) == 1 else f"({ret})"
        return f"({', '.join(parts)}) -> {ret}"

    def bind(self, op_name: str, args, kwargs) -> list:
        """Every argument's value in schema order, defaults filled in and converted to its type
        (a float argument given 2 gets 2.0, a Device one given "cpu" a device), or torch's error."""
        decl = f"{op_name}{self}"
        n_all, n_pos = len(self.arguments), sum(not a.kwarg_only for a in self.arguments)
        if len(args) + len(kwargs) > n_all:
            raise RuntimeError(f"{op_name}() expected at most {n_all} argument(s) but received "
                               f"{len(args) + len(kwargs)} argument(s). Declaration: {decl}")
        if len(args) > n_pos:
            raise RuntimeError(f"{op_name}() takes {n_pos} positional argument(s) but {len(args)} "
                               f"was/were given.  Declaration: {decl}")
        values = []
        for i, a in enumerate(self.arguments):
            if i < len(args):
                value = args[i]
            elif a.name in kwargs:
                value = kwargs[a.name]
            elif a.default is not REQUIRED:
                value = a.default
            else:
                raise RuntimeError(f"{op_name}() is missing value for argument '{a.name}'. Declaration: {decl}")
            try:
                values.append(_convert(a.type, value))
            except TypeError:
                raise RuntimeError(
                    f"{op_name}() Expected a value of type '{_shown(a.type)}' for argument '{a.name}' but "
                    f"instead found type '{type(value).__name__}'.\nPosition: {i}\nValue: {value!r}\n"
                    f"Declaration: {decl}") from None
        names = [a.name for a in self.arguments]
        for key in kwargs:
            if key not in names:
                raise RuntimeError(f"Unknown keyword argument '{key}' for operator '{op_name}'. Schema: {decl}")
        for key in kwargs:
            if names.index(key) < len(args):
                raise RuntimeError(f"Argument '{key}' specified both as positional and keyword argument. "
                                   f"Schema: {decl}")
        return values


def _shown(kind: str) -> str:
    if kind.endswith("?"):
        return f"Optional[{_shown(kind[:-1])}]"
    if kind.endswith("[]"):
        return f"List[{_shown(kind[:-2])}]"
    return _SHOWN.get(kind, kind)


def _one_element(value) -> bool:
    return isinstance(value, TensorBase) and value.numel() == 1


def _to_int(value):
    value = operator.index(int(value) if _one_element(value) else value)  # a float tensor truncates
    if not -2 ** 63 <= value < 2 ** 63:
        raise TypeError("beyond int64")
    return value


def _require(ok: bool, value, convert):
    if not ok:
        raise TypeError
    return convert(value)


# What each base type accepts (torch's rules): a TypeError is a mismatch.
_ACCEPT = {
    "Tensor": lambda v: _require(isinstance(v, TensorBase), v, lambda v: v),
    "SymInt": _to_int,
    "int": _to_int,
    "float": lambda v: _require(isinstance(v, numbers.Real) or _one_element(v), v, float),
    "bool": lambda v: _require(isinstance(v, numbers.Real) or _one_element(v), v, bool),
    "str": lambda v: _require(isinstance(v, str), v, str),
    "Scalar": lambda v: _require(isinstance(v, (int, float, complex)), v, lambda v: v),
    "ScalarType": lambda v: _require(isinstance(v, _dtype.dtype), v, lambda v: v),
    "Device": lambda v: _require(isinstance(v, (str, _device.device)), v, _device.device),
}


def _convert(kind: str, value):
    if kind.endswith("?"):
        return None if value is None else _convert(kind[:-1], value)
    if kind.endswith("[]"):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return [_convert(kind[:-2], v) for v in value]
    return _ACCEPT[kind](value)


def _show_default(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_show_default, value)) + "]"
    if isinstance(value, _dtype.dtype):
        return value.name
    if isinstance(value, (str, _device.device)):
        return json.dumps(str(value), ensure_ascii=False)
    return str(value)


# ---- parse ----------------------------------------------------------------------------------------
_ARG = re.compile(r"(?P<base>\w+)(?:\((?P<alias>[^)]*)\))?(?P<suffix>(?:\?|\[\])*)\s+(?P<name>[A-Za-z_]\w*)"
                  r"(?:\s*=\s*(?P<default>.+))?", re.S)


def parse(text: str) -> Schema:
    """``(Tensor x, float beta=1.0, *, Tensor(a!) out) -> Tensor``: the arguments and returns."""
    def bad(what):
        raise ValueError(f"schema {text!r}: {what}")

    head, arrow, ret = text.strip().rpartition("->")
    head, ret = head.strip(), ret.strip()
    if not arrow or not (head.startswith("(") and head.endswith(")")):
        bad("expected '(arguments) -> returns' (the op's name goes to custom_op, not the schema)")
    arguments, kwarg_only = [], False
    for item in _split(head[1:-1], bad):
        if item == "*":
            if kwarg_only:
                bad("'*' appears twice")
            kwarg_only = True
            continue
        m = _ARG.fullmatch(item)
        if not m:
            bad(f"cannot read argument {item!r}; expected 'Type name' or 'Type name=default'")
        name, kind = m["name"], m["base"] + m["suffix"]
        if kind not in TYPES:
            bad(f"argument {name!r} has unknown type {kind!r}; known: {', '.join(sorted(TYPES))}")
        if m["alias"] is not None and (m["base"] != "Tensor" or not re.fullmatch(r"[a-z]\w*!", m["alias"])):
            bad(f"argument {name!r}: the only alias supported is a mutated Tensor, Tensor(a!), not {item!r}")
        if any(a.name == name for a in arguments):
            bad(f"argument {name!r} appears twice")
        default = REQUIRED if m["default"] is None else _parse_default(m["default"].strip(), kind, name, bad)
        arguments.append(Argument(name, kind, default, kwarg_only, m["alias"] is not None))
    returns_tuple = ret.startswith("(")
    if returns_tuple and not ret.endswith(")"):
        bad("unbalanced brackets in the returns")
    items = _split(ret[2:-2] if ret.startswith("((") else ret[1:-1], bad) if returns_tuple else [ret]
    for kind in items:
        if kind not in RETURN_TYPES:
            bad(f"unsupported return {kind!r}; returns are ({', '.join(sorted(RETURN_TYPES))}) or tuples of them")
    return Schema(tuple(arguments), tuple(items), returns_tuple)


def _split(body: str, bad) -> list:
    """The comma-separated items of ``body``, not splitting inside brackets or quotes."""
    items, depth, quote, start, escaped = [], 0, None, 0, False
    for i, c in enumerate(body):
        if quote:
            escaped, quote = (not escaped and c == "\\"), (None if c == quote and not escaped else quote)
        elif c in "\"'":
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    if depth or quote:
        bad("unbalanced brackets or quotes")
    items.append(body[start:].strip())
    if items == [""]:
        return []
    if "" in items:
        bad("an empty argument")
    return items


def _parse_default(text: str, kind: str, name: str, bad):
    if text in ("inf", "-inf", "nan"):
        value = float(text)
    elif re.fullmatch(r"[A-Za-z_][\w:]*", text) and text not in ("None", "True", "False"):
        if kind.startswith("ScalarType") and text in _dtype._BY_NAME:
            value = _dtype.from_name(text)
        elif kind.startswith("Device"):
            value = text
        else:
            bad(f"argument {name!r} has a default {text!r} that is not a {kind}")
    else:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            bad(f"cannot read the default {text!r} of argument {name!r}")
    try:
        _convert(kind, value)
    except (TypeError, RuntimeError):
        bad(f"argument {name!r} has a default {text!r} that is not a {kind}")
    return tuple(value) if isinstance(value, list) else value


# ---- infer ----------------------------------------------------------------------------------------
_NUMBER = frozenset({int, float, bool})
# names a string annotation may use without importing them (torch assumes torch.* and typing.*)
_IMPLIED = {"Tensor": TensorBase, "dtype": _dtype.dtype, "device": _device.device, "Optional": typing.Optional,
            "Sequence": typing.Sequence, "List": typing.List, "Union": typing.Union}
_VALID = ("Tensor, int, float, bool, str, dtype, device, Union[int, float, bool] (a Scalar), "
          "Optional[...] of each, Sequence[...] or list[...] of Tensor, Optional[Tensor], int, float, bool "
          "or the Scalar union, Optional[Sequence[...]] of int, float, bool")
_VALID_RETURNS = "Tensor, list[Tensor], int, float, bool, Union[int, float, bool], None, tuple[...] of these"


def _base_type(ann):
    """The schema type of a non-generic annotation (or the Scalar union), else None."""
    if isinstance(ann, type) and issubclass(ann, TensorBase):
        return "Tensor"
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and set(typing.get_args(ann)) == _NUMBER:
        return "Scalar"
    simple = {int: "SymInt", float: "float", bool: "bool", str: "str",
              _dtype.dtype: "ScalarType", _device.device: "Device"}
    return simple.get(ann) if isinstance(ann, type) else None


def infer(fn, mutates_args, op_name=None) -> Schema:
    """torch.library.infer_schema for functions annotated with minidl's types; ``mutates_args`` names
    the arguments the op writes into, or is "unknown" (then every Tensor argument is mutable)."""
    sig = inspect.signature(fn)
    module = getattr(fn, "__globals__", {})
    namespace = collections.ChainMap(module, _IMPLIED)

    def fail(what):
        raise ValueError(f"infer_schema({op_name or 'func'}): {what} Got func with signature {sig}")

    def resolve(ann):  # string annotations, and strings inside generics, are evaluated in fn's module
        text = ann.__forward_arg__ if isinstance(ann, typing.ForwardRef) else ann
        if not isinstance(text, str):
            return ann
        try:
            return eval(text, module, namespace)
        except Exception as e:  # noqa: BLE001 - any failure means the text names no type
            fail(f"Unsupported type annotation {text}. It is not a type. ({type(e).__name__}: {e}).")

    def param_type(ann):
        ann = resolve(ann)
        origin, args = typing.get_origin(ann), tuple(resolve(a) for a in typing.get_args(ann))
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            rest = tuple(a for a in args if a is not type(None))
            inner = param_type(rest[0] if len(rest) == 1 else typing.Union[rest])
            kind = inner and inner + "?"
        elif origin in (list, collections.abc.Sequence) and len(args) == 1:
            kind = param_type(args[0])
            kind = kind and kind + "[]"
        else:
            kind = _base_type(ann)
        return kind if kind in TYPES else None

    if isinstance(mutates_args, str):
        if mutates_args != "unknown":
            raise ValueError("mutates_args must either be a sequence of the names of the arguments that are "
                             f"mutated or the string 'unknown', not {mutates_args!r}.")
        mutated = None
    else:
        mutated = tuple(mutates_args)
    arguments = []
    for name, p in sig.parameters.items():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            fail("We do not support positional-only args, varargs, or varkwargs.")
        if p.annotation is p.empty:
            fail(f"Parameter {name} must have a type annotation.")
        kind = param_type(p.annotation)
        if kind is None:
            tuple_hint = (" We do not support Tuple inputs in schema. As a workaround, please try to use List "
                          "instead." if typing.get_origin(resolve(p.annotation)) is tuple else "")
            fail(f"Parameter {name} has unsupported type {p.annotation}.{tuple_hint} The valid types are: {_VALID}.")
        mutable = kind.startswith("Tensor") if mutated is None else name in mutated
        if mutable and not kind.startswith("Tensor"):
            fail(f"Parameter {name} is in mutable_args but only Tensors or collections of Tensors can be mutated")
        default = REQUIRED if p.default is p.empty else p.default
        if default is not REQUIRED and default is not None and not isinstance(
                default, (int, float, str, _dtype.dtype, _device.device)):
            fail(f"Parameter {name} has an unsupported default value type {type(default)}.")
        arguments.append(Argument(name, kind, default, p.kind is p.KEYWORD_ONLY, mutable))
    unseen = set(mutated or ()) - set(sig.parameters)
    if unseen:
        fail(f"{unseen} in mutates_args were not found in the custom op's signature. mutates_args should contain "
             "the names of all args that the custom op mutates, or just the string 'unknown' if you don't know.")

    ret = sig.return_annotation
    if ret is sig.empty:
        fail("No return type annotation was provided. Please add one.")
    ret = resolve(ret)
    if ret is None or ret is type(None):
        return Schema(tuple(arguments), (), True)
    is_tuple = typing.get_origin(ret) is tuple
    returns = tuple(_return_type(resolve(a), resolve) for a in (typing.get_args(ret) if is_tuple else (ret,)))
    if None in returns:
        fail(f"Return has unsupported type {sig.return_annotation}. The valid types are: {_VALID_RETURNS}.")
    return Schema(tuple(arguments), returns, is_tuple)


def _return_type(ann, resolve):
    args = typing.get_args(ann)
    if typing.get_origin(ann) is list and len(args) == 1 and _base_type(resolve(args[0])) == "Tensor":
        return "Tensor[]"
    kind = _base_type(ann)
    return kind if kind in RETURN_TYPES else None
