"""Reading a flight-recorder pickle without running anything it says, and within bounds.

torch writes its dump with ``pickle`` protocol 2 and nothing but dicts, lists, tuples, strings
and numbers (no globals). A file on disk is still untrusted input: a pickle can name any
callable (``GLOBAL 'posix system'`` + ``REDUCE``) and ``pickle.load`` would call it. Two fences,
each enough on its own:

1. :func:`scan_pickle` walks the opcodes (``pickletools.genops``, which decodes without
   executing) and follows the *types* on the unpickler's stack: only the opcodes that build
   ``None``, booleans, numbers, strings, bytes, tuples, lists and dicts are accepted, dict keys
   must be strings (so no crafted hash collisions make building a dict quadratic), and the
   number of opcodes is capped (a 1-byte ``EMPTY_LIST`` makes a 56-byte object: the cap bounds
   memory). A pickle that would import something is refused by that thing's name
   (``posix.system``), before anything is unpickled.
2. :class:`NoGlobalsUnpickler`, a :class:`pickle.Unpickler` whose ``find_class`` and
   ``persistent_load`` refuse everything, then builds the value.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_DUMP_LIMITS",
    "CorruptDump",
    "DumpLimits",
    "NoGlobalsUnpickler",
    "UnsafeDump",
    "load_pickle",
    "scan_pickle",
]


@dataclass(frozen=True, slots=True)
class DumpLimits:
    """Bounds on one dump file.

    Attributes:
        max_bytes: Largest file read, e.g. 64 MiB (torch 2.13's 2000 entries with stack
            traces: about 250 KB).
        max_opcodes: Pickle opcodes accepted, e.g. 4 million (2000 entries: about 140 000).
        max_entries: Recorder entries looked at per file, e.g. ``100000``.
    """

    max_bytes: int = 64 * 1024 * 1024
    max_opcodes: int = 4_000_000
    max_entries: int = 100_000


DEFAULT_DUMP_LIMITS = DumpLimits()


class UnsafeDump(ValueError):  # reads as what it is: "UnsafeDump: ..."
    """The file would run code or build something that is not plain data; nothing was run."""


class CorruptDump(ValueError):
    """The file is truncated, not a pickle, or over a limit."""


# Opcodes that only build plain data, by what they leave on the stack.
_SCALARS = {
    "NONE": "none", "NEWTRUE": "bool", "NEWFALSE": "bool",
    "INT": "int", "BININT": "int", "BININT1": "int", "BININT2": "int",
    "LONG": "int", "LONG1": "int", "LONG4": "int", "FLOAT": "float", "BINFLOAT": "float",
    "STRING": "str", "BINSTRING": "str", "SHORT_BINSTRING": "str",
    "UNICODE": "str", "BINUNICODE": "str", "SHORT_BINUNICODE": "str", "BINUNICODE8": "str",
    "BINBYTES": "bytes", "SHORT_BINBYTES": "bytes", "BINBYTES8": "bytes",
    "EMPTY_LIST": "list", "EMPTY_DICT": "dict", "EMPTY_TUPLE": "tuple",
}
_CODE = frozenset({"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ",
                   "NEWOBJ_EX", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4"})
_MARK = ("mark", None)
# A stack item: (type, the text when it is a short string: to name what a pickle imports).
_Item = tuple[str, "str | None"]


class _Stack:
    def __init__(self) -> None:
        self.items: list[_Item] = []

    def push(self, item: _Item) -> None:
        self.items.append(item)

    def pop(self, opcode: str) -> _Item:
        if not self.items or self.items[-1] is _MARK:
            raise CorruptDump(f"{opcode} with nothing to take from the stack")
        return self.items.pop()

    def pop_mark(self, opcode: str) -> list[_Item]:
        for index in range(len(self.items) - 1, -1, -1):
            if self.items[index] is _MARK:
                taken = self.items[index + 1:]
                del self.items[index:]
                return taken
        raise CorruptDump(f"{opcode} without a MARK")

    def top(self, opcode: str) -> _Item:
        if not self.items or self.items[-1] is _MARK:
            raise CorruptDump(f"{opcode} with nothing on the stack")
        return self.items[-1]


def _keys_are_strings(pairs: list[_Item], opcode: str) -> None:
    if len(pairs) % 2:
        raise CorruptDump(f"{opcode} with an odd number of items")
    for key in pairs[::2]:
        if key[0] != "str":
            raise UnsafeDump(f"a dict key of type {key[0]} ({opcode}): torch's dumps key every "
                             "dict by string")


def _refuse(opcode: str, arg: Any, stack: _Stack) -> UnsafeDump:
    if opcode == "GLOBAL" and isinstance(arg, str):
        name = ".".join(arg.split(" ", 1))
        return UnsafeDump(f"it imports {name!r} (GLOBAL): a flight-recorder dump holds plain "
                          "data only; refused, nothing was run")
    if opcode == "STACK_GLOBAL" and len(stack.items) >= 2:
        module, attribute = stack.items[-2], stack.items[-1]
        if module[1] is not None and attribute[1] is not None:
            return UnsafeDump(f"it imports '{module[1]}.{attribute[1]}' (STACK_GLOBAL): a "
                              "flight-recorder dump holds plain data only; refused, nothing "
                              "was run")
    return UnsafeDump(f"opcode {opcode} builds objects or calls code, which a flight-recorder "
                      "dump never does; refused, nothing was run")


def scan_pickle(data: bytes, limits: DumpLimits = DEFAULT_DUMP_LIMITS) -> None:
    """Check that ``data`` is a pickle of plain data whose top level is a dict, without
    unpickling it.

    Raises:
        UnsafeDump: It names a global, calls or builds objects, or keys a dict by a non-string.
        CorruptDump: Truncated, malformed, or more than ``limits.max_opcodes`` opcodes.
    """
    stack = _Stack()
    memo: dict[int, _Item] = {}
    count = 0
    try:
        for op, arg, _ in pickletools.genops(data):
            count += 1
            if count > limits.max_opcodes:
                raise CorruptDump(f"more than {limits.max_opcodes} pickle opcodes")
            name = op.name
            if name in _SCALARS:
                kind = _SCALARS[name]
                text = arg if kind == "str" and isinstance(arg, str) and len(arg) <= 200 else None
                stack.push((kind, text))
            elif name in _CODE or name not in _DATA_OPS:
                raise _refuse(name, arg, stack)
            else:
                _DATA_OPS[name](stack, memo, arg)
    except (UnsafeDump, CorruptDump):
        raise
    except ValueError as e:  # genops: truncated or unknown opcode
        raise CorruptDump(f"not a complete pickle ({e})") from e
    if len(stack.items) != 1 or stack.items[0][0] != "dict":
        raise CorruptDump("the pickle does not hold one dict")


def _proto(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    if not isinstance(arg, int) or not 0 <= arg <= pickle.HIGHEST_PROTOCOL:
        raise CorruptDump(f"pickle protocol {arg!r}")


def _nothing(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    return None


def _mark(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.push(_MARK)


def _pop(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    if stack.items and stack.items[-1] is _MARK:
        stack.items.pop()
    else:
        stack.pop("POP")


def _pop_mark(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.pop_mark("POP_MARK")


def _dup(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.push(stack.top("DUP"))


def _tuple_of(size: int) -> Any:
    def build(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
        for _ in range(size):
            stack.pop(f"TUPLE{size}")
        stack.push(("tuple", None))
    return build


def _tuple(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.pop_mark("TUPLE")
    stack.push(("tuple", None))


def _list(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.pop_mark("LIST")
    stack.push(("list", None))


def _dict(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    _keys_are_strings(stack.pop_mark("DICT"), "DICT")
    stack.push(("dict", None))


def _append(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.pop("APPEND")
    if stack.top("APPEND")[0] != "list":
        raise UnsafeDump("APPEND to something that is not a list")


def _appends(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    stack.pop_mark("APPENDS")
    if stack.top("APPENDS")[0] != "list":
        raise UnsafeDump("APPENDS to something that is not a list")


def _setitem(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    value = stack.pop("SETITEM")
    key = stack.pop("SETITEM")
    _keys_are_strings([key, value], "SETITEM")
    if stack.top("SETITEM")[0] != "dict":
        raise UnsafeDump("SETITEM on something that is not a dict")


def _setitems(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    _keys_are_strings(stack.pop_mark("SETITEMS"), "SETITEMS")
    if stack.top("SETITEMS")[0] != "dict":
        raise UnsafeDump("SETITEMS on something that is not a dict")


def _put(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    if not isinstance(arg, int) or arg < 0:
        raise CorruptDump(f"memo index {arg!r}")
    memo[arg] = stack.top("PUT")


def _memoize(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    memo[len(memo)] = stack.top("MEMOIZE")


def _get(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    if arg not in memo:
        raise CorruptDump(f"memo index {arg!r} used before it was set")
    stack.push(memo[arg])


def _stop(stack: _Stack, memo: dict[int, _Item], arg: Any) -> None:
    return None


_DATA_OPS: dict[str, Any] = {
    "PROTO": _proto, "FRAME": _nothing, "STOP": _stop, "MARK": _mark, "POP": _pop,
    "POP_MARK": _pop_mark, "DUP": _dup, "TUPLE": _tuple, "TUPLE1": _tuple_of(1),
    "TUPLE2": _tuple_of(2), "TUPLE3": _tuple_of(3), "LIST": _list, "DICT": _dict,
    "APPEND": _append, "APPENDS": _appends, "SETITEM": _setitem, "SETITEMS": _setitems,
    "PUT": _put, "BINPUT": _put, "LONG_BINPUT": _put, "MEMOIZE": _memoize,
    "GET": _get, "BINGET": _get, "LONG_BINGET": _get,
}


class NoGlobalsUnpickler(pickle.Unpickler):
    """A :class:`pickle.Unpickler` that resolves no global and no persistent id: a pickle that
    names a class or a function fails with :class:`UnsafeDump` naming it, before it is called."""

    def find_class(self, module: str, name: str) -> Any:
        """Refuse every global, e.g. ``UnsafeDump("it imports 'posix.system' ...")``."""
        raise UnsafeDump(f"it imports '{module}.{name}': a flight-recorder dump holds plain "
                         "data only; refused, nothing was run")

    def persistent_load(self, pid: Any) -> Any:
        """Refuse every persistent id."""
        raise UnsafeDump("it refers to a persistent object: refused, nothing was run")


def load_pickle(data: bytes, limits: DumpLimits = DEFAULT_DUMP_LIMITS) -> dict[str, Any]:
    """The dict a flight-recorder pickle holds; never imports or calls anything.

    Raises:
        UnsafeDump: It would import or call something (named), or is not plain data.
        CorruptDump: Truncated, malformed or over a limit.
    """
    if len(data) > limits.max_bytes:
        raise CorruptDump(f"{len(data)} bytes, over the {limits.max_bytes}-byte limit")
    scan_pickle(data, limits)
    try:
        value = NoGlobalsUnpickler(io.BytesIO(data)).load()
    except UnsafeDump:
        raise
    except Exception as e:  # whatever a malformed pickle raises
        raise CorruptDump(f"not a complete pickle ({type(e).__name__}: {e})") from e
    if not isinstance(value, dict):
        raise CorruptDump(f"the pickle holds a {type(value).__name__}, not a dict")
    return value
