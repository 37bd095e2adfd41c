"""An unpickler that builds data and calls nothing it was not handed: how ``minidl.load`` reads the pickle of a torch
checkpoint under ``weights_only``, with the rules of torch's weights-only unpickler.

Restricting the globals (``find_class``) of Python's own unpickler is not enough: its BUILD sets any attribute of any
object on the stack (a loaded tensor's storage or layout, which kernels index unchecked) and its REDUCE calls any
callable there. This interpreter runs the binary opcodes of protocols 1 to 5 that build data, and:

* resolves a global only through ``resolve(module, name)``, which refuses it or returns an object; only objects
  ``resolve`` returned may be called (REDUCE, NEWOBJ);
* BUILDs only an OrderedDict (attributes such as a state dict's ``_metadata``, never one that hides a method) or an
  instance of a class ``buildable`` accepts (the classes the user marked safe);
* adds items only to a list, a dict (plain, ordered or Counter) or a set, each of exactly that type, or to an
  instance of a subclass of these that ``buildable`` accepts (a defaultdict marked safe);
* hands persistent ids to ``persistent_load``.

Text-protocol opcodes, the extension registry and out-of-band buffers are refused, and so are tuples nested too deep
or shared too widely (hashing one, as a dict key or set member, would overflow the C stack or take exponential time). A
malformed or truncated stream, or an allowed call that refuses its arguments, raises ``pickle.UnpicklingError`` naming
the file. Error messages show what the file built through ``brief``, bounded whatever it is.
"""
from __future__ import annotations

import _compat_pickle
import collections
import itertools
import pickle
import struct
from pickle import UnpicklingError

_STOP = object()
_DICTS = (dict, collections.OrderedDict, collections.Counter)
_DEPTH = 1000        # tuples nested deeper overflow the C stack when hashed (tuple hashing does not check the depth)
_SHARED = 1 << 20    # nodes a tuple may expand to beyond the pickle's length (only sharing, by DUP or memo, passes it)
_ITEMS, _CHARS = 6, 60  # the items of a container and the characters of a string that ``brief`` shows


def brief(value, depth: int = 2) -> str:
    """A short repr of a value a file built, for error messages: plain data up to a few items and levels, anything
    else by its type's name (the repr of nested shared tuples takes exponential time, a tensor's computes)."""
    kind = type(value)
    if value is None or kind in (bool, float, complex):
        return repr(value)
    if kind is int:
        return repr(value) if value.bit_length() <= 64 else f"<an int of {value.bit_length()} bits>"
    if kind in (str, bytes, bytearray):
        return repr(value[:_CHARS]) + ("..." if len(value) > _CHARS else "")
    if kind not in (tuple, list, dict, collections.OrderedDict) or not depth:
        return f"<{kind.__name__}>"
    if isinstance(value, dict):
        parts = [f"{brief(k, depth - 1)}: {brief(v, depth - 1)}" for k, v in itertools.islice(value.items(), _ITEMS)]
    else:
        parts = [brief(item, depth - 1) for item in value[:_ITEMS]]
    text = ", ".join(parts + ["..."] * (len(value) > _ITEMS))
    if kind is tuple:
        return f"({text}{',' * (len(value) == 1)})"
    return f"[{text}]" if kind is list else f"{{{text}}}"


class RestrictedUnpickler:
    """``RestrictedUnpickler(data, file name, resolve, persistent_load, buildable, encoding).load()``: the object
    ``data`` pickles, under the rules above; Python 2's strings are decoded as ``encoding`` ('bytes': kept as bytes),
    as torch's weights-only unpickler decodes them."""

    def __init__(self, data, name: str, resolve, persistent_load, buildable, encoding: str = "utf-8"):
        self._data, self._at, self.name, self.encoding = bytes(data), 0, name, encoding
        self._resolve, self._persistent_load, self._buildable = resolve, persistent_load, buildable
        self._stack, self._frames, self._memo = [], [], {}
        self._callable: dict = {}  # id -> object: what resolve returned, the only objects REDUCE and NEWOBJ call
        self._tuples: dict = {}    # id -> (depth, nodes it expands to, the tuple, kept so that its id stays its own)
        self._max_nodes = len(self._data) + _SHARED

    def load(self):
        while True:
            op = self._take(1)
            handler = _HANDLERS.get(op)
            if handler is None:
                raise self._malformed(f"opcode {op!r} at byte {self._at - 1}, which minidl does not run")
            if handler(self) is _STOP:
                return self._pop()

    # -- reading ---------------------------------------------------------------------------------------------
    def _malformed(self, detail: str) -> UnpicklingError:
        return UnpicklingError(f"minidl.load: the pickle of {self.name} is malformed: {detail}")

    def _take(self, n: int) -> bytes:
        if n < 0:
            raise self._malformed(f"a length of {n} at byte {self._at}")
        if self._at + n > len(self._data):
            raise UnpicklingError(f"minidl.load: the pickle of {self.name} is truncated: it ends at byte "
                                  f"{len(self._data)}, within a value of {n} bytes at byte {self._at}")
        self._at += n
        return self._data[self._at - n:self._at]

    def _number(self, fmt: str):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _line(self) -> str:
        end = self._data.find(b"\n", self._at)
        if end < 0:
            raise UnpicklingError(f"minidl.load: the pickle of {self.name} is truncated within a global's name")
        try:
            return self._take(end + 1 - self._at)[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._malformed(f"a global's name is not UTF-8 ({e})") from None

    # -- the stack -------------------------------------------------------------------------------------------
    def _push(self, value) -> None:
        self._stack.append(value)

    def _pop(self):
        if not self._stack:
            raise self._malformed(f"an opcode at byte {self._at - 1} takes a value from an empty stack")
        return self._stack.pop()

    def _top(self):
        value = self._pop()
        self._push(value)
        return value

    def _mark(self) -> None:
        self._frames.append(self._stack)
        self._stack = []

    def _pop_mark(self) -> list:
        if not self._frames:
            raise self._malformed(f"an opcode at byte {self._at - 1} needs a mark that was never set")
        items, self._stack = self._stack, self._frames.pop()
        return items

    def _container(self, types, opcode: str):
        target = self._top()
        if type(target) not in types and not (isinstance(target, types) and self._buildable(type(target))):
            raise UnpicklingError(f"minidl.load: the pickle of {self.name} adds items ({opcode}) to a "
                                  f"{type(target).__name__}, which minidl does not allow")
        return target

    # -- opcodes that build or call --------------------------------------------------------------------------
    def _global(self, module: str, name: str) -> None:
        if (module, name) in _compat_pickle.NAME_MAPPING:  # protocol 2 names Python 2's spellings
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        value = self._resolve(module, name)
        self._callable[id(value)] = value
        self._push(value)

    def _call(self, func, args: tuple, kwargs: dict, opcode: str):
        if id(func) not in self._callable or type(args) is not tuple or type(kwargs) is not dict:
            raise UnpicklingError(f"minidl.load: the pickle of {self.name} calls ({opcode}) a "
                                  f"{type(func).__name__} that is no allowed global, or with arguments that are not "
                                  f"a tuple")
        try:
            if opcode != "REDUCE" and isinstance(func, type):
                return func.__new__(func, *args, **kwargs)
            return func(*args, **kwargs)
        except (TypeError, ValueError, OverflowError, LookupError) as e:  # arguments an allowed function refuses
            raise self._malformed(f"{getattr(func, '__qualname__', type(func).__name__)}: {e}") from None

    def _reduce(self) -> None:
        args = self._pop()
        self._push(self._call(self._pop(), args, {}, "REDUCE"))

    def _newobj(self) -> None:
        args = self._pop()
        self._push(self._call(self._pop(), args, {}, "NEWOBJ"))

    def _newobj_ex(self) -> None:
        kwargs, args = self._pop(), self._pop()
        self._push(self._call(self._pop(), args, kwargs, "NEWOBJ_EX"))

    def _build(self) -> None:
        state = self._pop()
        target = self._top()
        if type(target) is collections.OrderedDict:
            if not (type(state) is dict and all(type(k) is str and not hasattr(target, k) for k in state)):
                raise UnpicklingError(f"minidl.load: the pickle of {self.name} sets attributes of an OrderedDict "
                                      f"that are not new names ({brief(state)})")
            target.__dict__.update(state)
        elif self._buildable(type(target)):  # a class the user trusts: as Python's unpickler does
            setstate = getattr(target, "__setstate__", None)
            if setstate is not None:
                setstate(state)
                return
            slots = None
            if isinstance(state, tuple) and len(state) == 2:
                state, slots = state
            if not isinstance(state or {}, dict) or not isinstance(slots or {}, dict):
                raise self._malformed(f"the state of a {type(target).__name__} is not a dict")
            target.__dict__.update(state or {})
            for key, value in (slots or {}).items():
                setattr(target, key, value)
        else:
            raise UnpicklingError(f"minidl.load: the pickle of {self.name} sets the state (BUILD) of a "
                                  f"{type(target).__name__}; only an OrderedDict or a class marked safe is allowed")

    def _set_items(self, items: list, opcode: str) -> None:
        target = self._container(_DICTS, opcode)
        if len(items) % 2:
            raise self._malformed(f"{opcode} with an odd number of keys and values")
        try:
            for i in range(0, len(items), 2):
                target[items[i]] = items[i + 1]
        except TypeError as e:  # an unhashable key
            raise self._malformed(f"{opcode}: {e}") from None

    def _add_items(self) -> None:
        items = self._pop_mark()
        target = self._container((set,), "ADDITEMS")
        try:
            target.update(items)
        except TypeError as e:
            raise self._malformed(f"ADDITEMS: {e}") from None

    def _frozenset(self) -> None:
        try:
            self._push(frozenset(self._pop_mark()))
        except TypeError as e:
            raise self._malformed(f"FROZENSET: {e}") from None

    def _tuple(self, items: list) -> None:
        """Push ``tuple(items)``, unless it nests tuples too deep or expands, through shared parts, to more nodes
        than the pickle could spell out: hashing it would overflow the C stack or take exponential time."""
        depth = nodes = 1
        for item in items:
            inner = self._tuples.get(id(item), (1, 1 + len(item))) if type(item) is tuple else (0, 1)
            depth, nodes = max(depth, inner[0] + 1), nodes + inner[1]
        if depth > _DEPTH or nodes > self._max_nodes:
            raise self._malformed(f"a tuple nested {depth} deep, of {nodes} nodes counting shared ones each time "
                                  f"(minidl allows {_DEPTH} and {self._max_nodes})")
        value = tuple(items)
        self._tuples[id(value)] = (depth, nodes, value)
        self._push(value)

    def _string(self, data: bytes) -> None:
        """Python 2's str (BINSTRING), decoded as the load's ``encoding`` says."""
        try:
            self._push(data if self.encoding == "bytes" else data.decode(self.encoding))
        except (ValueError, LookupError) as e:  # not of that encoding, or not a text encoding
            raise self._malformed(f"a Python 2 string cannot be decoded as {self.encoding} ({e}); pass the encoding "
                                  f"it was written in to minidl.load (encoding=...), as to torch.load") from None

    def _memo_get(self, index: int) -> None:
        if index not in self._memo:
            raise self._malformed(f"it reads memo slot {index}, which was never written")
        self._push(self._memo[index])

    def _memo_put(self, index: int) -> None:
        self._memo[index] = self._top()

    def _proto(self) -> None:
        version = self._take(1)[0]
        if version > pickle.HIGHEST_PROTOCOL:
            raise self._malformed(f"pickle protocol {version}")

    def _pop_any(self) -> None:
        if self._stack:
            self._stack.pop()
        else:
            self._pop_mark()


def _sized(fmt: str, make):
    """The handler of an opcode that pushes ``make(bytes)`` of a length read as ``fmt``."""
    def handler(self):
        data = self._take(self._number(fmt))
        try:
            self._push(make(data))
        except ValueError as e:  # text that is not UTF-8
            raise self._malformed(str(e)) from None
    return handler


def _text(data: bytes) -> str:
    return str(data, "utf-8", "surrogatepass")


def _long(data: bytes) -> int:
    return int.from_bytes(data, "little", signed=True)


def _tuple_of(n: int):
    def handler(self):
        self._tuple([self._pop() for _ in range(n)][::-1])
    return handler


def _binstring(fmt: str):
    def handler(self):
        self._string(self._take(self._number(fmt)))
    return handler


def _stack_global(self) -> None:
    name, module = self._pop(), self._pop()
    if type(module) is not str or type(name) is not str:
        raise self._malformed("STACK_GLOBAL of a name that is not a string")
    self._global(module, name)


def _append(self) -> None:
    item = self._pop()
    self._container((list,), "APPEND").append(item)


def _appends(self) -> None:
    items = self._pop_mark()
    self._container((list,), "APPENDS").extend(items)


def _setitem(self) -> None:
    value, key = self._pop(), self._pop()
    self._set_items([key, value], "SETITEM")


def _dict(self) -> None:
    items = self._pop_mark()
    self._push({})
    self._set_items(items, "DICT")


_OP = {name: value for name, value in vars(pickle).items() if name.isupper() and isinstance(value, bytes)}
_HANDLERS = {_OP[name]: handler for name, handler in {
    "PROTO": RestrictedUnpickler._proto,
    "FRAME": lambda self: self._take(8),
    "STOP": lambda self: _STOP,
    "MARK": RestrictedUnpickler._mark,
    "POP": RestrictedUnpickler._pop_any,
    "POP_MARK": RestrictedUnpickler._pop_mark,
    "DUP": lambda self: self._push(self._top()),
    "NONE": lambda self: self._push(None),
    "NEWTRUE": lambda self: self._push(True),
    "NEWFALSE": lambda self: self._push(False),
    "BININT": lambda self: self._push(self._number("<i")),
    "BININT1": lambda self: self._push(self._number("<B")),
    "BININT2": lambda self: self._push(self._number("<H")),
    "LONG1": _sized("<B", _long),
    "LONG4": _sized("<i", _long),
    "BINFLOAT": lambda self: self._push(self._number(">d")),
    "BINUNICODE": _sized("<I", _text),
    "SHORT_BINUNICODE": _sized("<B", _text),
    "BINUNICODE8": _sized("<Q", _text),
    "BINSTRING": _binstring("<i"),
    "SHORT_BINSTRING": _binstring("<B"),
    "BINBYTES": _sized("<I", bytes),
    "SHORT_BINBYTES": _sized("<B", bytes),
    "BINBYTES8": _sized("<Q", bytes),
    "BYTEARRAY8": _sized("<Q", bytearray),
    "EMPTY_LIST": lambda self: self._push([]),
    "EMPTY_DICT": lambda self: self._push({}),
    "EMPTY_TUPLE": lambda self: self._push(()),
    "EMPTY_SET": lambda self: self._push(set()),
    "LIST": lambda self: self._push(self._pop_mark()),
    "DICT": _dict,
    "TUPLE": lambda self: self._tuple(self._pop_mark()),
    "TUPLE1": _tuple_of(1),
    "TUPLE2": _tuple_of(2),
    "TUPLE3": _tuple_of(3),
    "FROZENSET": RestrictedUnpickler._frozenset,
    "APPEND": _append,
    "APPENDS": _appends,
    "SETITEM": _setitem,
    "SETITEMS": lambda self: self._set_items(self._pop_mark(), "SETITEMS"),
    "ADDITEMS": RestrictedUnpickler._add_items,
    "GLOBAL": lambda self: self._global(self._line(), self._line()),
    "STACK_GLOBAL": _stack_global,
    "REDUCE": RestrictedUnpickler._reduce,
    "NEWOBJ": RestrictedUnpickler._newobj,
    "NEWOBJ_EX": RestrictedUnpickler._newobj_ex,
    "BUILD": RestrictedUnpickler._build,
    "BINPERSID": lambda self: self._push(self._persistent_load(self._pop())),
    "BINGET": lambda self: self._memo_get(self._number("<B")),
    "LONG_BINGET": lambda self: self._memo_get(self._number("<I")),
    "BINPUT": lambda self: self._memo_put(self._number("<B")),
    "LONG_BINPUT": lambda self: self._memo_put(self._number("<I")),
    "MEMOIZE": lambda self: self._memo_put(len(self._memo)),
}.items()}
