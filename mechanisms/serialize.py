"""One serialisation of every mechanism: ``{"mechanism": kind, field: value, ...}``.

The ledger, plan files (where the kind is written ``noise = "..."``), ``--lmo`` files and
LMO search results all read and write mechanisms through :func:`mechanism_to_dict` and
:func:`mechanism_from_dict`.  Reading is strict: the kind must be known, every field must
be one of the mechanism's own, required fields must be present, and each value must be a
number (not a boolean or a string), an integer or a string as the field asks; a problem is
one :class:`~dpforge.errors.InputFileError` line naming the field.  Ranges are then checked
by the mechanism's own constructor.  The LMO form is the one its earlier ``to_dict``
wrote, so files written by dpforge 0.1 still load.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Mapping

from dpforge.errors import DpforgeError, InputFileError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.mechanisms.lmo import LMO

#: kind name -> mechanism class
KINDS: dict[str, type[Mechanism]] = {"gaussian": Gaussian, "laplace": Laplace, "pure": PureDP, "lmo": LMO}
#: fields whose value is an integer, a string, or a list of numbers (all others are numbers)
_INTEGER_FIELDS = {"dimension"}
_STRING_FIELDS = {"norm"}
_LIST_FIELDS = {"weights"}
#: fields a file must state although the class has a default for them
_ALWAYS_REQUIRED = {"lmo": ("weights",)}


def kind_of(mechanism: Mechanism) -> str:
    """The kind name under which ``mechanism`` is written."""
    for name, cls in KINDS.items():
        if type(mechanism) is cls:
            return name
    raise InputFileError(f"a {type(mechanism).__name__} cannot be written: dpforge writes {', '.join(KINDS)}")


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init]


def _required(cls: type) -> list[str]:
    kind = next(name for name, known in KINDS.items() if known is cls)
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and (f.name in _ALWAYS_REQUIRED.get(kind, ()) or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING))
    ]


def mechanism_to_dict(mechanism: Mechanism) -> dict[str, Any]:
    """``{"mechanism": kind, **fields}`` with every constructor field, JSON-ready."""
    data: dict[str, Any] = {"mechanism": kind_of(mechanism)}
    for name in _field_names(type(mechanism)):
        value = getattr(mechanism, name)
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f'"{value}"'


def _check_value(name: str, value: Any) -> Any:
    def number(item: Any) -> bool:
        return isinstance(item, numbers.Real) and not isinstance(item, bool) and math.isfinite(float(item))

    if name in _STRING_FIELDS:
        if not isinstance(value, str):
            raise InputFileError(f"{name}: must be a string, got {_show(value)}")
        return value
    if name in _INTEGER_FIELDS:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InputFileError(f"{name}: must be an integer, got {_show(value)}")
        return int(value)
    if name in _LIST_FIELDS:
        if not isinstance(value, (list, tuple)) or not all(number(item) for item in value):
            raise InputFileError(f"{name}: must be a list of finite numbers, got {_show(value)}")
        return tuple(float(item) for item in value)
    if not number(value):
        raise InputFileError(f"{name}: must be a finite number, got {_show(value)}")
    return float(value)


def mechanism_from_dict(data: Mapping[str, Any], *, kind_key: str = "mechanism") -> Mechanism:
    """The mechanism a :func:`mechanism_to_dict` dict (or a plan phase, ``kind_key="noise"``)
    describes; every problem is a one-line :class:`~dpforge.errors.InputFileError`."""
    if not isinstance(data, Mapping):
        raise InputFileError(f"a mechanism must be an object with a {kind_key!r} kind, got {_show(data)}")
    fields = dict(data)
    kind = fields.pop(kind_key, None)
    if kind is None:
        raise InputFileError(f"{kind_key}: missing (one of {', '.join(KINDS)})")
    if kind not in KINDS:
        raise InputFileError(f"{kind_key}: must be one of {', '.join(KINDS)}, got {_show(kind)}")
    cls = KINDS[kind]
    allowed = _field_names(cls)
    for name in fields:
        if name not in allowed:
            raise InputFileError(f"{name}: not a field of a {kind} mechanism (allowed: {', '.join(allowed)})")
    for name in _required(cls):
        if name not in fields:
            raise InputFileError(f"{name}: missing (a {kind} mechanism needs {', '.join(_required(cls))})")
    values = {name: _check_value(name, value) for name, value in fields.items()}
    try:
        return cls(**values)
    except DpforgeError as error:
        raise InputFileError(str(error)) from None
    except (TypeError, ValueError) as error:
        raise InputFileError(f"not a valid {kind} mechanism: {error}") from None
