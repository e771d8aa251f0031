"""Helpers over the object-API classes flatc generates (`placer.wire.*T`)."""
from __future__ import annotations

import sys
from typing import Any, TypeVar

from flatbuffers.compat import import_numpy

np = import_numpy()  # what the generated code reads vectors into, when installed
T = TypeVar("T")


def make(cls: type[T], **fields: Any) -> T:
    """An object-API value with `fields` set, e.g.
    make(NodeT, name="n0", gpuFreeMilli=[1000] * 8).

    A misspelt field raises TypeError: the generated classes would take it
    as a new attribute and leave it off the wire without a word.
    """
    value = cls()
    for name, field in fields.items():
        if name not in vars(value):
            raise TypeError(f"{cls.__name__} has no field {name!r}")
        setattr(value, name, field)
    return value


def plain(value: T) -> T:
    """`value` in plain Python, changed in place all the way down: the
    generated readers' strings (bytes) become str, their vectors (numpy
    arrays, when numpy is installed) lists, and absent vectors (FlatBuffers
    leaves empty ones out) empty lists. Replies come this way; call it on
    what you unpack yourself."""
    # flatc puts the reader `Node` beside `NodeT`, with `<Field>IsNone` for
    # each vector field and no other.
    reader = getattr(sys.modules[type(value).__module__], type(value).__name__[:-1])
    for name, field in vars(value).items():
        if field is None and hasattr(reader, name[:1].upper() + name[1:] + "IsNone"):
            field = []
        setattr(value, name, _plain_field(field))
    return value


def _plain_field(field: Any) -> Any:
    if isinstance(field, bytes):
        return field.decode()
    if np is not None and isinstance(field, np.ndarray):
        field = field.tolist()
    if isinstance(field, list):
        return [_plain_field(f) for f in field]
    if hasattr(field, "__dict__"):
        return plain(field)
    return field


def fingerprint(value: Any) -> Any:
    """A comparable copy of an object-API value (fields by name, vectors as
    tuples), which later changes to the value in place do not reach."""
    if isinstance(value, (list, tuple)):
        return tuple(fingerprint(v) for v in value)
    if np is not None and isinstance(value, np.ndarray):
        return tuple(value.tolist())
    if hasattr(value, "__dict__"):
        return type(value).__name__, {k: fingerprint(v) for k, v in vars(value).items()}
    return value


def enum_name(enum: type, value: int) -> str:
    """The name of a value of a generated enum, e.g.
    enum_name(ErrorCode, reply.code) == "InvalidArgument"; "Unknown" for a
    value this schema does not name."""
    names = (k for k, v in vars(enum).items() if v == value and not k.startswith("_"))
    return next(names, "Unknown")
