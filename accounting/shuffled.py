"""Shuffled fixed-size batches: a certified LOWER bound on epsilon, never an upper bound.

One epoch of a shuffled loader uses every record exactly once, in a batch at a uniformly
random position.  No tight certified upper bound is known for it, and the Poisson number
people report for such runs is not one (Chua et al. 2024, "How private are DP-SGD
implementations?"; Annamalai et al. 2024).  What is certified is a lower bound: the
construction of :meth:`~dpforge.mechanisms.sampling.Shuffled.lower_bound_pair`

    every other record contributes 0, the differing record contributes +e (a clipped
    gradient of full norm); a test looks at M = max_j X_j over the T = ceil(n/B) noisy
    sums of the epoch:  Q_max(t) = Phi(t)^T  vs  P_max(t) = Phi(t - 1/sigma) Phi(t)^(T-1),

so by data processing delta_run(eps) >= H_{e^eps}(P_max^E || Q_max^E) over E epochs (fresh
permutations, hence a product), and a certified lower bound on that divergence's epsilon
(the prv engine's ``lower``, or the Monte-Carlo engine's high-probability ``lower``) is a
certified lower bound on the shuffled run's epsilon.  Results carry ``sampling =
"shuffled"`` and, in ``accuracy``, the Poisson upper bound at q = B/n with the same
number of steps, so the gap is visible.

Upper bound: under add-remove none is given (``upper = inf``): removing a record shifts
every later record of the permutation, so the batches after it change too.  Under
replace-one the replacing record takes the same position, only its batch differs, and an
epoch is no worse than one release at twice the sensitivity (parallel composition, no
amplification): ``upper`` is then the certified prv bound of E such releases, loose but
certified (``accuracy["upper_from"]`` says so).
"""

from __future__ import annotations

import math
from typing import Any

from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.mechanisms.sampling import Shuffled, ShuffledLowerBoundMechanism, WithRelation, unwrap
from dpforge.validation import require_non_negative, require_probability_open

#: engines that give a certified (prv) or high-probability (montecarlo) lower bound
LOWER_BOUND_ENGINES = ("prv", "montecarlo")

NOTE = (
    "shuffled batches: no tight upper bound is known; lower is certified (max-test construction, Chua et al. 2024), "
    "upper is inf (add-remove) or the no-amplification bound (replace-one), and the Poisson upper bound "
    "(poisson_upper) is NOT an upper bound for this run"
)


def _parts(description: Any) -> list[tuple[Shuffled, int]]:
    """The (epoch, count) parts of a description made only of Shuffled epochs."""
    out: list[tuple[Shuffled, int]] = []

    def visit(node: Any, times: int) -> None:
        if isinstance(node, Shuffled):
            out.append((node, times))
        elif isinstance(node, Composed):
            for part, count in node.parts:
                visit(part, times * count)
        else:
            raise UnsupportedError(
                f"the shuffled lower bound covers compositions of Shuffled epochs only, got a {type(node).__name__} part"
            )

    visit(description, 1)
    return out


def _descriptions(description: Any) -> tuple[Composed, Any, str]:
    """(lower-bound pairs as a description, the Poisson description with the same steps, relation)."""
    inner, relation = unwrap(description)
    parts = _parts(inner)
    lower = Composed([(ShuffledLowerBoundMechanism(epoch, relation), count) for epoch, count in parts])
    poisson: Any = Composed(
        [(PoissonSampled(epoch.mechanism, epoch.sampling_rate), epoch.steps * count) for epoch, count in parts]
    )
    if relation != "add-remove":
        poisson = WithRelation(poisson, relation)
    return lower, poisson, relation


def _no_amplification(description: Any) -> Composed:
    """Replace-one: each epoch as one unsampled release of its mechanism at twice the
    sensitivity (the doubling is flatten's, under the wrapper)."""
    inner, _ = unwrap(description)
    return WithRelation(Composed([(epoch.mechanism, count) for epoch, count in _parts(inner)]), "replace-one")


def _engine(name: str) -> Any:
    if name not in LOWER_BOUND_ENGINES:
        raise UnsupportedError(
            f"engine {name!r} gives no lower bound; a shuffled run is accounted only by a lower bound "
            f"(engine one of {', '.join(LOWER_BOUND_ENGINES)})"
        )
    from dpforge.accounting.api import get_engine

    return get_engine(name)


def _poisson_upper(poisson: Any, delta: float) -> float:
    from dpforge.accounting.api import get_engine

    return float(get_engine("prv").epsilon(poisson, delta).upper)


def epsilon_lower_bound(description: Any, delta: float, *, engine: str = "prv", **options: Any) -> EpsilonResult:
    """Certified lower bound on epsilon(delta) of a run of shuffled epochs
    (``Shuffled`` or ``Composed`` of them, optionally in ``WithRelation``); ``upper`` is
    inf and ``accuracy["poisson_upper"]`` holds the Poisson upper bound for comparison."""
    delta = require_probability_open("delta", delta)
    lower_description, poisson, relation = _descriptions(description)
    result = _engine(engine).epsilon(lower_description, delta, **options)
    lower = float(result.lower)
    if not math.isfinite(lower):  # pragma: no cover - defensive
        raise ParameterError("the shuffled lower bound is not finite")
    upper, upper_from = math.inf, "none known under add-remove (removing a record moves every later batch)"
    if relation == "replace-one":
        from dpforge.accounting.api import get_engine

        upper = float(get_engine("prv").epsilon(_no_amplification(description), delta).upper)
        upper_from = "one release per epoch at twice the sensitivity (parallel composition, no amplification)"
    return EpsilonResult(
        lower=lower,
        upper=upper,
        estimate=lower,
        delta=delta,
        engine=result.engine,
        neighbouring=relation.replace("-", "_"),
        sampling="shuffled",
        accuracy={
            "bound": "lower only",
            "note": NOTE,
            "lower_construction": "max test over each epoch's noisy sums (Chua et al. 2024)",
            "poisson_upper": _poisson_upper(poisson, delta),
            "upper_from": upper_from,
            "engine_accuracy": dict(result.accuracy),
        },
    )


def delta_lower_bound(description: Any, epsilon: float, *, engine: str = "prv", **options: Any) -> DeltaResult:
    """Certified lower bound on delta(epsilon) of a shuffled run; ``upper`` is 1 (no
    upper bound is known)."""
    epsilon = require_non_negative("epsilon", epsilon)
    lower_description, _, relation = _descriptions(description)
    result = _engine(engine).delta(lower_description, epsilon, **options)
    return DeltaResult(
        lower=float(result.lower),
        upper=1.0,
        estimate=float(result.lower),
        epsilon=epsilon,
        engine=result.engine,
        neighbouring=relation.replace("-", "_"),
        sampling="shuffled",
        accuracy={"bound": "lower only", "note": NOTE, "engine_accuracy": dict(result.accuracy)},
    )
