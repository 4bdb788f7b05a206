"""Frozen records with keyword-only fields: a task's request and body, made without exec.

`@dataclass(frozen=True, kw_only=True)` compiles each class's methods
(exec of their generated source) when the class is made, and every
`taskq submit` makes Request and TaskBody at import: about a tenth of
what `python -c 'import click'` costs, before any work (python
bench/run.py --only submit, one `taskq submit` process). `record` makes
the same kind of class from its annotations with methods that are not
compiled per class: keyword-only __init__ with defaults and factories,
frozen attributes, __eq__, __hash__ and __repr__ over the fields in
order, a subclass's fields after its base's. Type checkers read it as
a dataclass transform; `replace` and `names` stand for dataclasses'
replace and fields, which refuse a record at run time (though mypy
passes them).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")
_MISSING: Any = object()


class _Factory:
    """A field's default made anew for each record (field(default_factory=...))."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is made by default_factory for each record."""
    made: T = _Factory(default_factory)  # type: ignore[assignment]
    return made


def names(cls: type) -> tuple[str, ...]:
    """A record class's fields, in order (as dataclasses.fields names them)."""
    spec: tuple[tuple[str, Any], ...] = cls.__dict__["_record_fields"]
    return tuple(name for name, _ in spec)


def replace(obj: T, **changes: Any) -> T:
    """A copy of a record with some fields replaced, made by its __init__ (dataclasses.replace)."""
    values = {name: obj.__dict__[name] for name in names(type(obj))}
    values.update(changes)
    made: T = type(obj)(**values)
    return made


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """Make cls a frozen record of its annotated fields (after its base record's, if any)."""
    spec = list(getattr(cls, "_record_fields", ()))
    for name in inspect.get_annotations(cls):  # its own, as text: never evaluated
        default = cls.__dict__.get(name, _MISSING)
        spec = [f for f in spec if f[0] != name] + [(name, default)]
        if default is not _MISSING:
            delattr(cls, name)  # the instance's value, not the class's, is the field
    fields = tuple(spec)
    own = frozenset(name for name, _ in fields)
    cls._record_fields = fields  # type: ignore[attr-defined]

    def __init__(self: Any, **values: Any) -> None:
        d = self.__dict__
        for name, default in fields:
            if name in values:
                d[name] = values[name]
            elif default is _MISSING:
                raise TypeError(f"{cls.__name__}() missing keyword argument {name!r}")
            else:
                d[name] = default.make() if type(default) is _Factory else default
        if not own.issuperset(values):
            unknown = sorted(set(values) - own)[0]
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {unknown!r}")

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


class Frozen:
    """A record's base: immutable, compared and hashed by its fields' values in order."""

    _record_fields: tuple[tuple[str, Any], ...] = ()

    def _values(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[name] for name, _ in self._record_fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={self.__dict__[name]!r}" for name, _ in self._record_fields)
        return f"{type(self).__qualname__}({values})"
