"""Verification of a plan against its budget: cumulative certified bounds, phase by phase."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from dpforge.accounting.prv.prefixes import epsilon_of_all, epsilon_prefixes
from dpforge.accounting.results import SCHEMA_VERSION, EpsilonResult, accuracy_record, dpforge_version, json_ready
from dpforge.budget.plan import Plan
from dpforge.errors import DpforgeAccuracyWarning, ParameterError, warn_caller
from dpforge.mechanisms.sampling import lower_bound_description, result_labels
from dpforge.validation import shown

@dataclass(frozen=True)
class PhaseCheck:
    """Cumulative certified bounds on epsilon after the phases up to and including ``index``."""

    index: int
    label: str
    steps: int
    epsilon_upper: float
    epsilon_lower: float
    #: whether this row's certified bracket is as narrow as the relative accuracy asked
    #: (rows before the last are read off the whole plan's grid, and can be wider)
    reached: bool = True

    def to_dict(self) -> dict[str, Any]:
        """``{"phase", "index", "steps", "epsilon_upper", "epsilon_lower", "reached"}`` for
        JSON output."""
        return json_ready(
            {
                "phase": self.label,
                "index": self.index,
                "steps": self.steps,
                "epsilon_upper": self.epsilon_upper,
                "epsilon_lower": self.epsilon_lower,
                "reached": self.reached,
            }
        )


@dataclass(frozen=True)
class VerifyReport:
    """Result of :func:`verify_plan`.

    ``epsilon_upper`` is the certified upper bound on the whole plan's epsilon at
    ``delta``; ``within_budget`` is ``epsilon_upper <= budget_epsilon`` (None without a
    budget).
    """

    delta: float
    budget_epsilon: float | None
    phases: tuple[PhaseCheck, ...]
    epsilon_upper: float
    epsilon_lower: float
    within_budget: bool | None
    engine: str = "prv"
    accuracy: dict[str, Any] = field(default_factory=dict)
    #: the plan's neighbouring relation and sampling schemes, as the result schema spells them
    relation: str = "add-remove"
    sampling: str = "poisson"
    #: which cumulative rows ``phases`` holds (:data:`ROWS`): after every phase, or the last
    rows: str = "every"

    @property
    def epsilon(self) -> float:
        """The certified upper bound (what the budget is checked against)."""
        return self.epsilon_upper

    def accuracy_summary(self) -> dict[str, Any]:
        """The schema's ``accuracy`` (:func:`~dpforge.accounting.results.accuracy_record`)
        of the whole plan's bracket: ``reached`` is false when it is wider than the
        relative accuracy asked."""
        return accuracy_record(self.accuracy, self.accuracy.get("relative_accuracy"), self.epsilon_lower, self.epsilon_upper)

    def to_dict(self) -> dict[str, Any]:
        """The one result schema (:mod:`dpforge.accounting.results`) plus ``budget_epsilon``,
        ``within_budget`` and ``phases`` (the per-phase :meth:`PhaseCheck.to_dict` rows)."""
        return json_ready(
            {
                "schema_version": SCHEMA_VERSION,
                "dpforge_version": dpforge_version(),
                "engine": self.engine,
                "relation": self.relation,
                "sampling": self.sampling,
                "mechanism": None,
                "delta": self.delta,
                "epsilon_upper": self.epsilon_upper,
                "epsilon_lower": self.epsilon_lower,
                "accuracy": self.accuracy_summary(),
                "budget_epsilon": self.budget_epsilon,
                "within_budget": self.within_budget,
                "rows": self.rows,
                "phases": [check.to_dict() for check in self.phases],
            }
        )


#: the cumulative rows :func:`verify_plan` can report: after every phase, or only after the last
ROWS = ("every", "last")


def verify_plan(plan: Plan, *, relative_accuracy: float = 1e-3, rows: str = "every") -> VerifyReport:
    """Account the plan phase by phase and check it against its budget.

    Row k holds certified bounds on epsilon(delta) of the composition of phases 0..k, read
    off one prefix-product composition (:func:`dpforge.accounting.prv.prefixes.epsilon_prefixes`:
    the whole plan is refined once, so K phases cost about one composition, not K); the
    last row is ``epsilon(plan.description(), plan.delta)``, and it decides the budget.
    Composition only adds privacy loss, so a longer prefix's certified upper bound is also
    one for every shorter prefix, and a shorter prefix's lower bound is also one for every
    longer prefix: each row reports the smallest upper bound of itself and the rows after
    it and the largest lower bound of itself and the rows before it, so the columns never
    decrease and stay certified.  A row that is still wider than ``relative_accuracy``
    is marked (:attr:`PhaseCheck.reached` False) and one warning counts such rows.

    ``rows="last"`` reports the last row only, the whole plan's epsilon
    (:func:`dpforge.accounting.prv.prefixes.epsilon_of_all`): the same budget verdict and
    the same certified upper bound without the table, whose prefixes cost most of a long
    plan's time (10,000 phases of 10 steps: about 100 s of 615 s go to the whole plan).
    Its lower bound can be below the table's, which also takes the earlier rows' lower
    bounds.
    """
    if not isinstance(plan, Plan):
        raise ParameterError(f"plan must be a Plan (parse_plan or load_plan reads one), got {type(plan).__name__}")
    if rows not in ROWS:
        raise ParameterError(f"rows must be one of {', '.join(map(repr, ROWS))}, got {shown(rows)}")
    account = epsilon_prefixes if rows == "every" else _whole_plan
    reported = list(enumerate(plan.phases)) if rows == "every" else [(len(plan.phases) - 1, plan.phases[-1])]
    checks: list[PhaseCheck] = []
    upper = lower = 0.0
    descriptions = [phase.description() for phase in plan.phases]
    results = account(descriptions, plan.delta, relative_accuracy=relative_accuracy)
    lowers = [result.lower for result in results]
    realised = [lower_bound_description(description) for description in descriptions]
    if any(part is not None for part in realised):
        # fixed-size batches (and Poisson replace-one for non-Gaussians) are accounted with a
        # certified pair no dataset realises: their lower bounds come from pairs that are
        # (dpforge.mechanisms.sampling.lower_bound_description)
        parts = [part if part is not None else description for part, description in zip(realised, descriptions)]
        again = account(parts, plan.delta, relative_accuracy=relative_accuracy)
        lowers = [min(lower, result.lower) for lower, result in zip(lowers, again)]
    # composition only adds privacy loss: a later prefix's certified upper bound is also one
    # for every earlier prefix (suffix minimum), and an earlier prefix's lower bound is one
    # for every later prefix (running maximum)
    uppers = [result.upper for result in results]
    for index in range(len(uppers) - 2, -1, -1):
        uppers[index] = min(uppers[index], uppers[index + 1])
    pair_lower = 0.0  # the certified pairs' own lower bounds: a realised pair's gap is structural
    for row, ((index, phase), result) in enumerate(zip(reported, results)):
        upper, lower = uppers[row], max(lower, lowers[row])
        pair_lower = max(pair_lower, result.lower)
        reached = upper <= 0 or (math.isfinite(upper) and upper - max(pair_lower, lower) <= relative_accuracy * upper)
        checks.append(PhaseCheck(index, phase.label(index), phase.steps, upper, lower, reached))
    _warn_wide_rows(checks, relative_accuracy)
    within = None if plan.budget_epsilon is None else upper <= plan.budget_epsilon
    labels = result_labels(plan.description())
    return VerifyReport(
        delta=plan.delta,
        budget_epsilon=plan.budget_epsilon,
        phases=tuple(checks),
        epsilon_upper=upper,
        epsilon_lower=lower,
        within_budget=within,
        engine=result.engine,
        accuracy=_accuracy(relative_accuracy, upper, max(result.lower for result in results), lower),
        relation=labels["neighbouring"].replace("_", "-"),
        sampling=labels["sampling"],
        rows=rows,
    )


def _whole_plan(parts: Sequence[Any], delta: float, **options: Any) -> list[EpsilonResult]:
    """The last row of :func:`epsilon_prefixes` alone (``rows="last"``)."""
    return [epsilon_of_all(parts, delta, **options)]


def wide_rows(checks: Sequence[PhaseCheck]) -> tuple[int, PhaseCheck | None]:
    """(how many rows miss the accuracy asked, the widest of them relative to its upper
    bound, or None)."""
    missing = [check for check in checks if not check.reached]
    return len(missing), max(missing, key=row_width, default=None)


def row_width(check: PhaseCheck) -> float:
    """A row's certified bracket relative to its upper bound (inf for an infinite upper)."""
    if not math.isfinite(check.epsilon_upper):
        return math.inf
    return (check.epsilon_upper - check.epsilon_lower) / check.epsilon_upper if check.epsilon_upper > 0 else 0.0


def _warn_wide_rows(checks: Sequence[PhaseCheck], relative_accuracy: float) -> None:
    """Say so when cumulative rows are wider than asked (never silently): each row is
    marked, and one warning counts them."""
    count, widest = wide_rows(checks)
    if widest is None:
        return
    warn_caller(
        f"{count} of {len(checks)} cumulative rows are wider than the relative accuracy {relative_accuracy:g} "
        f"asked (widest {row_width(widest):.3g}, after {widest.label}); each is certified, the earlier ones read off the "
        "whole plan's grid, and the last row decides the budget",
        DpforgeAccuracyWarning,
    )


def _accuracy(relative_accuracy: float, upper: float, pair_lower: float, lower: float) -> dict[str, Any]:
    """The report's accuracy record; where the lower bound came from realised pairs, the
    achieved width is the certified pair's own bracket (the gap to the realised lower bound
    is structural, not a numerical shortfall) and the record says so."""
    if lower >= pair_lower:
        return {"relative_accuracy": relative_accuracy}
    achieved = (upper - pair_lower) / upper if upper > 0 else 0.0
    return {
        "relative_accuracy": relative_accuracy,
        "achieved": max(achieved, 0.0),
        "reached": achieved <= relative_accuracy,
        "pair_lower": pair_lower,
        "lower_from": "pairs realised by neighbouring datasets (mechanisms.sampling.lower_bound_description)",
    }
