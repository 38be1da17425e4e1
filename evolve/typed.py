"""Plain data (YAML, JSON) into typed, frozen dataclasses and back: the reading half of a config.

``build(cls, data, where, context)`` makes ``cls`` from a mapping, refusing unknown keys, missing
required ones and values of the wrong type with one error that names the key (``Context.error``);
each field's type hint says how its value is read (nested dataclasses, lists and tuples, mappings,
enums by value, paths relative to the context's folder, bools, ints, finite floats, strings).
``plain(value)`` is the way back: JSON-ready data.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Context:
    """Where the data comes from (named in every error), the folder relative paths are taken from, and the
    error to raise."""

    origin: str
    base_dir: Path | None
    error_type: type[Exception] = ValueError

    def error(self, where: str, message: str) -> Exception:
        return self.error_type(f"{self.origin}: {where}: {message}" if where else f"{self.origin}: {message}")


def build(cls: type, data: Any, where: str, ctx: Context) -> Any:
    """``cls`` from the mapping ``data`` (at ``where`` in the whole, for errors)."""
    if not isinstance(data, dict):
        raise ctx.error(where, f"expected a mapping of keys, got {_show(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = f"{where}.{unknown[0]}" if where else str(unknown[0])
        raise ctx.error("", f"unknown key '{key}' (known keys{' of ' + where if where else ''}: {', '.join(fields)})")
    values = {}
    for name, field in fields.items():
        key = f"{where}.{name}" if where else name
        if name in data:
            values[name] = _convert(data[name], hints[name], key, ctx)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ctx.error("", f"{key} is required")
    return cls(**values)


def _convert(value: Any, hint: Any, where: str, ctx: Context) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner, where, ctx)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where, ctx)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ctx.error(where, f"expected a list, got {_show(value)}")
        items = [_convert(v, args[0], f"{where}[{i}]", ctx) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ctx.error(where, f"expected a mapping, got {_show(value)}")
        return {_convert(k, args[0], where, ctx): _convert(v, args[1], f"{where}.{k}", ctx) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        choices = [m.value for m in hint]
        if value not in choices:
            raise ctx.error(where, f"{_show(value)} is not one of {', '.join(choices)}")
        return hint(value)
    if hint is Path:
        if not isinstance(value, str) or not value:
            raise ctx.error(where, f"expected a file path, got {_show(value)}")
        path = Path(value).expanduser()
        if not path.is_absolute() and ctx.base_dir is not None:
            path = ctx.base_dir / path
        return path.resolve()
    if hint is bool:
        if type(value) is not bool:
            raise ctx.error(where, f"expected true or false, got {_show(value)}")
        return value
    if hint is int:
        if type(value) is not int:
            raise ctx.error(where, f"expected an integer, got {_show(value)}")
        return value
    if hint is float:
        # PyYAML reads 1e-6 (no dot) as a string: accept a string that is a number.
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ctx.error(where, f"expected a number, got {_show(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ctx.error(where, f"expected a string, got {_show(value)}")
        return value
    raise TypeError(f"config field {where} has a type the loader does not know: {hint!r}")


def _show(value: Any) -> str:
    """What a value of the wrong type is, as an error says it."""
    kind = "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else None
    return kind or repr(value)


def plain(value: Any) -> Any:
    """``value`` (dataclasses, enums, paths, containers) as JSON-ready data."""
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
