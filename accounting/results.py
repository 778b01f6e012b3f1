"""Plain result records: they print well and serialise to one JSON schema.

Every result's :meth:`to_dict` (and every ``dpforge ... --json`` object, which adds the
command and the mechanism) uses the same names for the same things (README, "JSON
output"; checked by :func:`dpforge.cli.schema.validate`):

* ``schema_version`` (:data:`SCHEMA_VERSION`), ``dpforge_version``;
* ``engine``, ``relation`` (``"add-remove"``), ``sampling`` (``"poisson"``);
* ``mechanism``: the accounted description (``null`` in a bare result, which does not
  keep it; the command line fills it in);
* ``delta``, ``epsilon_upper``, ``epsilon_lower``: the mechanism is certified
  (``epsilon_upper``, ``delta``)-DP, and no better than (``epsilon_lower``, ``delta``)
  (``null`` where an engine gives no lower bound).  For a delta query ``delta`` is the
  certified upper bound at the given epsilon, which is ``epsilon_upper``;
* ``accuracy``: ``requested`` (the relative width (upper - lower)/upper asked for, or
  ``null`` when the engine takes no such request), ``achieved`` (the width reached),
  ``reached`` (whether it is within the request; ``null`` without a request), and the
  engine's own record of how the bounds were obtained.

``estimate`` is not part of the schema: the PRV engine's midpoint and the RDP/pure
engines' copy of the upper bound carry no information.  Only the Monte-Carlo engine has
a point estimate of its own (the importance-sampling mean), written as
``epsilon_estimate`` (or ``delta_estimate``) next to its ``samples`` and ``confidence``.
No NaN is ever written: absent values are ``null``, infinite ones the strings
``"inf"``/``"-inf"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

#: the version of the JSON layout above; raised when a name changes meaning or is removed
SCHEMA_VERSION = 1


def json_ready(value: Any) -> Any:
    """Strict-JSON form (recursively): NaN as ``None`` (``null``), infinities as the
    strings ``"inf"``/``"-inf"``, tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def dpforge_version() -> str:
    """The installed dpforge version (the package's ``__version__``)."""
    from dpforge import __version__

    return __version__


def relative_width(lower: float | None, upper: float | None) -> float | None:
    """(upper - lower)/upper of a certified bracket; 0 for a zero upper bound; ``None``
    when a bound is missing or not finite."""
    if lower is None or upper is None or not (math.isfinite(lower) and math.isfinite(upper)):
        return None
    if upper <= 0:
        return 0.0
    return max(0.0, (upper - lower) / upper)


def accuracy_record(accuracy: dict[str, Any], requested: float | None, lower: float | None, upper: float | None) -> dict[str, Any]:
    """The schema's ``accuracy``: the engine's record with ``requested``, ``achieved``
    and ``reached`` set (an engine's own ``achieved``/``reached`` win: the PRV engine
    counts a negligible delta as reached)."""
    achieved = accuracy.get("achieved", relative_width(lower, upper))
    reached = accuracy.get("reached")
    if reached is None and requested is not None and achieved is not None:
        reached = achieved <= requested
    rest = {key: value for key, value in accuracy.items() if key not in ("requested", "achieved", "reached")}
    return {"requested": requested, "achieved": achieved, "reached": reached, **rest}


def _envelope(engine: str, neighbouring: str, sampling: str | None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "dpforge_version": dpforge_version(),
        "engine": engine,
        "relation": neighbouring.replace("_", "-"),
        "sampling": sampling,
        "mechanism": None,
    }


class _Labelled:
    """What the epsilon and delta results share: the relation as the schema spells it and
    the accuracy asked (both read from the result's own fields)."""

    neighbouring: str
    accuracy: dict

    @property
    def relation(self) -> str:
        """The neighbouring relation as the schema writes it (``"add-remove"``)."""
        return self.neighbouring.replace("_", "-")

    @property
    def requested_accuracy(self) -> float | None:
        """The relative width asked of the engine (``None`` if it takes no such request)."""
        return self.accuracy.get("relative_accuracy")


@dataclass(frozen=True)
class EpsilonResult(_Labelled):
    """epsilon at a given delta: ``upper`` is certified, ``lower`` is certified,
    ``estimate`` is a point between them (not a bound; written to JSON only by the
    Monte-Carlo engine, whose estimate is its own, see the module docstring)."""

    lower: float
    upper: float
    estimate: float
    delta: float
    engine: str
    neighbouring: str = "add_remove"
    sampling: str = "poisson"
    accuracy: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float:
        """The certified upper bound (what a budget is checked against)."""
        return self.upper

    def accuracy_summary(self) -> dict[str, Any]:
        """The schema's ``accuracy`` object (:func:`accuracy_record`)."""
        return accuracy_record(self.accuracy, self.requested_accuracy, self.lower, self.upper)

    def to_dict(self) -> dict[str, Any]:
        """The one result schema (module docstring); strict JSON values."""
        data = {
            **_envelope(self.engine, self.neighbouring, self.sampling),
            "delta": self.delta,
            "epsilon_upper": self.upper,
            "epsilon_lower": self.lower,
            "accuracy": self.accuracy_summary(),
        }
        return json_ready(data)

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), allow_nan=False)

    def __str__(self) -> str:
        return (
            f"epsilon <= {self.upper:.6g} (certified lower {self.lower:.6g}) "
            f"at delta = {self.delta:.3g} [{self.engine}, {self.relation}, {self.sampling}]"
        )


@dataclass(frozen=True)
class DeltaResult(_Labelled):
    """delta at a given epsilon, bracketed by certified ``lower`` and ``upper``."""

    lower: float
    upper: float
    estimate: float
    epsilon: float
    engine: str
    neighbouring: str = "add_remove"
    sampling: str = "poisson"
    accuracy: dict[str, Any] = field(default_factory=dict)

    @property
    def delta(self) -> float:
        """The certified upper bound on delta (what a budget is checked against)."""
        return self.upper

    def accuracy_summary(self) -> dict[str, Any]:
        """The schema's ``accuracy`` object (:func:`accuracy_record`), of the delta bracket."""
        return accuracy_record(self.accuracy, self.requested_accuracy, self.lower, self.upper)

    def to_dict(self) -> dict[str, Any]:
        """The one result schema: ``delta`` is the certified upper bound at
        ``epsilon_upper`` = the given epsilon (``epsilon_lower`` is ``null``: not asked);
        ``delta_lower`` brackets it from below."""
        data = {
            **_envelope(self.engine, self.neighbouring, self.sampling),
            "delta": self.upper,
            "epsilon_upper": self.epsilon,
            "epsilon_lower": None,
            "delta_lower": self.lower,
            "accuracy": self.accuracy_summary(),
        }
        return json_ready(data)

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), allow_nan=False)

    def __str__(self) -> str:
        return (
            f"delta <= {self.upper:.6g} (certified lower {self.lower:.6g}) at epsilon = {self.epsilon:.6g} "
            f"[{self.engine}, {self.relation}, {self.sampling}]"
        )


@dataclass(frozen=True)
class CalibrationResult:
    """Smallest noise parameter found whose certified upper epsilon is <= the target.

    ``lower`` is the engine's certified lower bound on epsilon at the answer, ``None``
    where the engine gave none (a NaN passed in is stored as ``None``)."""

    parameter: float
    epsilon: float
    target_epsilon: float
    delta: float
    rel_tolerance: float
    evaluations: int
    engine: str
    parameter_name: str = "parameter"
    lower: float | None = None

    def __post_init__(self) -> None:
        if self.lower is not None and math.isnan(self.lower):
            object.__setattr__(self, "lower", None)

    def accuracy_summary(self) -> dict[str, Any]:
        """The schema's ``accuracy``: ``requested`` is the relative tolerance, ``achieved``
        the relative width of the certified epsilon bracket at the answer (``None``
        without a lower bound)."""
        requested = self.rel_tolerance if self.rel_tolerance > 0 else None
        return accuracy_record({"rel_tolerance": self.rel_tolerance}, requested, self.lower, self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        """The one result schema plus ``target_epsilon``, ``parameter_name``,
        ``parameter_value`` and ``evaluations``."""
        data = {
            **_envelope(self.engine, "add_remove", "poisson"),
            "delta": self.delta,
            "epsilon_upper": self.epsilon,
            "epsilon_lower": self.lower,
            "accuracy": self.accuracy_summary(),
            "target_epsilon": self.target_epsilon,
            "parameter_name": self.parameter_name,
            "parameter_value": self.parameter,
            "evaluations": self.evaluations,
        }
        return json_ready(data)

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict(), allow_nan=False)

    def __str__(self) -> str:
        return (
            f"{self.parameter_name} = {self.parameter:.6g} gives certified epsilon <= {self.epsilon:.6g} "
            f"(target {self.target_epsilon:.6g}) at delta = {self.delta:.3g}"
        )


@dataclass(frozen=True)
class MonteCarloEpsilonResult(EpsilonResult):
    """epsilon at delta from the Monte-Carlo engine: ``upper`` (and, separately,
    ``lower``) hold with probability at least ``confidence`` over the sampling; they are
    high-probability bounds, not deterministic ones.  ``estimate`` is the sampled point
    estimate (written as ``epsilon_estimate``)."""

    samples: int = 0
    confidence: float = 0.0
    bound: str = "high-probability"

    def to_dict(self) -> dict[str, Any]:
        """The one result schema plus ``epsilon_estimate``, ``samples``, ``confidence``,
        ``bound`` and ``seed``."""
        return {
            **super().to_dict(),
            **json_ready({"epsilon_estimate": self.estimate, "samples": self.samples, "confidence": self.confidence}),
            "bound": self.bound,
            "seed": self.accuracy.get("seed"),
        }

    def __str__(self) -> str:
        return (
            f"epsilon <= {self.upper:.6g} with probability >= {self.confidence:g} (lower {self.lower:.6g}, "
            f"estimate {self.estimate:.6g}) at delta = {self.delta:.3g} "
            f"[{self.engine}, {self.samples} samples, seed {self.accuracy.get('seed')}, {self.relation}, {self.sampling}]"
        )


@dataclass(frozen=True)
class MonteCarloDeltaResult(DeltaResult):
    """delta at epsilon from the Monte-Carlo engine (high-probability bounds, see
    :class:`MonteCarloEpsilonResult`); ``estimate`` is written as ``delta_estimate``."""

    samples: int = 0
    confidence: float = 0.0
    bound: str = "high-probability"

    def to_dict(self) -> dict[str, Any]:
        """The one result schema plus ``delta_estimate``, ``samples``, ``confidence``,
        ``bound`` and ``seed``."""
        return {
            **super().to_dict(),
            **json_ready({"delta_estimate": self.estimate, "samples": self.samples, "confidence": self.confidence}),
            "bound": self.bound,
            "seed": self.accuracy.get("seed"),
        }

    def __str__(self) -> str:
        return (
            f"delta <= {self.upper:.6g} with probability >= {self.confidence:g} (lower {self.lower:.6g}) "
            f"at epsilon = {self.epsilon:.6g} [{self.engine}, {self.samples} samples, seed {self.accuracy.get('seed')}, "
            f"{self.relation}, {self.sampling}]"
        )
