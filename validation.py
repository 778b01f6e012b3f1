"""Argument checks shared by every part of dpforge.

Each check raises :class:`dpforge.errors.ParameterError` (a ``ValueError``) with one line that names the parameter, the allowed
range and the value received; nothing is clamped.
"""

from __future__ import annotations

import math
import numbers

from dpforge.errors import ParameterError


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_real(name: str, value: object) -> float:
    """Return ``value`` as a finite float or raise naming ``name``."""
    if not _is_real(value):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    result = float(value)  # type: ignore[arg-type]
    if not math.isfinite(result):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    return result


def require_positive(name: str, value: object) -> float:
    """A finite number > 0."""
    result = require_real(name, value)
    if result <= 0.0:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return result


def require_non_negative(name: str, value: object) -> float:
    """A finite number >= 0."""
    result = require_real(name, value)
    if result < 0.0:
        raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}")
    return result


def require_probability_open(name: str, value: object) -> float:
    """A number in the open interval (0, 1) (used for delta)."""
    result = require_real(name, value)
    if not 0.0 < result < 1.0:
        raise ParameterError(f"{name} must be in (0, 1), got {value!r}")
    return result


def require_sampling_rate(name: str, value: object) -> float:
    """A number in (0, 1]."""
    result = require_real(name, value)
    if not 0.0 < result <= 1.0:
        raise ParameterError(f"{name} must be in (0, 1], got {value!r}")
    return result


def require_count(name: str, value: object, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (integral floats such as 10.0 are accepted)."""
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif _is_real(value) and math.isfinite(float(value)) and float(value).is_integer():  # type: ignore[arg-type]
        result = int(float(value))  # type: ignore[arg-type]
    else:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if result < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return result
