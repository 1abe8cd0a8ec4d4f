"""`record`: a frozen dataclass, built for a fraction of what `dataclasses.dataclass(frozen=True)` costs at import.

The stages pass frozen dataclasses between them, and a diagnosis imports some sixty. Python 3.11's dataclass
compiles six methods a class from source (`__init__`, `__repr__`, `__eq__`, `__hash__`, the frozen `__setattr__`
and `__delattr__`): 0.8 ms a class, a quarter of a 20-line log's whole run. Here `dataclasses` still reads the
fields (so `fields`, `replace` and `asdict` work as ever), only `__init__` is compiled, and the other five are
shared functions that read the class's fields through a getter: 0.25 ms a class. Behaviour is a frozen
dataclass's (tests/test_records.py holds the two side by side): equality and hashing over the fields that compare,
the repr of the fields that show, assignment refused with `dataclasses.FrozenInstanceError`, copying and pickling.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, TypeVar, dataclass_transform, overload

_Class = TypeVar("_Class", bound=type)


@overload
def record(cls: _Class, /) -> _Class: ...


@overload
def record(*, slots: bool = False) -> Callable[[_Class], _Class]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: Any = None, /, *, slots: bool = False) -> Any:
    """`@record` or `@record(slots=True)` on a class: `@dataclass(frozen=True[, slots=True])`, cheaper to build."""
    if cls is None:
        return lambda cls: _build(cls, slots)
    return _build(cls, slots)


def _build(cls: type, slots: bool) -> type:
    undocumented = not cls.__doc__
    if undocumented:    # dataclasses would write one from inspect.signature, whose tokenizer costs 12 ms to load
        cls.__doc__ = "-"
    built: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    fields = dataclasses.fields(built)
    if undocumented:
        built.__doc__ = f"{built.__name__}({', '.join(f.name for f in fields)})"
    built.__init__ = _init(built, fields)
    built._record_compared = staticmethod(_getter(f.name for f in fields if f.compare))
    built._record_hashed = staticmethod(_getter(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    built._record_shown = tuple(f.name for f in fields if f.repr)
    built.__repr__ = _repr
    built.__eq__ = _eq
    built.__hash__ = _hash
    built.__setattr__ = _refuse_set
    built.__delattr__ = _refuse_delete
    if slots:       # the default for slots sets each through __setattr__, which refuses
        built.__getstate__ = _getstate
        built.__setstate__ = _setstate
    return built


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """The class's `__init__`, compiled as dataclasses compiles it: each field set past the frozen `__setattr__`.
    The names it uses besides the fields' are dunder names no field takes."""
    names: dict[str, Any] = {"__record_set__": object.__setattr__, "__record_missing__": dataclasses.MISSING}
    params, body = [], []
    for i, f in enumerate(fields):
        if f.default is not dataclasses.MISSING:
            names[f"__record_default{i}__"] = f.default
            params.append(f"{f.name}=__record_default{i}__")
            body.append(f" __record_set__(__record_self__, {f.name!r}, {f.name})")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"__record_factory{i}__"] = f.default_factory
            params.append(f"{f.name}=__record_missing__")
            body.append(f" __record_set__(__record_self__, {f.name!r}, "
                        f"__record_factory{i}__() if {f.name} is __record_missing__ else {f.name})")
        else:
            params.append(f.name)
            body.append(f" __record_set__(__record_self__, {f.name!r}, {f.name})")
    source = f"def __init__({', '.join(['__record_self__', *params])}):\n" + ("\n".join(body) or " pass") + "\n"
    exec(source, names)     # the source is made here from the field names alone
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _getter(names: Any) -> Callable[[Any], tuple[Any, ...]]:
    """The fields `names` of an instance, as a tuple (attrgetter gives a bare value for one name)."""
    names = tuple(names)
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names) if names else lambda obj: ()


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        return self._record_compared(self) == other._record_compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self._record_hashed(self))


def _refuse_set(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state):
        object.__setattr__(self, f.name, value)
