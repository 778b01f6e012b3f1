"""Plain result records: they print well and serialise to JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


def json_ready(value: Any) -> Any:
    """Non-finite floats as strings (recursively) so the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


@dataclass(frozen=True)
class EpsilonResult:
    """epsilon at a given delta: ``upper`` is certified, ``lower`` is certified,
    ``estimate`` is a point between them (not a bound)."""

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

    def to_dict(self) -> dict[str, Any]:
        """All fields plus ``"epsilon"`` (= ``upper``) first; non-finite floats as strings."""
        data = asdict(self)
        data = {"epsilon": self.upper, **data}
        return json_ready(data)

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict())

    def __str__(self) -> str:
        return (
            f"epsilon <= {self.upper:.6g} (lower {self.lower:.6g}, estimate {self.estimate:.6g}) "
            f"at delta = {self.delta:.3g} [{self.engine}, {self.neighbouring}, {self.sampling}]"
        )


@dataclass(frozen=True)
class DeltaResult:
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

    def to_dict(self) -> dict[str, Any]:
        """All fields plus ``"delta"`` (= ``upper``) first; non-finite floats as strings."""
        data = asdict(self)
        data = {"delta": self.upper, **data}
        return json_ready(data)

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict())

    def __str__(self) -> str:
        return (
            f"delta <= {self.upper:.6g} (lower {self.lower:.6g}) at epsilon = {self.epsilon:.6g} "
            f"[{self.engine}, {self.neighbouring}, {self.sampling}]"
        )


@dataclass(frozen=True)
class CalibrationResult:
    """Smallest noise parameter found whose certified upper epsilon is <= the target."""

    parameter: float
    epsilon: float
    target_epsilon: float
    delta: float
    rel_tolerance: float
    evaluations: int
    engine: str
    parameter_name: str = "parameter"
    lower: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        """All fields as a dict; non-finite floats as strings."""
        return json_ready(asdict(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as strict JSON text."""
        return json.dumps(self.to_dict())

    def __str__(self) -> str:
        return (
            f"{self.parameter_name} = {self.parameter:.6g} gives certified epsilon <= {self.epsilon:.6g} "
            f"(target {self.target_epsilon:.6g}) at delta = {self.delta:.3g}"
        )


@dataclass(frozen=True)
class MonteCarloEpsilonResult(EpsilonResult):
    """epsilon at delta from the Monte-Carlo engine: ``upper`` (and, separately,
    ``lower``) hold with probability at least ``confidence`` over the sampling; they are
    high-probability bounds, not deterministic ones."""

    samples: int = 0
    confidence: float = 0.0
    bound: str = "high-probability"

    def __str__(self) -> str:
        return (
            f"epsilon <= {self.upper:.6g} with probability >= {self.confidence:g} (lower {self.lower:.6g}, "
            f"estimate {self.estimate:.6g}) at delta = {self.delta:.3g} "
            f"[{self.engine}, {self.samples} samples, {self.neighbouring}, {self.sampling}]"
        )


@dataclass(frozen=True)
class MonteCarloDeltaResult(DeltaResult):
    """delta at epsilon from the Monte-Carlo engine (high-probability bounds, see
    :class:`MonteCarloEpsilonResult`)."""

    samples: int = 0
    confidence: float = 0.0
    bound: str = "high-probability"

    def __str__(self) -> str:
        return (
            f"delta <= {self.upper:.6g} with probability >= {self.confidence:g} (lower {self.lower:.6g}) "
            f"at epsilon = {self.epsilon:.6g} [{self.engine}, {self.samples} samples, {self.neighbouring}, "
            f"{self.sampling}]"
        )
