"""``epsilon`` and ``delta`` over mechanism descriptions, dispatched to a registered engine.

An engine is any module (or object) with

* ``epsilon(description, delta, **options) -> EpsilonResult`` and
* ``delta(description, epsilon, **options) -> DeltaResult``

that refuses, with a one-line :class:`~dpforge.errors.DpforgeError`, an option it does
not know or a description it cannot account soundly.  The four built-in engines are
registered by module name and imported on first use, so choosing one engine never pays
for loading another.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Protocol

from dpforge import _deprecated
from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.errors import ParameterError
from dpforge.mechanisms.combinators import Description
from dpforge.mechanisms.sampling import lower_bound_description, result_labels, schemes_of
from dpforge.validation import require_non_negative, require_probability_open


class Engine(Protocol):
    """What an accounting engine provides (see the module docstring)."""

    def epsilon(self, description: Description, delta: float, **options: Any) -> EpsilonResult:
        """Bounds on epsilon at ``delta`` (refusing unknown options and unsupported descriptions)."""
        ...

    def delta(self, description: Description, epsilon: float, **options: Any) -> DeltaResult:
        """Bounds on delta at ``epsilon`` (refusing unknown options and unsupported descriptions)."""
        ...


#: engine name -> the module implementing it (or an engine object registered directly)
_REGISTRY: dict[str, Any] = {
    "prv": "dpforge.accounting.prv.engine",
    "rdp": "dpforge.accounting.rdp.engine",
    "montecarlo": "dpforge.accounting.montecarlo.engine",
    "pure": "dpforge.accounting.pure",
}

#: the engine used when none is named: certified lower and upper bounds
DEFAULT_ENGINE = "prv"


def register_engine(name: str, engine: Any) -> None:
    """Make ``engine`` (a module name to import lazily, or an object with ``epsilon`` and
    ``delta``) available as ``engine=name``.  Re-registering a name replaces it."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ParameterError(f"engine name must be an identifier, got {name!r}")
    if not isinstance(engine, str) and not (callable(getattr(engine, "epsilon", None)) and callable(getattr(engine, "delta", None))):
        raise ParameterError("engine must be a module name or an object with epsilon() and delta()")
    _REGISTRY[name] = engine


def engine_names() -> tuple[str, ...]:
    """The registered engine names, the default first."""
    return (DEFAULT_ENGINE, *sorted(name for name in _REGISTRY if name != DEFAULT_ENGINE))


def get_engine(name: str) -> Engine:
    """The engine registered as ``name`` (imported on first use)."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ParameterError(f"engine must be one of {', '.join(engine_names())}, got {name!r}")
    engine = _REGISTRY[name]
    if isinstance(engine, str):
        engine = importlib.import_module(engine)
        _REGISTRY[name] = engine
    return engine


#: the built-in engine names (kept for code written against the first release)
ENGINES = tuple(_REGISTRY)


def epsilon(description: Description, delta: float, *, engine: str = DEFAULT_ENGINE, **options: Any) -> EpsilonResult:
    """Bounds on epsilon(delta) of a composed, possibly subsampled, description.

    ``engine`` selects the accountant: "prv" (default; certified lower and upper, refined
    until (upper - lower)/upper <= ``relative_accuracy``, options ``relative_accuracy``,
    ``step``, ``max_refinements``, ``memory_budget``, ``closed_form``: False composes on
    grids even where a closed form answers), "rdp" (certified upper; ``orders``, ``lmo_bound``),
    "montecarlo" (a high-probability bracket; ``samples``, ``confidence``, ``seed``, ...)
    or "pure" (basic composition of pure-DP steps).  The relation is the description's
    (add-or-remove unless wrapped in ``WithRelation``) and the sampling its combinators'
    (Poisson, ``SampledWithoutReplacement``); both are written into the result.  A
    description with ``Shuffled`` epochs gets only a certified lower bound
    (:func:`dpforge.accounting.shuffled.epsilon_lower_bound`, ``upper = inf``).  Where a
    step's certified pair is not realised by actual datasets (fixed-size batches; Poisson
    replace-one for a non-Gaussian), ``lower`` comes from the realised pairs of
    :func:`~dpforge.mechanisms.sampling.lower_bound_description`, so it stays a lower
    bound on the run's epsilon.
    ``options`` go to the engine, which refuses any it does not know.
    """
    delta = require_probability_open("delta", delta)
    if "shuffled" in schemes_of(description):
        from dpforge.accounting.shuffled import epsilon_lower_bound

        return epsilon_lower_bound(description, delta, engine=engine, **options)
    result = get_engine(engine).epsilon(description, delta, **options)
    realised = lower_bound_description(description)
    if realised is not None and result.lower > 0:
        result = _realised_lower(result, get_engine(engine).epsilon(realised, delta, **options).lower)
    return _labelled(result, description)


def delta(description: Description, epsilon: float, *, engine: str = DEFAULT_ENGINE, **options: Any) -> DeltaResult:
    """Bounds on delta(epsilon); ``engine`` and ``options`` as for :func:`epsilon`."""
    epsilon = require_non_negative("epsilon", epsilon)
    if "shuffled" in schemes_of(description):
        from dpforge.accounting.shuffled import delta_lower_bound

        return delta_lower_bound(description, epsilon, engine=engine, **options)
    result = get_engine(engine).delta(description, epsilon, **options)
    realised = lower_bound_description(description)
    if realised is not None and result.lower > 0:
        result = _realised_lower(result, get_engine(engine).delta(realised, epsilon, **options).lower)
    return _labelled(result, description)


def _realised_lower(result: Any, realised_lower: float) -> Any:
    """``result`` with ``lower`` taken from the realised pairs (see :func:`epsilon`).  The
    accuracy record keeps the engine's numerical accuracy (``achieved``/``reached`` refer
    to the certified pair's own bracket, whose lower end is ``pair_lower``) and says why
    the reported bracket is wider: a finer grid does not close that gap."""
    lower = min(float(result.lower), float(realised_lower))
    accuracy = dict(result.accuracy)
    accuracy.update(
        pair_lower=float(result.lower),
        lower_from="pairs realised by neighbouring datasets (mechanisms.sampling.lower_bound_description)",
        note="the certified pair of this sampling scheme/relation is not realised by a dataset; lower comes from "
        "pairs that are, and the gap to upper is not a numerical shortfall (achieved refers to the pair's bracket)",
    )
    return dataclasses.replace(result, lower=lower, accuracy=accuracy)


def _labelled(result: Any, description: Description) -> Any:
    """``result`` with the description's relation and sampling scheme written into its
    ``neighbouring`` and ``sampling`` fields (engines count flattened components and need
    not know them)."""
    labels = result_labels(description)
    if all(getattr(result, name, value) == value for name, value in labels.items()):
        return result
    return dataclasses.replace(result, **labels)


def __getattr__(name: str):
    """Names that moved in 0.2 (see :mod:`dpforge._deprecated`)."""
    return _deprecated.moved_name(__name__, name)
