"""Typed messages for a wire of JSON objects: dataclasses whose every field is checked as it is read.

``fitness.boundary.protocol`` declares the judge<->worker messages with these. A
message is a frozen dataclass (``@message``) whose ``HEAD`` holds the constant
fields that name it on the wire; each field is declared with ``field(check)``,
where ``check(value, name)`` returns the value read off the wire or raises
``ProtocolViolation``. ``from_wire`` accepts exactly ``HEAD`` and the message's
fields, so a forged or malformed message never becomes an object.

>>> @message
... class Hello(Message):
...     HEAD = {"kind": "hello"}
...     times: list[float] = field(list_of(duration))
>>> Hello.from_wire({"kind": "hello", "times": [1.5, 2]})
Hello(times=[1.5, 2.0])
>>> try:
...     Hello.from_wire({"kind": "hello", "times": [-1.0]})
... except ProtocolViolation as violation:
...     print(violation)
Hello.times[0]: not a finite number >= 0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

# Fields the channel itself adds to every message (fitness.boundary.sandbox's nonce, fitness.boundary.wire's tensors).
TRANSPORT = frozenset({"nonce", "tensors", "spill"})

Check = Callable[[Any, str], Any]


class ProtocolViolation(ValueError):
    """A message no honest peer sends."""


def require(ok: bool, name: str, what: str) -> None:
    """Raise ``ProtocolViolation`` saying ``name``'s ``what`` unless ``ok``."""
    if not ok:
        raise ProtocolViolation(f"{name}: {what}")


# -- field checks: each returns the value read, or raises ProtocolViolation ----------------

def text(value: Any, name: str) -> str:
    require(type(value) is str, name, "not a string")
    return value


def flag(value: Any, name: str) -> bool:
    require(type(value) is bool, name, "not true or false")
    return value


def integer(value: Any, name: str) -> int:
    require(type(value) is int, name, "not an integer")
    return value


def count(value: Any, name: str) -> int:
    require(type(value) is int and value >= 0, name, "not an integer >= 0")
    return value


def duration(value: Any, name: str) -> float:
    """A time (milliseconds or seconds): a finite number >= 0."""
    require(type(value) in (int, float) and 0 <= value < math.inf, name, "not a finite number >= 0")
    return float(value)


def scalar(value: Any, name: str) -> Any:
    require(type(value) in (bool, int, float), name, "not a number or a flag")
    return value


def optional(check: Check) -> Check:
    return lambda value, name: None if value is None else check(value, name)


def list_of(check: Check) -> Check:
    def read(value: Any, name: str) -> list:
        require(type(value) is list, name, "not a list")
        return [check(item, f"{name}[{i}]") for i, item in enumerate(value)]

    return read


def dict_of(check: Check) -> Check:
    def read(value: Any, name: str) -> dict:
        require(type(value) is dict and all(type(key) is str for key in value), name, "not an object")
        return {key: check(item, f"{name}[{key[:40]!r}]") for key, item in value.items()}

    return read


def field(check: Check, write: Callable[[Any], Any] | None = None, **kwargs: Any) -> Any:
    """A message's field: ``check`` reads it off the wire, ``write`` (if given) puts a value
    that is not plain JSON there (``None`` stays ``None``)."""
    return dataclasses.field(metadata={"check": check, "write": write}, **kwargs)


# -- messages -------------------------------------------------------------------------------

class Message:
    """A typed message (declare one with ``@message``)."""

    HEAD: ClassVar[dict[str, Any]] = {}
    TENSORS: ClassVar[bool] = False  # whether the message carries tensors besides its JSON

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the wire carries."""
        body = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value, write = getattr(self, f.name), f.metadata["write"]
            body[f.name] = write(value) if write is not None and value is not None else value
        return {**self.HEAD, **body}

    @classmethod
    def from_wire(cls, data: Any) -> Any:
        """The message ``data`` (a decoded JSON object) carries: exactly ``HEAD`` and this
        message's fields, each checked. Raises ``ProtocolViolation``."""
        what = cls.__name__
        require(type(data) is dict, what, "not a JSON object")
        body = {key: value for key, value in data.items() if key not in TRANSPORT}
        for key, value in cls.HEAD.items():
            found = body.pop(key, None)
            require(type(found) is type(value) and found == value, what, f"{key} is not {value!r}")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        require(set(body) == {f.name for f in fields}, what,
                f"fields {sorted(map(str, body))[:20]}, expected {sorted(f.name for f in fields)}")
        read = cls(**{f.name: f.metadata["check"](body[f.name], f"{what}.{f.name}") for f in fields})
        read.check()
        return read

    def check(self) -> None:
        """Raise ``ProtocolViolation`` where the fields, each fine alone, do not fit together."""


def message(cls: type) -> type:
    """Declare a message: a frozen dataclass of ``Message``."""
    return dataclasses.dataclass(frozen=True)(cls)
