"""The ledger: what a training run actually did, step by step, and what it cost.

Every private step records its mechanism and sampling rate; consecutive equal steps
are merged into one phase, so a ledger of a million identical steps is one entry.  The
ledger accounts itself with any engine (the certified PRV engine by default), and
writes the plan file that ``dpforge verify`` checks in CI.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from dpforge.accounting.api import epsilon as account_epsilon
from dpforge.budget.plan import Phase, Plan, PlanError, write_plan
from dpforge.errors import InputFileError, ParameterError, UnsupportedError
from dpforge.accounting.results import EpsilonResult
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.validation import require_count, require_sampling_rate


@dataclass(frozen=True)
class LedgerEntry:
    """``steps`` consecutive releases of ``mechanism`` on Poisson subsamples of rate ``sampling_rate``."""

    mechanism: Mechanism
    sampling_rate: float
    steps: int

    def description(self) -> Composed:
        """``Composed([(step, steps)])`` with step the mechanism, Poisson-subsampled when
        ``sampling_rate < 1``."""
        step = PoissonSampled(self.mechanism, self.sampling_rate) if self.sampling_rate < 1.0 else self.mechanism
        return Composed([(step, self.steps)])


class Ledger:
    """Append-only record of private steps (not thread-safe; one per training process)."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []

    def record(self, mechanism: Mechanism, sampling_rate: float = 1.0, steps: int = 1) -> None:
        """Record ``steps`` releases of ``mechanism`` at ``sampling_rate`` (merged with the
        previous entry when both are equal)."""
        if not isinstance(mechanism, Mechanism):
            raise ParameterError(f"mechanism must be a dpforge mechanism, got {type(mechanism).__name__}")
        mechanism_to_dict(mechanism)  # refuses what the ledger cannot serialise
        rate = require_sampling_rate("sampling_rate", sampling_rate)
        count = require_count("steps", steps)
        if self._entries and self._entries[-1].mechanism == mechanism and self._entries[-1].sampling_rate == rate:
            last = self._entries[-1]
            self._entries[-1] = LedgerEntry(mechanism, rate, last.steps + count)
        else:
            self._entries.append(LedgerEntry(mechanism, rate, count))

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """The recorded phases in order (consecutive equal steps merged)."""
        return tuple(self._entries)

    @property
    def steps(self) -> int:
        """Total number of recorded releases over all entries."""
        return sum(entry.steps for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def description(self) -> Composed:
        """The whole run as one :class:`Composed` description; ValueError when empty."""
        if not self._entries:
            raise ParameterError("the ledger is empty: record at least one step before accounting")
        return Composed([part for entry in self._entries for part in entry.description().parts])

    def epsilon(self, delta: float, engine: str = "prv", **options: Any) -> EpsilonResult:
        """Bounds on the run's epsilon at ``delta`` (certified with the default PRV engine)."""
        return account_epsilon(self.description(), delta, engine=engine, **options)

    def to_plan(self, path: str | os.PathLike[str] | None, delta: float, budget_epsilon: float | None = None) -> Plan:
        """The plan ``dpforge verify`` checks; written as TOML to ``path`` unless it is None.

        Plan files hold Gaussian, scalar Laplace, pure-DP and LMO phases; a vector release
        is refused with the reason (the JSON form of the ledger keeps it).
        """
        phases = []
        for index, entry in enumerate(self._entries):
            try:
                phases.append(Phase.from_mechanism(entry.mechanism, entry.sampling_rate, entry.steps))
            except PlanError as error:
                raise UnsupportedError(
                    f"entries[{index}]: {error.problem}; save the ledger with to_json and account it with Ledger.epsilon"
                ) from None
        if not phases:
            raise ParameterError("the ledger is empty: record at least one step before writing a plan")
        plan = Plan(delta=delta, phases=tuple(phases), budget_epsilon=budget_epsilon)
        if path is not None:
            write_plan(plan, path)
        return plan

    def to_dict(self) -> dict[str, Any]:
        """``{"entries": [{"mechanism": {...}, "sampling_rate": q, "steps": n}, ...]}``."""
        return {
            "entries": [
                {"mechanism": mechanism_to_dict(e.mechanism), "sampling_rate": e.sampling_rate, "steps": e.steps}
                for e in self._entries
            ]
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        """Inverse of :meth:`to_dict` (entries re-recorded, so equal neighbours merge);
        malformed entries are a one-line ValueError naming the entry."""
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise InputFileError("a ledger must be an object with an 'entries' list")
        ledger = cls()
        for index, item in enumerate(data["entries"]):
            try:
                ledger.record(mechanism_from_dict(item["mechanism"]), item["sampling_rate"], item["steps"])
            except (KeyError, TypeError):
                raise InputFileError(f"entries[{index}] needs 'mechanism', 'sampling_rate' and 'steps'") from None
            except ValueError as error:
                raise InputFileError(f"entries[{index}]: {error}") from None
        return ledger
