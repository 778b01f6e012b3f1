"""Subsampling and composition as combinators over mechanism descriptions.

They mirror dp_accounting's event vocabulary (``PoissonSampledDpEvent``,
``ComposedDpEvent``/``SelfComposedDpEvent``): a description says what happened; an
accountant in :mod:`dpforge.accounting` decides how to count it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

import numpy as np

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.pairs import Direction, PrivacyLoss
from dpforge.mechanisms.sampling import (
    EffectiveMechanism,
    SampledWithoutReplacement,
    Shuffled,
    WithRelation,
    doubled,
    unwrap,
)
from dpforge.validation import LARGEST_COUNT, SMALLEST_PROBABILITY, require_count, require_sampling_rate, shown


@dataclass(frozen=True)
class PoissonSampled:
    """``mechanism`` run on a Poisson subsample: each record kept with ``sampling_rate``.

    Under add-or-remove neighbours the two directions give different pairs
    (docs/design.md §2): remove P = (1-q) Q0 + q P0 vs Q0, add the reverse roles.
    """

    mechanism: "Description"
    sampling_rate: float

    def __post_init__(self) -> None:
        require_sampling_rate("sampling_rate", self.sampling_rate)
        if not isinstance(self.mechanism, (Mechanism, PoissonSampled)):
            raise ParameterError(
                "PoissonSampled.mechanism must be a mechanism or a PoissonSampled mechanism, "
                f"got {type(self.mechanism).__name__}"
            )

    def base(self) -> tuple[Mechanism, float]:
        """The innermost mechanism and the overall sampling rate (rates multiply)."""
        inner = self.mechanism
        rate = float(self.sampling_rate)
        while isinstance(inner, PoissonSampled):
            rate *= float(inner.sampling_rate)
            inner = inner.mechanism
        if rate < SMALLEST_PROBABILITY:
            # each rate was in (0, 1], their product is not (1e-200 twice underflowed to 0)
            raise ParameterError(
                f"the nested PoissonSampled sampling rates multiply to {rate!r}, below {SMALLEST_PROBABILITY!r} "
                "(the smallest normal double); sample once at a representable rate"
            )
        return inner, rate

    def privacy_loss_distribution(self, direction: Direction = "remove") -> PrivacyLoss:
        """Law of the privacy loss of the innermost mechanism's dominating pair at the
        overall sampling rate, in one neighbouring direction."""
        mechanism, rate = self.base()
        return PrivacyLoss(mechanism.dominating_pair(), rate, direction)

    def privacy_loss(self, x: np.ndarray | float, direction: Direction = "remove") -> np.ndarray:
        """L(x) = log p(x)/q(x) of the subsampled pair at an output x of the base pair."""
        return self.privacy_loss_distribution(direction).privacy_loss(x)


@dataclass(frozen=True)
class Composed:
    """Adaptive composition of ``parts``: a tuple of (description, count) pairs.

    Parts may be mechanisms, subsampled mechanisms or other ``Composed`` descriptions
    (nesting multiplies counts).  Lists are converted to tuples so the object stays
    hashable and immutable.
    """

    parts: tuple[tuple["Description", int], ...]

    def __init__(self, parts: Iterable[tuple["Description", int]]) -> None:
        checked = []
        if isinstance(parts, (str, bytes, Mapping)) or not isinstance(parts, Iterable):
            raise ParameterError(f"Composed.parts must be a sequence of (description, count) pairs, got {shown(parts)}")
        for index, item in enumerate(parts):
            try:
                description, count = item
            except (TypeError, ValueError):
                raise ParameterError(f"Composed.parts[{index}] must be a (description, count) pair, got {item!r}") from None
            if not isinstance(description, (Mechanism, PoissonSampled, Composed, SampledWithoutReplacement, Shuffled)):
                raise ParameterError(
                    f"Composed.parts[{index}] description must be a mechanism, PoissonSampled, "
                    f"SampledWithoutReplacement, Shuffled or Composed, got {type(description).__name__}"
                    + (" (a relation is stated once, around the whole description)" if isinstance(description, WithRelation) else "")
                )
            checked.append((description, require_count(f"Composed.parts[{index}] count", count)))
        if not checked:
            raise ParameterError("Composed.parts must contain at least one (description, count) pair")
        object.__setattr__(self, "parts", tuple(checked))


Description = Union[Mechanism, PoissonSampled, Composed, SampledWithoutReplacement, Shuffled, WithRelation]


@dataclass(frozen=True)
class Component:
    """One flattened factor of a composition: ``count`` runs of ``mechanism`` at ``sampling_rate``."""

    mechanism: Mechanism
    sampling_rate: float
    count: int

    def privacy_loss_distribution(self, direction: Direction) -> PrivacyLoss:
        """Law of the privacy loss of one run of this component in one direction."""
        return PrivacyLoss(self.mechanism.dominating_pair(), self.sampling_rate, direction)

    @property
    def symmetric(self) -> bool:
        """Remove and add laws coincide (no subsampling and a symmetric base pair)."""
        return self.sampling_rate >= 1.0 and self.mechanism.symmetric


def flatten(description: Description, multiplicity: int = 1) -> list[Component]:
    """Flatten a description into components, merging equal (mechanism, rate) factors.

    A step that is not Poisson-sampled (or unsampled) under add-or-remove becomes a
    component of rate 1 whose mechanism is an
    :class:`~dpforge.mechanisms.sampling.EffectiveMechanism` carrying the certified pair
    of its scheme and relation (an unsampled replace-one step: the
    :func:`~dpforge.mechanisms.sampling.doubled` mechanism), so every engine reads it
    through its generic path.  A :class:`~dpforge.mechanisms.sampling.Shuffled` epoch has
    no certified pair: it is refused here (one line) and accounted only by
    :func:`dpforge.accounting.shuffled.epsilon_lower_bound`."""
    merged: dict[tuple[Mechanism, float], int] = {}
    order: list[tuple[Mechanism, float]] = []
    inner, relation = unwrap(description)

    def visit(node: Description, times: int) -> None:
        if isinstance(node, Composed):
            for part, count in node.parts:
                visit(part, times * count)
            return
        if isinstance(node, Shuffled):
            raise UnsupportedError(
                "a Shuffled epoch has no certified upper bound (no tight dominating pair is known); "
                "use dpforge.accounting.shuffled.epsilon_lower_bound for its certified lower bound"
            )
        if isinstance(node, WithRelation):
            raise ParameterError("WithRelation must be the outermost node of a description (one relation per run)")
        if isinstance(node, SampledWithoutReplacement):
            mechanism, rate = EffectiveMechanism(node.mechanism, node.sampling_rate, "without-replacement", relation), 1.0
        elif isinstance(node, PoissonSampled):
            mechanism, rate = node.base()
        elif isinstance(node, Mechanism):
            mechanism, rate = node, 1.0
        else:
            raise ParameterError(f"description must be a mechanism, PoissonSampled or Composed, got {type(node).__name__}")
        if relation == "replace-one" and not isinstance(mechanism, EffectiveMechanism):
            if rate >= 1.0:
                mechanism = doubled(mechanism)
            else:
                mechanism, rate = EffectiveMechanism(mechanism, rate, "poisson", relation), 1.0
        key = (mechanism, rate)
        if key not in merged:
            merged[key] = 0
            order.append(key)
        merged[key] += times
        if merged[key] > LARGEST_COUNT:  # nested counts multiply (2**40 runs of 2**40 steps)
            raise ParameterError(f"the nested counts of one component multiply to {merged[key]:.3g} steps, more than 2**53")

    visit(inner, require_count("count", multiplicity))
    return [Component(mechanism, rate, merged[(mechanism, rate)]) for mechanism, rate in order]
