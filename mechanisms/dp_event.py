"""Conversion between dpforge descriptions and dp_accounting's ``DpEvent`` vocabulary.

``dp_accounting`` (Google, ``pip install dp-accounting``) is an *optional* dependency: it
is imported only when one of these functions is called.

Mapping (both directions)::

    Gaussian(noise_multiplier, sensitivity)  <->  GaussianDpEvent(noise_multiplier)
    Laplace(scale, sensitivity)              <->  LaplaceDpEvent(noise_multiplier=scale/sensitivity)
    PureDP(epsilon)                          <->  RandomizedResponseDpEvent(
                                                      noise_parameter=2/(1+e^epsilon), num_buckets=2)
    PoissonSampled(mechanism, q)             <->  PoissonSampledDpEvent(q, event)
    SampledWithoutReplacement(Gaussian(s), B, n)
                                             <->  SampledWithoutReplacementDpEvent(n, B,
                                                      GaussianDpEvent(s / 2))
    WithRelation(d, relation)                 ->  the event of d (the relation is the
                                                  accountant's: see neighboring_relation)
    Composed([(d1, c1), (d2, c2), ...])      <->  ComposedDpEvent([e1 or SelfComposedDpEvent(e1, c1), ...])

Notes on exactness:

* Both libraries define the Gaussian ``noise_multiplier`` as noise std / L2 sensitivity,
  and dpforge's Gaussian dominating pair depends on nothing else.  The sensitivity is not
  part of a ``GaussianDpEvent``, so ``Gaussian(s, sensitivity=c)`` comes back as
  ``Gaussian(s)`` (sensitivity 1): an *equivalent* description with the same privacy
  profile; the round trip is exact (equal objects) when ``sensitivity == 1``.
* dp_accounting's Laplace ``noise_multiplier`` is scale / L1 sensitivity; dpforge's
  Laplace pair depends only on sensitivity/scale.  ``Laplace(b, sensitivity=c)`` comes
  back as ``Laplace(b / c)`` (sensitivity 1), again equivalent and exact when ``c == 1``
  (up to the floating-point rounding of ``b / c``).
* dp_accounting's randomized response over k buckets with noise parameter p outputs the
  true bucket with probability 1 - p + p/k and each other bucket with probability p/k.
  For k = 2 the output is truthful with probability 1 - p/2, so its privacy loss is
  +-log((1 - p/2)/(p/2)) = +-log(2/p - 1).  Binary randomised response with
  Pr(truth) = e^eps/(1+e^eps) (dpforge's ``PureDP`` pair) therefore has
  p = 2/(1 + e^eps) and, conversely, eps = log((2 - p)/p).  That pair dominates every
  eps-DP release (Kairouz, Oh, Viswanath 2015) for whatever neighbouring relation the
  eps-DP guarantee refers to; note that dp_accounting's ``PLDAccountant`` accepts a
  ``RandomizedResponseDpEvent`` only with ``NeighboringRelation.REPLACE_ONE``, under
  which its pair is exactly dpforge's.  k-ary randomised response with k > 2 is *not*
  equivalent to binary randomised response (it is strictly more private at the same
  eps), so it is rejected instead of being converted lossily; k = 1 releases nothing
  and is treated like ``NoOpDpEvent``.
* A ``Composed`` always becomes a ``ComposedDpEvent`` (even with one part); a part with
  count 1 becomes the bare event, a larger count a ``SelfComposedDpEvent``.  Hence
  ``from_dp_event(to_dp_event(d)) == d`` for every description whose mechanisms have
  sensitivity 1.  In the other direction a top-level ``SelfComposedDpEvent`` comes back
  as a one-part ``ComposedDpEvent``, and nested ``SelfComposedDpEvent``/``ComposedDpEvent``
  keep their nesting as nested ``Composed`` parts.
* Fixed-size batches: dp-accounting accounts ``SampledWithoutReplacementDpEvent`` only in
  its RDP accountant under ``NeighboringRelation.REPLACE_ONE``, with the Wang, Balle,
  Kasiviswanathan (2019) bound, where the Gaussian noise multiplier is relative to the
  *replace-one* sensitivity (its q = 1 value is alpha/(2 s^2)).  dpforge's sensitivities
  are per record (add-or-remove), and replacing a record moves the sum by twice that, so
  dpforge's noise multiplier s is written as s/2 and read back doubled: the two
  descriptions then mean the same release.  (dp-accounting's PLD accountant reads a
  ``GaussianDpEvent`` under ``REPLACE_ONE`` per record, N(-1, s^2) vs N(1, s^2), as
  dpforge does; the conversion of Poisson and unsampled events is unchanged.)  Only a
  Gaussian inside a ``SampledWithoutReplacementDpEvent`` is converted.
* The relation is not part of a ``DpEvent`` (it is the accountant's
  ``neighboring_relation``): :func:`to_dp_event` drops a ``WithRelation`` wrapper and
  :func:`neighboring_relation` gives the value to construct the accountant with;
  :func:`from_dp_event` takes ``relation=`` to wrap the description.
* ``NoOpDpEvent`` (and ``PoissonSampledDpEvent`` with sampling probability 0, and
  ``SelfComposedDpEvent`` with count 0, which dp_accounting treats the same way) are
  skipped inside compositions; an event made only of such no-ops has nothing to account
  and raises ``ValueError``.  Anything else (``NonPrivateDpEvent``, sampling with
  replacement (which no dp-accounting accountant accounts), tree aggregation, zCDP, ...)
  raises ``ValueError`` naming the event type.
"""

from __future__ import annotations

import math
from typing import Any

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.mechanisms.combinators import Composed, Description, PoissonSampled
from dpforge.mechanisms.sampling import SampledWithoutReplacement, Shuffled, WithRelation, require_relation, unwrap

__all__ = ["from_dp_event", "neighboring_relation", "to_dp_event"]

_INSTALL_HINT = (
    "converting to or from dp_accounting DpEvents needs the optional dependency "
    "dp-accounting; install it with `pip install dp-accounting`"
)


def _dp_event_module() -> Any:
    """Import ``dp_accounting.dp_event`` lazily, with an actionable error if absent."""
    try:
        from dp_accounting import dp_event
    except ImportError as error:  # pragma: no cover - exercised only without the package
        raise ImportError(_INSTALL_HINT) from error
    return dp_event


# ---------------------------------------------------------------------------------------
# randomized response <-> pure DP
# ---------------------------------------------------------------------------------------
def _rr_noise_parameter(epsilon: float) -> float:
    """p = 2 / (1 + e^eps): binary RR with Pr(truth) = 1 - p/2 = e^eps/(1+e^eps)."""
    if epsilon > 700.0:
        # 2/(1+e^eps) = 2 e^{-eps}/(1+e^{-eps}); computed without overflow
        p = 2.0 * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))
    else:
        p = 2.0 / (1.0 + math.exp(epsilon))
    if p <= 0.0:
        raise UnsupportedError(
            f"PureDP epsilon={epsilon!r} is too large to be written as a RandomizedResponseDpEvent "
            "(its noise_parameter 2/(1+e^epsilon) underflows to 0, which dp_accounting reads as non-private)"
        )
    return min(p, 1.0)


def _rr_epsilon(noise_parameter: float) -> float:
    """eps = log((2 - p)/p) = log1p(2(1 - p)/p), the inverse of :func:`_rr_noise_parameter`."""
    return math.log1p(2.0 * (1.0 - noise_parameter) / noise_parameter)


# ---------------------------------------------------------------------------------------
# dpforge -> DpEvent
# ---------------------------------------------------------------------------------------
def to_dp_event(description: Description) -> Any:
    """The dp_accounting ``DpEvent`` describing the same releases as ``description``.

    See the module docstring for the mapping.  Mechanism sensitivities are folded into
    the noise parameters (the returned event is equivalent, not a carrier of the
    sensitivity).  Raises ``ImportError`` if dp-accounting is not installed and
    ``ValueError`` for a description it cannot express.
    """
    dp_event = _dp_event_module()
    inner, _ = unwrap(description)
    return _to_event(inner, dp_event)


def neighboring_relation(description: Description) -> Any:
    """dp_accounting's ``NeighboringRelation`` for the relation ``description`` states
    (``ADD_OR_REMOVE_ONE`` unless it is wrapped in ``WithRelation(..., "replace-one")``)."""
    import dp_accounting

    _, relation = unwrap(description)
    names = {"add-remove": "ADD_OR_REMOVE_ONE", "replace-one": "REPLACE_ONE"}
    return getattr(dp_accounting.NeighboringRelation, names[relation])


def _to_event(description: Any, dp_event: Any) -> Any:
    if isinstance(description, Gaussian):
        return dp_event.GaussianDpEvent(noise_multiplier=float(description.noise_multiplier))
    if isinstance(description, Laplace):
        if description.dimension != 1:
            raise UnsupportedError(
                f"Laplace with dimension={description.dimension} has no DpEvent: LaplaceDpEvent is a scalar release"
            )
        multiplier = float(description.scale) / float(description.sensitivity)
        if not (math.isfinite(multiplier) and multiplier > 0.0):
            raise ParameterError(
                f"Laplace scale/sensitivity = {description.scale!r}/{description.sensitivity!r} "
                "is not a finite positive LaplaceDpEvent noise_multiplier"
            )
        return dp_event.LaplaceDpEvent(noise_multiplier=multiplier)
    if isinstance(description, PureDP):
        return dp_event.RandomizedResponseDpEvent(
            noise_parameter=_rr_noise_parameter(float(description.epsilon)), num_buckets=2
        )
    if isinstance(description, PoissonSampled):
        return dp_event.PoissonSampledDpEvent(
            sampling_probability=float(description.sampling_rate),
            event=_to_event(description.mechanism, dp_event),
        )
    if isinstance(description, SampledWithoutReplacement):
        if not isinstance(description.mechanism, Gaussian):
            raise UnsupportedError(
                f"SampledWithoutReplacement of {type(description.mechanism).__name__} has no DpEvent that "
                "dp-accounting accounts; only a Gaussian is converted"
            )
        return dp_event.SampledWithoutReplacementDpEvent(
            source_dataset_size=int(description.dataset_size),
            sample_size=int(description.batch_size),
            event=dp_event.GaussianDpEvent(noise_multiplier=float(description.mechanism.noise_multiplier) / 2.0),
        )
    if isinstance(description, Shuffled):
        raise UnsupportedError("a Shuffled epoch has no dp_accounting DpEvent (no accountant bounds it)")
    if isinstance(description, WithRelation):
        raise ParameterError("WithRelation must be the outermost node of a description (one relation per run)")
    if isinstance(description, Composed):
        events = []
        for part, count in description.parts:
            event = _to_event(part, dp_event)
            events.append(event if count == 1 else dp_event.SelfComposedDpEvent(event=event, count=int(count)))
        return dp_event.ComposedDpEvent(events=events)
    if isinstance(description, Mechanism):
        raise UnsupportedError(f"{type(description).__name__} has no dp_accounting DpEvent equivalent")
    raise ParameterError(
        "description must be a dpforge mechanism, PoissonSampled or Composed, "
        f"got {type(description).__name__}"
    )


# ---------------------------------------------------------------------------------------
# DpEvent -> dpforge
# ---------------------------------------------------------------------------------------
def from_dp_event(event: Any, relation: str = "add-remove") -> Description:
    """The dpforge description of a dp_accounting ``DpEvent``.

    Supports ``GaussianDpEvent``, ``LaplaceDpEvent``, binary ``RandomizedResponseDpEvent``,
    ``PoissonSampledDpEvent`` of those, ``SelfComposedDpEvent`` and (nested)
    ``ComposedDpEvent``; ``NoOpDpEvent`` parts are skipped.  Raises ``ValueError`` naming
    the event type for anything else, for non-private parameters (noise 0), and for an
    event that consists only of no-ops.  Raises ``ImportError`` if dp-accounting is not
    installed.
    """
    dp_event = _dp_event_module()
    if not isinstance(event, dp_event.DpEvent):
        raise ParameterError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}")
    relation = require_relation(relation)
    description = _from_event(event, dp_event)
    if description is None:
        raise ParameterError(
            f"{type(event).__name__} contains no private release (only no-op events); "
            "there is nothing to account"
        )
    return description if relation == "add-remove" else WithRelation(description, relation)


def _require_positive_parameter(event: Any, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise ParameterError(f"{type(event).__name__}.{name} must be a number, got {value!r}")
    if not float(value) > 0.0:
        raise ParameterError(
            f"{type(event).__name__}.{name}={value!r} describes a non-private release "
            "(infinite epsilon); dpforge needs a value > 0"
        )


def _from_event(event: Any, dp_event: Any) -> Description | None:
    """Convert one event; ``None`` means 'no privacy impact' (skipped by the caller)."""
    name = type(event).__name__
    if isinstance(event, dp_event.NoOpDpEvent):
        return None
    if isinstance(event, dp_event.GaussianDpEvent):
        _require_positive_parameter(event, "noise_multiplier", event.noise_multiplier)
        return Gaussian(noise_multiplier=float(event.noise_multiplier))
    if isinstance(event, dp_event.LaplaceDpEvent):
        _require_positive_parameter(event, "noise_multiplier", event.noise_multiplier)
        return Laplace(scale=float(event.noise_multiplier))
    if isinstance(event, dp_event.RandomizedResponseDpEvent):
        buckets = event.num_buckets
        if buckets == 1:
            return None  # a single bucket: the output carries no information
        if buckets != 2:
            raise UnsupportedError(
                f"RandomizedResponseDpEvent with num_buckets={buckets!r} is not supported: only binary "
                "randomised response (num_buckets=2) converts losslessly to PureDP"
            )
        p = event.noise_parameter
        _require_positive_parameter(event, "noise_parameter", p)
        if not float(p) <= 1.0:
            raise ParameterError(f"RandomizedResponseDpEvent.noise_parameter must be in (0, 1], got {p!r}")
        return PureDP(epsilon=_rr_epsilon(float(p)))
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        rate = event.sampling_probability
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) and not hasattr(rate, "__float__"):
            raise ParameterError(f"PoissonSampledDpEvent.sampling_probability must be a number, got {rate!r}")
        if float(rate) == 0.0:
            return None  # nobody is sampled: no privacy impact (as in dp_accounting)
        inner = _from_event(event.event, dp_event)
        if inner is None:
            return None
        if not isinstance(inner, (Mechanism, PoissonSampled)):
            raise UnsupportedError(
                f"PoissonSampledDpEvent of {type(event.event).__name__} is not supported: "
                "Poisson subsampling applies to a single mechanism (or a subsampled one)"
            )
        return PoissonSampled(inner, sampling_rate=float(rate))
    if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
        size, batch = event.source_dataset_size, event.sample_size
        for name, value in (("source_dataset_size", size), ("sample_size", batch)):
            if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
                raise ParameterError(f"SampledWithoutReplacementDpEvent.{name} must be an integer, got {value!r}")
        if int(batch) == 0:
            return None  # an empty batch releases nothing
        inner = _from_event(event.event, dp_event)
        if inner is None:
            return None
        if not isinstance(inner, Gaussian):
            raise UnsupportedError(
                f"SampledWithoutReplacementDpEvent of {type(event.event).__name__} is not supported: "
                "only a GaussianDpEvent is converted (the one dp-accounting accounts)"
            )
        return SampledWithoutReplacement(Gaussian(2.0 * float(inner.noise_multiplier)), int(batch), int(size))
    if isinstance(event, dp_event.SelfComposedDpEvent):
        part = _part(event, dp_event)
        return None if part is None else Composed([part])
    if isinstance(event, dp_event.ComposedDpEvent):
        parts = [part for part in (_part(e, dp_event) for e in event.events) if part is not None]
        return Composed(parts) if parts else None
    raise UnsupportedError(f"{name} is not supported by dpforge's DpEvent conversion")


def _part(event: Any, dp_event: Any) -> tuple[Description, int] | None:
    """A (description, count) part of a composition, or ``None`` for a no-op."""
    if isinstance(event, dp_event.SelfComposedDpEvent):
        count = event.count
        if isinstance(count, bool) or not isinstance(count, int) and not hasattr(count, "__index__"):
            raise ParameterError(f"SelfComposedDpEvent.count must be an integer >= 0, got {count!r}")
        if int(count) < 0:
            raise ParameterError(f"SelfComposedDpEvent.count must be an integer >= 0, got {count!r}")
        if int(count) == 0:
            return None
        inner = _from_event(event.event, dp_event)
        return None if inner is None else (inner, int(count))
    inner = _from_event(event, dp_event)
    return None if inner is None else (inner, 1)
