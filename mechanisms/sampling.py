"""Sampling schemes beside Poisson, and the neighbouring relation of a whole description.

* :class:`SampledWithoutReplacement` (mechanism, batch_size B, dataset_size n): every step
  uses a uniformly random batch of exactly B of the n records (q = B/n).
* :class:`Shuffled` (mechanism, batch_size, dataset_size): ONE epoch of a shuffled loader
  (a uniformly random permutation cut into ceil(n/B) consecutive batches, the
  ``DataLoader(shuffle=True, drop_last=False)`` default).  No certified upper bound is
  known, so engines refuse it and :func:`dpforge.accounting.shuffled.epsilon_lower_bound`
  reports a certified *lower* bound (compose epochs with ``Composed([(Shuffled(...), E)])``).
* :class:`WithRelation` (description, relation): the neighbouring relation of the whole
  run, ``"add-remove"`` (the default when no wrapper is used) or ``"replace-one"``.

Why the relation is one wrapper at the top: a relation is a property of the two datasets
being compared, hence of the whole run; it cannot differ between parts of one composition.
:class:`WithRelation` is accepted only as the outermost node (``Composed`` refuses it as a
part and it refuses to wrap another one), so a description has exactly one relation and
mixing two is impossible rather than silently resolved.  Every result reports it
(``neighbouring``), as do the plan, ledger and CLI layers that read it from here.

Meaning of a mechanism's parameters under replace-one: ``sensitivity`` (and a PureDP
``epsilon``) are per-record, add-or-remove quantities, as in DP-SGD where each record's
clipped gradient has norm at most C.  Replacing a record moves the query by up to twice
that, so the unsampled replace-one pair is the add-or-remove pair at twice the
sensitivity (:func:`doubled`; a PureDP epsilon doubles by group privacy).  dp-accounting's
Gaussian PLD under ``REPLACE_ONE`` uses the same convention (N(-s,.) vs N(s,.)).

The effective pairs (docs in :mod:`dpforge.mechanisms.replace_pairs`):

=================  ===============  =====================================================
scheme             relation         pair (q = sampling rate)
=================  ===============  =====================================================
none / Poisson     add-remove       the existing pairs (unchanged)
none               replace-one      the doubled mechanism's pair
Poisson, Gaussian  replace-one      ReplaceOneGaussianPair(1/sigma, q) (dp-accounting's)
Poisson, other     replace-one      SymmetrisedPair of the doubled pair at q
without repl.      replace-one      SymmetrisedPair of the doubled pair at q = B/n
without repl.      add-remove       the same pair: with a fixed batch size an added record
                                    displaces another one from the batch, so both
                                    orders of (D, D +- x) are mixtures of replace-one
                                    neighbours at rate <= B/n (advanced joint convexity,
                                    Balle, Barthe, Gaboardi 2018, Thm. 2)
=================  ===============  =====================================================
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.mechanisms.pairs import MonotonePair, PrivacyLoss
from dpforge.mechanisms.replace_pairs import ReplaceOneGaussianPair, ShuffleMaxPair, SymmetrisedPair
from dpforge.validation import require_count

#: the neighbouring relations a description may state
RELATIONS = ("add-remove", "replace-one")
#: the sampling schemes (CLI and plan spelling)
SCHEMES = ("poisson", "without-replacement", "shuffled")


def require_relation(relation: Any) -> str:
    """``relation`` if it is one of :data:`RELATIONS`, else a one-line ParameterError."""
    if relation not in RELATIONS:
        raise ParameterError(f"relation must be one of {', '.join(RELATIONS)}, got {relation!r}")
    return relation


def _require_batch(batch_size: Any, dataset_size: Any) -> tuple[int, int]:
    batch = require_count("batch_size", batch_size)
    size = require_count("dataset_size", dataset_size)
    if batch > size:
        raise ParameterError(f"batch_size must be at most dataset_size ({size}), got {batch}")
    return batch, size


def doubled(mechanism: Mechanism) -> Mechanism:
    """The unsampled replace-one equivalent of ``mechanism``: twice the per-record
    sensitivity (Gaussian: half the noise multiplier; PureDP: 2 epsilon by group privacy)."""
    if isinstance(mechanism, Gaussian):
        return dataclasses.replace(mechanism, noise_multiplier=float(mechanism.noise_multiplier) / 2.0)
    if isinstance(mechanism, PureDP):
        return PureDP(2.0 * float(mechanism.epsilon))
    if isinstance(mechanism, Laplace) or hasattr(mechanism, "sensitivity"):
        try:
            return dataclasses.replace(mechanism, sensitivity=2.0 * float(mechanism.sensitivity))
        except TypeError:  # pragma: no cover - a non-dataclass with a sensitivity attribute
            pass
    raise UnsupportedError(f"the replace-one relation is not supported for {type(mechanism).__name__}")


@dataclass(frozen=True)
class SampledWithoutReplacement:
    """``mechanism`` run on a uniformly random batch of exactly ``batch_size`` of the
    ``dataset_size`` records (sampling without replacement, q = batch_size/dataset_size).

    Certified under both relations with the symmetrised pair of
    :mod:`~dpforge.mechanisms.replace_pairs` (see the module table)."""

    mechanism: Mechanism
    batch_size: int
    dataset_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ParameterError(
                f"SampledWithoutReplacement.mechanism must be a mechanism, got {type(self.mechanism).__name__}"
            )
        batch, size = _require_batch(self.batch_size, self.dataset_size)
        object.__setattr__(self, "batch_size", batch)
        object.__setattr__(self, "dataset_size", size)

    @property
    def sampling_rate(self) -> float:
        """q = batch_size / dataset_size."""
        return self.batch_size / self.dataset_size


@dataclass(frozen=True)
class Shuffled:
    """ONE epoch of a shuffled fixed-size-batch loader running ``mechanism`` (a Gaussian)
    on ceil(dataset_size / batch_size) batches: every record is used exactly once.

    Engines refuse it (no tight certified upper bound is known); see
    :func:`dpforge.accounting.shuffled.epsilon_lower_bound` for the certified lower bound."""

    mechanism: Mechanism
    batch_size: int
    dataset_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Gaussian):
            raise UnsupportedError(
                f"Shuffled supports a Gaussian mechanism only (its lower-bound construction), got "
                f"{type(self.mechanism).__name__}"
            )
        batch, size = _require_batch(self.batch_size, self.dataset_size)
        object.__setattr__(self, "batch_size", batch)
        object.__setattr__(self, "dataset_size", size)

    @property
    def steps(self) -> int:
        """Steps of one epoch: ceil(dataset_size / batch_size)."""
        return int(math.ceil(self.dataset_size / self.batch_size))

    @property
    def sampling_rate(self) -> float:
        """batch_size / dataset_size, the rate of the Poisson run usually reported for it."""
        return self.batch_size / self.dataset_size

    def lower_bound_pair(self, relation: str) -> ShuffleMaxPair:
        """The max-test pair of one epoch (certified lower bound, never an upper bound).

        Construction: every other record contributes 0, the differing record contributes
        +e (norm = the clipping norm).  Replace-one: it is replaced by a record that
        contributes 0, in the same position of the permutation.  Add-remove: it is removed;
        the epoch must keep its number of steps, ceil((n-1)/B) = ceil(n/B), else the
        construction does not apply and this raises UnsupportedError."""
        relation = require_relation(relation)
        if relation == "add-remove" and math.ceil((self.dataset_size - 1) / self.batch_size) != self.steps:
            raise UnsupportedError(
                f"the shuffled lower bound under add-remove needs ceil((n-1)/B) = ceil(n/B) steps; "
                f"dataset_size={self.dataset_size}, batch_size={self.batch_size} change the step count"
            )
        return ShuffleMaxPair(mu=1.0 / float(self.mechanism.noise_multiplier), steps=self.steps)


@dataclass(frozen=True)
class EffectiveMechanism(Mechanism):
    """What an engine sees for a step that is not a Poisson/add-remove one: the original
    ``mechanism``, its ``sampling_rate``, ``scheme`` and ``relation``, with the certified
    pair of the module table as its dominating pair (taken at sampling rate 1).  Built by
    :func:`~dpforge.mechanisms.combinators.flatten`, not by users.  Its pair is symmetric
    (both orders of a neighbouring pair have the same law), hence ``symmetric``."""

    mechanism: Mechanism
    sampling_rate: float
    scheme: str
    relation: str

    symmetric = True

    def dominating_pair(self) -> MonotonePair:
        """The pair of the module table."""
        base = self.mechanism
        q = float(self.sampling_rate)
        if self.scheme == "poisson" and self.relation == "replace-one" and isinstance(base, Gaussian) and q < 1.0:
            return ReplaceOneGaussianPair(mu=1.0 / float(base.noise_multiplier), q=q)
        pair = doubled(base).dominating_pair()
        if q >= 1.0:
            return pair
        return SymmetrisedPair(PrivacyLoss(pair, q, "remove"))


@dataclass(frozen=True)
class ShuffledLowerBoundMechanism(Mechanism):
    """The max-test pair of a :class:`Shuffled` epoch as a mechanism, for the lower-bound
    routine only (flatten never produces it)."""

    shuffled: Shuffled
    relation: str

    symmetric = True  # the remove order alone gives the lower bound

    def dominating_pair(self) -> ShuffleMaxPair:
        """:meth:`Shuffled.lower_bound_pair`."""
        return self.shuffled.lower_bound_pair(self.relation)


@dataclass(frozen=True)
class WithRelation:
    """``description`` under the neighbouring ``relation`` ("add-remove" or "replace-one");
    only as the outermost node (see the module docstring)."""

    description: Any
    relation: str = "replace-one"

    def __post_init__(self) -> None:
        require_relation(self.relation)
        if isinstance(self.description, WithRelation):
            raise ParameterError("WithRelation cannot wrap another WithRelation: a description has one relation")


def relation_of(description: Any) -> str:
    """The relation a description states ("add-remove" when it has no wrapper)."""
    return description.relation if isinstance(description, WithRelation) else "add-remove"


def unwrap(description: Any) -> tuple[Any, str]:
    """(inner description, relation)."""
    if isinstance(description, WithRelation):
        return description.description, description.relation
    return description, "add-remove"


def schemes_of(description: Any) -> tuple[str, ...]:
    """The sampling schemes used in ``description`` ("poisson" also for unsampled steps,
    as results have always written it), in order of first use."""
    from dpforge.mechanisms.combinators import Composed

    seen: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, WithRelation):
            visit(node.description)
            return
        if isinstance(node, Composed):
            for part, _ in node.parts:
                visit(part)
            return
        name = "without-replacement" if isinstance(node, SampledWithoutReplacement) else (
            "shuffled" if isinstance(node, Shuffled) else "poisson"
        )
        if name not in seen:
            seen.append(name)

    visit(description)
    return tuple(seen)


def result_labels(description: Any) -> dict[str, str]:
    """``{"neighbouring": ..., "sampling": ...}`` for a result record: "add_remove" or
    "replace_one"; the schemes joined by "+"."""
    return {
        "neighbouring": relation_of(description).replace("-", "_"),
        "sampling": "+".join(schemes_of(description)),
    }


def lower_bound_description(description: Any) -> Any:
    """A description (add-remove vocabulary, no wrapper) whose pairs are each *realised*
    by an actual pair of neighbouring datasets of the run, or None when the description's
    own pairs already are (Poisson and unsampled steps under add-remove; unsampled and
    Poisson-Gaussian steps under replace-one).  An engine's lower bound for it is a lower
    bound on the run's epsilon; the symmetrised pairs' own lower bounds are only lower
    bounds on the certified upper bound.

    * fixed-size batch (either relation): every other record contributes +g, the differing
      one -g (or is absent): per step N(0) vs (1-q) N(0) + q N(-2g), in both orders and
      uniformly over the steps: ``PoissonSampled(doubled(mechanism), B/n)`` under
      add-remove (its remove and add pairs);
    * Poisson, replace-one, non-Gaussian: the replacing record contributes 0:
      ``PoissonSampled(mechanism, q)`` under add-remove (its remove pair)."""
    from dpforge.mechanisms.combinators import Composed, PoissonSampled

    inner, relation = unwrap(description)
    changed = False

    def realised(mechanism: Mechanism) -> Mechanism:
        """The unsampled replace-one pair an actual pair of datasets produces: the doubled
        mechanism for a query with a sensitivity (the record's +g replaced by -g), but
        PureDP(epsilon) itself for a bare epsilon-DP step: PureDP(2 epsilon) bounds it by
        group privacy but no epsilon-DP mechanism realises that pair (its group-privacy
        trade-off is strictly better), so its lower end is no lower bound."""
        nonlocal changed
        if isinstance(mechanism, PureDP):
            changed = True
            return mechanism
        return doubled(mechanism)

    def visit(node: Any) -> Any:
        nonlocal changed
        if isinstance(node, Composed):
            return Composed([(visit(part), count) for part, count in node.parts])
        if isinstance(node, SampledWithoutReplacement):
            changed = True
            return PoissonSampled(realised(node.mechanism), node.sampling_rate)
        if relation == "add-remove":
            return node
        if isinstance(node, PoissonSampled):
            mechanism, rate = node.base()
            if rate >= 1.0:
                return realised(mechanism)
            if isinstance(mechanism, Gaussian):
                return EffectiveMechanism(mechanism, rate, "poisson", relation)
            changed = True
            return PoissonSampled(mechanism, rate)
        if isinstance(node, Mechanism):
            return realised(node)
        return node

    mapped = visit(inner)
    return mapped if changed else None
