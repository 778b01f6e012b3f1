"""The result of an LMO search and its JSON form.

One job: hold what :func:`~dpforge.design.search.lmo_search` found -- the best LMO, its
certified epsilon and the calibrated Gaussian next to it -- and write and read it as
strict JSON.  The ``mechanism`` field is written and read with dpforge's one mechanism
serialisation (:func:`dpforge.mechanisms.serialize.mechanism_to_dict` and
:func:`~dpforge.mechanisms.serialize.mechanism_from_dict`); the layout is that of the
first release, so result files written then still load (and ``dpforge epsilon --lmo``
reads them).  A malformed result is one :class:`~dpforge.errors.InputFileError` line
naming the field.

Sources: JSON (RFC 8259), which has no NaN or Infinity literals, so non-finite floats are
written as the strings "inf", "-inf" and "nan".
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

from dpforge.errors import InputFileError
from dpforge.files import atomic_write_text
from dpforge.mechanisms.lmo import LMO
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.validation import LARGEST_COUNT, require_count, require_probability_open, require_sampling_rate

#: integer fields (counts >= 0) and string fields of a result
_COUNTS = ("steps", "evaluations", "epsilon_evaluations", "seed")
_STRINGS = ("objective", "engine")


def _finite_or_str(value: Any) -> Any:
    """Non-finite floats as the strings 'inf', '-inf', 'nan'; other values unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _float(value: Any) -> float:
    """A float from JSON (non-finite values arrive as the strings 'inf', '-inf', 'nan')."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"expected a number (or \"inf\", \"-inf\", \"nan\"), got {value!r}")
    return float(value)


def _lmo(value: Any) -> LMO:
    """The result's mechanism: an LMO in the one mechanism serialisation."""
    mechanism = mechanism_from_dict(value)
    if not isinstance(mechanism, LMO):
        raise InputFileError(f"mechanism: must be 'lmo', got {value.get('mechanism')!r}")
    return mechanism


@dataclass(frozen=True)
class LMOSearchResult:
    """The best LMO found, its certified epsilon, and the calibrated Gaussian next to it.

    ``epsilon`` is the certified PRV upper bound at the default accuracy (<= the target),
    ``epsilon_lower`` the certified lower bound.  ``gaussian_std`` is sigma * sensitivity
    of the Gaussian calibrated (certified) to the same (epsilon, delta, q, T);
    ``gaussian_abs`` = gaussian_std * sqrt(2/pi).  Ratios below 1 mean less noise than
    the Gaussian.
    """

    mechanism: LMO
    epsilon: float
    epsilon_lower: float
    target_epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    objective: str
    objective_value: float
    std: float
    mean_absolute: float
    gaussian_noise_multiplier: float
    gaussian_epsilon: float
    gaussian_std: float
    gaussian_abs: float
    std_ratio: float
    abs_ratio: float
    components: tuple[str, ...]
    evaluations: int
    epsilon_evaluations: int
    seed: int
    elapsed: float
    stopped_early: bool
    engine: str = "prv"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field; the mechanism as
        :func:`~dpforge.mechanisms.serialize.mechanism_to_dict` writes it and non-finite
        floats as the strings 'inf', '-inf', 'nan'."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["mechanism"] = mechanism_to_dict(self.mechanism)
        data["components"] = list(self.components)
        return {key: _finite_or_str(value) for key, value in data.items()}

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as strict JSON text (no NaN/Infinity literals)."""
        return json.dumps(self.to_dict(), allow_nan=False, indent=indent)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` (indented) to ``path`` atomically (:mod:`dpforge.files`)."""
        atomic_write_text(path, self.to_json(indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: dict) -> "LMOSearchResult":
        """Inverse of :meth:`to_dict`; a missing, unknown or malformed field is a one-line
        :class:`~dpforge.errors.InputFileError` naming it.  Nothing is coerced: counts
        are JSON integers, names strings, ``components`` a list of strings, numbers JSON
        numbers (or the strings "inf", "-inf", "nan" that :meth:`to_dict` writes)."""
        if not isinstance(data, dict):
            raise InputFileError(f"an LMO search result must be a JSON object, got {type(data).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise InputFileError(f"unknown LMO search result field {unknown[0]!r}")
        missing = [n for n, f in names.items() if n not in data and f.default is dataclasses.MISSING]
        if missing:
            raise InputFileError(f"LMO search result is missing the field {missing[0]!r}")
        fields: dict[str, Any] = {}
        for name, value in data.items():
            try:
                if name == "mechanism":
                    fields[name] = _lmo(value)
                elif name == "components":
                    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                        raise ValueError(f"expected a list of component names, got {value!r}")
                    fields[name] = tuple(value)
                elif name in _COUNTS:
                    if isinstance(value, bool) or not isinstance(value, int):
                        raise ValueError(f"expected an integer >= {1 if name == 'steps' else 0}, got {value!r}")
                    # a search takes any seed >= 0 (search._check_inputs): no 2**53 limit for it
                    fields[name] = require_count(name, value, 1 if name == "steps" else 0, None if name == "seed" else LARGEST_COUNT)
                elif name == "delta":
                    fields[name] = require_probability_open(name, _float(value))
                elif name == "sampling_rate":
                    fields[name] = require_sampling_rate(name, _float(value))
                elif name in _STRINGS:
                    if not isinstance(value, str):
                        raise ValueError(f"expected a string, got {value!r}")
                    fields[name] = value
                elif name == "stopped_early":
                    if not isinstance(value, bool):
                        raise ValueError(f"expected true or false, got {value!r}")
                    fields[name] = value
                else:
                    fields[name] = _float(value)
            except (TypeError, ValueError) as error:
                raise InputFileError(f"LMO search result field {name!r}: {error}") from None
        return cls(**fields)

    def __str__(self) -> str:
        return (
            f"LMO {self.objective} = {self.objective_value:.6g} at certified epsilon <= {self.epsilon:.6g} "
            f"(target {self.target_epsilon:.6g}, delta {self.delta:.3g}); std {self.std:.6g} = "
            f"{self.std_ratio:.4g} x Gaussian, E|noise| {self.mean_absolute:.6g} = {self.abs_ratio:.4g} x Gaussian"
        )
